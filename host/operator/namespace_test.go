package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestNamespaceDeletion deletes the namespace of a WebApp (a module with a
// finalizer and two children) and waits until the namespace controller
// has removed it: the module's finalizer lets the WebApp go, and the
// children the namespace controller deletes first are not fought over.
// A create the API server refuses because the namespace is terminating is
// not a failure: no apply failure is counted.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	testenv.Shared(t).RequireControllerManager(t)
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{testwasm.BuildFile(t, "./webapp")}, Registerer: reg})
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": e.NS},
		"spec":     map[string]any{"image": "nginx:1.27"},
	}}
	if err := e.C.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "the WebApp's children", func() error {
		if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "shop"}, &corev1.Service{}); err != nil {
			return err
		}
		return e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "shop-config"}, &corev1.ConfigMap{})
	})
	if err := e.C.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "the namespace gone", func() error {
		err := e.C.Get(ctx, client.ObjectKey{Name: e.NS}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace still there (err %v)", err)
	})
	if n := optest.Gather(t, reg, "wasmreconcile_apply_failures_total", map[string]string{"module": "webapp"}); n != 0 {
		t.Errorf("%v apply failures counted while the namespace was deleted; want none", n)
	}
}
