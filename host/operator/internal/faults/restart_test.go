package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestControlPlaneRestarts kills (SIGKILL) and restarts the kube-apiserver
// process, then the etcd process, of the package's control plane, under a
// running operator. After each restart a change made to a Widget is
// reconciled, a new Widget is reconciled, and the WebApp's children are the
// same objects as before (same UIDs): nothing was lost and nothing was
// wrongly deleted. The control plane is the shared one: tests in a package
// run one at a time, and it is whole again when this test ends.
func TestControlPlaneRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the control plane: not in -short")
	}
	e := optest.NewEnv(t)
	cp := testenv.Shared(t)
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:    []string{testwasm.BuildFile(t, "./widget"), testwasm.BuildFile(t, "./webapp")},
		Registerer: reg,
	})
	ctx := context.Background()
	clientset, err := kubernetes.NewForConfig(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.C.Create(ctx, optest.Widget(e.NS, "steady", 1)); err != nil {
		t.Fatal(err)
	}
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": e.NS},
		"spec":     map[string]any{"image": "nginx:1.27", "port": int64(8080), "expose": true},
	}}
	if err := e.C.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "steady", "1 x grey")
	children := waitChildren(t, e.C, e.NS)
	widgetRestarts := func() float64 {
		return optest.Gather(t, reg, "wasmreconcile_informer_watch_restarts_total", map[string]string{"kind": widgetLabel})
	}

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
		down := true
		t.Cleanup(func() { // leave the shared control plane whole, whatever happens
			if down {
				if err := r.start(); err != nil {
					t.Errorf("starting %s again: %v", r.name, err)
				}
			}
		})
		// Positive barriers instead of a sleep, before the process comes
		// back: with the kube-apiserver gone, the operator's Widget watch
		// has ended and it has tried to open another (connection refused);
		// with etcd gone, the API server answers with errors.
		if r.breaksWatches {
			testenv.Eventually(t, time.Minute, "the operator to retry its Widget watch", func() error {
				if widgetRestarts() == before {
					return fmt.Errorf("no watch retried yet")
				}
				return nil
			})
		} else {
			testenv.Eventually(t, time.Minute, "the API server to report etcd down", func() error {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz/etcd").Do(rctx).Error(); err == nil {
					return fmt.Errorf("/readyz/etcd still answers ok")
				}
				return nil
			})
		}
		t.Logf("%s is down, as the operator has seen", r.name)
		if err := r.start(); err != nil {
			t.Fatalf("starting %s again: %v", r.name, err)
		}
		down = false
		t.Logf("%s is up again", r.name)
		size := int64(10 + i)
		optest.UpdateWidgetSize(t, e.C, e.NS, "steady", size)
		optest.WaitSummary(t, e.C, e.NS, "steady", fmt.Sprintf("%d x grey", size))
		name := fmt.Sprintf("after-%d", i)
		testenv.Eventually(t, time.Minute, "creating "+name, func() error { return e.C.Create(ctx, optest.Widget(e.NS, name, 4)) })
		optest.WaitSummary(t, e.C, e.NS, name, "4 x grey")
		if got := waitChildren(t, e.C, e.NS); got != children {
			t.Errorf("after restarting %s the WebApp's children changed: %v, want %v (deleted and recreated)", r.name, got, children)
		}
	}
}

// childUIDs identifies the WebApp's ConfigMap and Service.
type childUIDs struct{ configMap, service types.UID }

// waitChildren waits until the WebApp "shop" has both children and returns
// their UIDs.
func waitChildren(t *testing.T, c client.Client, ns string) childUIDs {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cm, svc := &unstructured.Unstructured{}, &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		svc.SetAPIVersion("v1")
		svc.SetKind("Service")
		e1 := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "shop-config"}, cm)
		e2 := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "shop"}, svc)
		if e1 == nil && e2 == nil {
			return childUIDs{cm.GetUID(), svc.GetUID()}
		}
		if time.Now().After(deadline) {
			t.Fatalf("WebApp children never appeared: configmap %v, service %v", e1, e2)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
