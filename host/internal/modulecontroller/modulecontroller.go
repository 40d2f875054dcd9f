// Package modulecontroller reconciles ReconcileModule objects (package
// api/v1alpha1): it turns each object's spec into a module source and a
// supervisor.Spec, has the supervisor fetch, verify, load and swap the
// module in, and reports the outcome and the module's statistics in the
// object's status, conditions and Events. Module load-health warnings
// (SyncFailed, CacheStale) are recorded as Events on the object. Limits
// over the operator's ceilings (engine.Options.Ceilings) are clamped by the
// engine; the controller reports the limits in effect in
// status.effectiveLimits, the clamps in the LimitsClamped condition, and
// each new set of clamps in one Warning Event.
package modulecontroller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
)

// Condition types and reasons of a ReconcileModule's status.
const (
	ConditionReady      = "Ready"      // a version serves (and is not paused)
	ConditionLoading    = "Loading"    // new bytes are being fetched and compiled
	ConditionLoadFailed = "LoadFailed" // the last spec could not be loaded
	// ConditionLimitsClamped is True when a limit of the version serving
	// (from spec.limits, the operator's flags or the manifest) was over an
	// operator ceiling and was lowered to it; its message lists each.
	ConditionLimitsClamped = "LimitsClamped"

	ReasonLoaded         = "Loaded"
	ReasonPaused         = "Paused"
	ReasonFetching       = "Fetching"
	ReasonFetchFailed    = "FetchFailed"
	ReasonSourceRefused  = "SourceRefused" // the operator's source policy refused the source (docs/sources.md)
	ReasonDigestMismatch = "DigestMismatch"
	ReasonInvalidModule  = "InvalidModule"
	ReasonNameMismatch   = "NameMismatch"  // the manifest names the module differently
	ReasonKindsMismatch  = "KindsMismatch" // spec.for, owns or reads disagree with the manifest
	ReasonNameConflict   = "NameConflict"  // a file module of the same name runs
	ReasonKindConflict   = "KindConflict"  // another module already reconciles spec.for's kind
	ReasonLimitsClamped  = "LimitsClamped" // a limit was lowered to an operator ceiling
	ReasonWithinCeilings = "WithinCeilings"
	ReasonSyncFailed     = supervisor.ReasonSyncFailed
	// ReasonCachesNotSynced: Ready is False because the module's caches
	// cannot sync (a kind not served, a kind the operator may not list);
	// the message says why. The other modules are not affected.
	ReasonCachesNotSynced = "CachesNotSynced"
	ReasonCacheStale      = supervisor.ReasonCacheStale

	// ConditionDraining is True while a deleted ReconcileModule waits for
	// its module's finalizer to be removed from the module's objects; its
	// message counts the objects still holding it.
	ConditionDraining = "Draining"
	ReasonDraining    = "Draining"
	ReasonDeleting    = "Deleting"
)

// Values of status.code: whether the serving version's code is in memory
// (engine.Module.Loaded).
const (
	CodeLoaded   = "Loaded"
	CodeUnloaded = "Unloaded"
)

// DrainFinalizer is the finalizer of a ReconcileModule whose module
// declares a finalizer: the ReconcileModule stays until the module's
// finalizer is removed from every object of its kind, so that deleting it
// leaves no object stuck terminating.
const DrainFinalizer = "wasmreconcile.io/drain"

// Controller reconciles ReconcileModules.
type Controller struct {
	client     client.Client
	reader     client.Reader // live reads of ConfigMaps and Secrets: no cluster-wide Secret cache
	supervisor *supervisor.Supervisor
	recorder   recorder.EventRecorder
	opts       Options
	log        logr.Logger
	leader     func() bool // whether this replica leads: only the leader writes

	// By module name. Reconcile runs on several workers (Options.Workers),
	// never two for one name: each map is locked, its entries are not.
	applied   lockedMap[applied]                   // the generation serving
	failedGen lockedMap[applied]                   // the generation that last failed to load
	written   lockedMap[writtenStatus]             // the status last written
	mu        sync.Mutex                           // guards objects
	objects   map[string]*v1alpha1.ReconcileModule // the object last seen, for health Events
}

