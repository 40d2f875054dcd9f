// Command native is the native controller-runtime controller that the
// end-to-end benchmark (hack/benche2e) runs against the operator. It has
// exactly the logic of the widget module (modules/widget/main.go):
//
//   - status.observedGeneration is metadata.generation;
//   - status.summary is "<spec.size> x <spec.color>" (size defaults to 1,
//     color to grey);
//   - condition Ready is True (reason Reconciled) for a valid spec, and
//     False with reason InvalidSpec, summary "invalid", a Warning Event and a
//     terminal error (no retry until the spec changes) when spec.size is
//     outside 0..100; its lastTransitionTime is kept while its status does
//     not change;
//
// and it writes the status as the operator does (applyStatus in
// host/internal/reconciler/apply.go): server-side apply on the status
// subresource, with a field owner and forced ownership, only when the
// status it computed differs from the observed one, with the same number of
// workers. It works as a native controller would: on typed objects from
// controller-runtime's cache.
//
// It reconciles any kind of the Widget's schema at version v1alpha1
// (--group, --kind), so that the many-module case can run one process per
// kind.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxSize is the largest valid spec.size (as in modules/widget).
const MaxSize = 100

// Version is shown in the Ready condition's message, as the module's is.
const Version = "1"

// Widget is the typed form of the example Widget kind (examples/crds).
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is a Widget's spec.
type WidgetSpec struct {
	Size  *int64 `json:"size,omitempty"`
	Color string `json:"color,omitempty"`
}

// WidgetStatus is a Widget's status, as the widget module writes it.
type WidgetStatus struct {
	ObservedGeneration int64              `json:"observedGeneration"`
	Summary            string             `json:"summary,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (w *Widget) DeepCopyObject() runtime.Object { return w.DeepCopy() }

// DeepCopy copies w.
func (w *Widget) DeepCopy() *Widget {
	if w == nil {
		return nil
	}
	out := &Widget{TypeMeta: w.TypeMeta, Spec: w.Spec, Status: w.Status}
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if w.Spec.Size != nil {
		out.Spec.Size = ptr.To(*w.Spec.Size)
	}
	if w.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(w.Status.Conditions))
		for i := range w.Status.Conditions {
			w.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := &WidgetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Widget, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}

// statusApply is the apply configuration of a Widget's status: what a
// generated apply configuration would marshal, with every field the
// controller owns.
type statusApply struct {
	APIVersion *string       `json:"apiVersion"`
	Kind       *string       `json:"kind"`
	Metadata   applyMetadata `json:"metadata"`
	Status     *WidgetStatus `json:"status"`
}

type applyMetadata struct {
	Name      *string `json:"name"`
	Namespace *string `json:"namespace"`
}

func (a *statusApply) IsApplyConfiguration() {}
func (a *statusApply) GetName() *string      { return a.Metadata.Name }
func (a *statusApply) GetNamespace() *string { return a.Metadata.Namespace }
func (a *statusApply) GetKind() *string      { return a.Kind }
func (a *statusApply) GetAPIVersion() *string {
	return a.APIVersion
}

// reconciler reconciles one Widget kind.
type reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	gvk      schema.GroupVersionKind
	owner    string // the field owner, as the module's name is the operator's
}

// Reconcile computes a Widget's status from its spec and applies it when it
// differs from the observed one.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	w := &Widget{}
	if err := r.client.Get(ctx, req.NamespacedName, w); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	gen := w.Generation
	size := int64(1)
	if w.Spec.Size != nil {
		size = *w.Spec.Size
	}
	color := w.Spec.Color
	if color == "" {
		color = "grey"
	}
	status := WidgetStatus{ObservedGeneration: gen, Conditions: []metav1.Condition{}}
	ready := metav1.Condition{Type: "Ready", ObservedGeneration: gen}
	var terminal error
	if size < 0 || size > MaxSize {
		msg := fmt.Sprintf("spec.size %d is outside 0..%d; set spec.size within range", size, MaxSize)
		status.Summary = "invalid"
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidSpec", msg
		log.FromContext(ctx).Info(msg)
		terminal = reconcile.TerminalError(errors.New(msg))
	} else {
		status.Summary = fmt.Sprintf("%d x %s", size, color)
		ready.Status, ready.Reason = metav1.ConditionTrue, "Reconciled"
		ready.Message = fmt.Sprintf("generation %d reconciled by widget v%s", gen, Version)
	}
	// As the SDK's SetCondition: the transition time is kept while the
	// condition's status does not change.
	ready.LastTransitionTime = metav1.Now()
	if old := meta.FindStatusCondition(w.Status.Conditions, "Ready"); old != nil && old.Status == ready.Status && !old.LastTransitionTime.IsZero() {
		ready.LastTransitionTime = old.LastTransitionTime
	}
	status.Conditions = append(status.Conditions, ready)

	if !equality.Semantic.DeepEqual(w.Status, status) {
		apply := &statusApply{
			APIVersion: ptr.To(r.gvk.GroupVersion().String()),
			Kind:       ptr.To(r.gvk.Kind),
			Metadata:   applyMetadata{Name: ptr.To(w.Name), Namespace: ptr.To(w.Namespace)},
			Status:     &status,
		}
		if err := r.client.Status().Apply(ctx, apply, client.FieldOwner(r.owner), client.ForceOwnership); err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, err
		}
	}
	if terminal != nil {
		r.recorder.Eventf(w, nil, corev1.EventTypeWarning, "InvalidSpec", "Reconcile", "%s", ready.Message)
		return reconcile.Result{}, terminal
	}
	return reconcile.Result{}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "native: error:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		group       = flag.String("group", "examples.wasmreconcile.io", "group of the kind to reconcile (version v1alpha1)")
		kind        = flag.String("kind", "Widget", "kind to reconcile: any kind with the Widget's schema")
		name        = flag.String("name", "widget", "controller name and status field owner (the operator uses the module's name)")
		workers     = flag.Int("workers", 4, "concurrent reconciles (the operator's --max-instances)")
		metricsAddr = flag.String("metrics-bind-address", "0", `address of the metrics endpoint; "0" disables it`)
		probeAddr   = flag.String("health-probe-bind-address", "0", `address of /healthz and /readyz (503 until the cache has synced); "0" disables them`)
	)
	zapOpts := zap.Options{Development: true, Level: zapcore.InfoLevel}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse() // --kubeconfig is controller-runtime's, on flag.CommandLine
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	gvk := schema.GroupVersionKind{Group: *group, Version: "v1alpha1", Kind: *kind}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	scheme.AddKnownTypeWithName(gvk, &Widget{})
	scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind(*kind+"List"), &WidgetList{})
	metav1.AddToGroupVersion(scheme, gvk.GroupVersion())

	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: *probeAddr,
	})
	if err != nil {
		return err
	}
	if *probeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return errors.New("cache not synced")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	r := &reconciler{client: mgr.GetClient(), recorder: mgr.GetEventRecorder(*name), gvk: gvk, owner: *name}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(*name).
		For(&Widget{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(r); err != nil {
		return err
	}
	ctrl.Log.WithName("native").Info("starting", "kind", gvk.String(), "workers", *workers)
	return mgr.Start(ctrl.SetupSignalHandler())
}
