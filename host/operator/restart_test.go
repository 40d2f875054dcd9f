package operator_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestControlPlaneRestarts kills (SIGKILL) and restarts the kube-apiserver
// process, then the etcd process, under a running operator. After each restart a
// change made to a Widget is reconciled, a new Widget is reconciled, and the
// WebApp's children are the same objects as before (same UIDs): nothing was
// lost and nothing was wrongly deleted.
func TestControlPlaneRestarts(t *testing.T) {
	cp, err := testenv.StartRestartable(t.TempDir(), "examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	startOperator(t, cp.Config, operator.Options{
		Modules:            []string{testwasm.BuildFile(t, "./widget"), testwasm.BuildFile(t, "./webapp")},
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		SkipControllerNameValidation: true,
	})
	ctx := context.Background()
	c, err := client.New(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("steady", 1)); err != nil {
		t.Fatal(err)
	}
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": "default"},
		"spec":     map[string]any{"image": "nginx:1.27", "port": int64(8080), "expose": true},
	}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "steady", "1 x grey")
	children := waitChildren(t, c)

	restarts := []struct {
		name        string
		stop, start func() error
		// breaksWatches: the operator's watch connections end. An etcd
		// restart does not end them: the kube-apiserver's watch cache
		// reconnects to etcd behind them.
		breaksWatches bool
	}{
		{"kube-apiserver", cp.KillAPIServer, cp.StartAPIServer, true},
		{"etcd", cp.KillEtcd, cp.StartEtcd, false},
	}
	for i, r := range restarts {
		before := widgetRestarts()
		if err := r.stop(); err != nil {
			t.Fatalf("stopping %s: %v", r.name, err)
		}
		time.Sleep(3 * time.Second) // long enough for watches to fail and retry
		if err := r.start(); err != nil {
			t.Fatalf("starting %s again: %v", r.name, err)
		}
		size := int64(10 + i)
		updateWidgetSize(t, c, "steady", size)
		waitSummary(t, c, "steady", map[int64]string{10: "10 x grey", 11: "11 x grey"}[size])
		name := map[int]string{0: "after-apiserver", 1: "after-etcd"}[i]
		if err := c.Create(ctx, widget(name, 4)); err != nil {
			t.Fatal(err)
		}
		waitSummary(t, c, name, "4 x grey")
		if got := waitChildren(t, c); got != children {
			t.Errorf("after restarting %s the WebApp's children changed: %v, want %v (deleted and recreated)", r.name, got, children)
		}
		if r.breaksWatches && widgetRestarts() == before {
			t.Errorf("restarting %s restarted no Widget watch", r.name)
		}
	}
}

// updateWidgetSize sets spec.size, retrying on conflicts and on the errors
// a control plane returns while it comes back up.
func updateWidgetSize(t testing.TB, c client.Client, name string, size int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		w := widget(name, 0)
		err := c.Get(context.Background(), client.ObjectKeyFromObject(w), w)
		if err == nil {
			_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
			if err = c.Update(context.Background(), w); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("updating %s: %v", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// childUIDs identifies the WebApp's ConfigMap and Service.
type childUIDs struct{ configMap, service types.UID }

// waitChildren waits until the WebApp "shop" has both children and returns
// their UIDs.
func waitChildren(t *testing.T, c client.Client) childUIDs {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cm, svc := &unstructured.Unstructured{}, &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		svc.SetAPIVersion("v1")
		svc.SetKind("Service")
		e1 := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "shop-config"}, cm)
		e2 := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "shop"}, svc)
		if e1 == nil && e2 == nil {
			return childUIDs{cm.GetUID(), svc.GetUID()}
		}
		if time.Now().After(deadline) {
			t.Fatalf("WebApp children never appeared: configmap %v, service %v", e1, e2)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