// lockedMap is a map safe for concurrent use.
type lockedMap[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (l *lockedMap[V]) get(k string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	return v, ok
}

func (l *lockedMap[V]) set(k string, v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]V{}
	}
	l.m[k] = v
}

func (l *lockedMap[V]) del(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, k)
}

type writtenStatus struct {
	uid    types.UID
	status v1alpha1.ReconcileModuleStatus
}

type applied struct {
	uid        types.UID // a ReconcileModule deleted and created again is new
	generation int64
}

// Setup registers the controller with mgr. It needs the ReconcileModule CRD
// installed and v1alpha1 in mgr's scheme.
func Setup(mgr ctrl.Manager, sup *supervisor.Supervisor, opts Options) error {
	gvk := v1alpha1.GroupVersion.WithKind("ReconcileModule")
	if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return fmt.Errorf("the ReconcileModule CRD is not installed (%w); apply config/crd, or run without ReconcileModules (--reconcile-modules=false)", err)
	}
	if err := opts.URLPolicy.Validate(); err != nil {
		return err
	}
	c := &Controller{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), supervisor: sup,
		recorder: mgr.GetEventRecorder("wasmreconcile"), opts: opts.withDefaults(),
		objects: map[string]*v1alpha1.ReconcileModule{},
	}
	hosts := any("any")
	if len(c.opts.URLPolicy.AllowedHosts) > 0 {
		hosts = c.opts.URLPolicy.AllowedHosts
	}
	mgr.GetLogger().WithName("reconcilemodule").Info("module source policy (docs/sources.md)",
		"sourceNamespaces", c.opts.SourceNamespaces, "urlAllowedHosts", hosts, "urlAllowPrivate", c.opts.URLPolicy.AllowPrivate,
		"customHTTPClient", opts.HTTPClient != nil)
	c.log = mgr.GetLogger().WithName("reconcilemodule")
	c.leader = func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
	// Every replica fetches and loads its modules, so that a new leader
	// reconciles at once; only the leader writes status and Events (the
	// supervisor starts module controllers only in the leader).
	everyReplica := false
	return ctrl.NewControllerManagedBy(mgr).Named("reconcilemodule").For(&v1alpha1.ReconcileModule{}).
		WithOptions(crcontroller.Options{NeedLeaderElection: &everyReplica, MaxConcurrentReconciles: c.opts.Workers}).Complete(c)
}

// failedGenIs reports whether gen of module name last failed to load.
func (c *Controller) failedGenIs(name string, gen applied) bool {
	f, ok := c.failedGen.get(name)
	return ok && f == gen
}

// event records an Event, in the leader only.
func (c *Controller) event(obj *v1alpha1.ReconcileModule, typ, reason, action, format string, args ...any) {
	if c.leader() {
		c.recorder.Eventf(obj, nil, typ, reason, action, format, args...)
	}
}

