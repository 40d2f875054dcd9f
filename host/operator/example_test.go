package operator_test

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/operator"
)

// Example_embedding adds the wasm host to a program's own controller-runtime
// manager, beside a native controller: the manager runs both, and the
// widget module reconciles Widgets while the native controller labels
// ConfigMaps. (In `go test` the manager talks to the package's test control
// plane, through KUBECONFIG; the widget module is built from
// modules/widget.)
func Example_embedding() {
	cfg := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		// This program watches one namespace only.
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{"embedding": {}}},
	})
	if err != nil {
		panic(err)
	}

	// The program's own, native controller.
	err = ctrl.NewControllerManagedBy(mgr).Named("labeller").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			if cm.Labels["seen-by"] == "labeller" {
				return reconcile.Result{}, nil
			}
			patch := client.MergeFrom(cm.DeepCopy())
			cm.Labels = map[string]string{"seen-by": "labeller"}
			return reconcile.Result{}, mgr.GetClient().Patch(ctx, &cm, patch)
		}))
	if err != nil {
		panic(err)
	}

	// The wasm host, with one module.
	host, err := operator.Setup(mgr, operator.Options{Modules: []string{os.Getenv("WASMRECONCILE_EXAMPLE_WIDGET")}})
	if err != nil {
		panic(err)
	}
	fmt.Println("modules:", host.Names(), "load errors:", len(host.LoadErrors()))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }() // runs the native controller and the host's

	// Some objects for both.
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		panic(err)
	}
	_ = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "embedding"}})
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "embedding", "name": "hello"},
		"spec":     map[string]any{"size": int64(3), "color": "blue"},
	}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "embedding", Name: "settings"}}
	for _, obj := range []client.Object{w, cm} {
		if err := c.Create(ctx, obj); err != nil {
			panic(err)
		}
	}
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_ = c.Get(ctx, client.ObjectKeyFromObject(w), w)
		_ = c.Get(ctx, client.ObjectKeyFromObject(cm), cm)
		if summary, _, _ := unstructured.NestedString(w.Object, "status", "summary"); summary != "" && cm.Labels["seen-by"] != "" {
			fmt.Println("Widget embedding/hello:", summary)
			fmt.Println("ConfigMap embedding/settings seen by:", cm.Labels["seen-by"])
			break
		}
	}
	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// modules: [widget] load errors: 0
	// Widget embedding/hello: 3 x blue
	// ConfigMap embedding/settings seen by: labeller
	// stopped: <nil>
}