// Reconcile loads a ReconcileModule's module when its generation changes,
// removes it when the object is gone, and otherwise refreshes its status
// every StatusInterval.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	obj := &v1alpha1.ReconcileModule{}
	if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			if c.supervisor.RemoveOwned(req.Name, ownerOf(req.Name)) {
				logger.Info("ReconcileModule deleted; module stopped", "module", req.Name)
			}
			c.applied.del(req.Name)
			c.failedGen.del(req.Name)
			c.written.del(req.Name)
			c.mu.Lock()
			delete(c.objects, req.Name)
			c.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !obj.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, obj)
	}
	c.mu.Lock()
	c.objects[obj.Name] = obj.DeepCopy()
	c.mu.Unlock()
	status := c.statusOf(obj)
	gen := applied{uid: obj.UID, generation: obj.Generation}

	a, known := c.applied.get(obj.Name)
	if known && a.uid != obj.UID {
		known = false // deleted and created again: a new module
	}
	switch {
	case c.failedGenIs(obj.Name, gen):
		// This generation failed for a reason only a spec change fixes; do
		// not fetch and compile it again on every event.
		if !known {
			return ctrl.Result{}, nil
		}
	case !known || a != gen:
		setCondition(&status, obj, ConditionLoading, metav1.ConditionTrue, ReasonFetching, "fetching and compiling the module")
		if err := c.writeStatus(ctx, obj, status); err != nil {
			return ctrl.Result{}, err
		}
		src, promoted := obj.Spec.Source, promotedIn(obj, &status)
		if promoted {
			src = obj.Spec.Candidate.Source // promoted in this generation (before a restart, or by the leader)
		}
		loaded, reason, err := c.loadFrom(ctx, obj, src)
		if err != nil {
			if reason != ReasonFetchFailed {
				c.failedGen.set(obj.Name, gen)
			}
			return ctrl.Result{}, c.failed(ctx, obj, reason, err)
		}
		c.failedGen.del(obj.Name)
		c.applied.set(obj.Name, gen)
		known = true
		status.Digest = loaded.Digest
		at := metav1.NewTime(loaded.At)
		status.LoadedAt = &at
		if loaded.Compile > 0 {
			status.CompileSeconds = loaded.Compile.Seconds()
		}
		setCondition(&status, obj, ConditionLoadFailed, metav1.ConditionFalse, ReasonLoaded, "")
		c.event(obj, corev1.EventTypeNormal, ReasonLoaded, "Load", "module %s serving (%s, compile %s)", loaded.Digest, loaded.Result, loaded.Compile.Round(time.Millisecond))
		c.reportLimits(obj, &status, loaded.limits, loaded.clamped)
		c.setCandidate(ctx, obj, &status, promoted)
	}
	if err := c.rollout(ctx, obj, &status); err != nil {
		return ctrl.Result{}, err
	}
	setCondition(&status, obj, ConditionLoading, metav1.ConditionFalse, ReasonLoaded, "")
	if obj.Spec.Paused {
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonPaused, "spec.paused is true: the module is not called")
	} else if st, ok := c.supervisor.Status(obj.Name); ok && !st.Synced && st.SyncProblem != "" {
		// Unready by itself: the operator and its other modules serve.
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonCachesNotSynced,
			"module "+status.Digest+" loaded, but its caches cannot sync: "+st.SyncProblem)
	} else {
		msg := "module " + status.Digest + " serving"
		if c.failedGenIs(obj.Name, gen) {
			msg = "module " + status.Digest + " still serving; the new spec failed to load (see LoadFailed)"
		}
		setCondition(&status, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, msg)
	}
	if st, ok := c.supervisor.Status(obj.Name); ok {
		s := st.Stats
		status.Stats = &v1alpha1.Stats{Reconciles: s.Reconciles, Errors: s.Errors, MeanFuel: s.MeanFuel, MeanDurationSeconds: s.MeanDurationSeconds}
		status.Code = CodeLoaded
		if st.Unloaded {
			status.Code = CodeUnloaded
		}
		if s.LastError != "" && !c.failedGenIs(obj.Name, gen) {
			status.LastError = s.LastError
		}
	}
	status.ObservedGeneration = obj.Generation
	if err := c.writeStatus(ctx, obj, status); err != nil {
		return ctrl.Result{}, err
	}
	if st, ok := c.supervisor.Status(obj.Name); ok && st.Loaded.Manifest.Finalizer && c.leader() && !controllerutil.ContainsFinalizer(obj, DrainFinalizer) {
		if err := c.patchFinalizer(ctx, obj, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: c.opts.StatusInterval}, nil
}
