package clusterscoped_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestReconcileModuleDrainsOnDelete: a ReconcileModule whose module
// declares a finalizer holds wasmreconcile.io/drain; deleted, its module
// stops and the ReconcileModule goes only once the module's finalizer is
// off its objects; deleting an object then completes.
func TestReconcileModuleDrainsOnDelete(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		Sources:          operator.SourceOptions{Namespaces: []string{e.NS}},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second},
	})
	fin := testwasm.BuildVersion(t, "./internal/testguests/claim", "fin")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "claim-fin-module"},
		BinaryData: map[string][]byte{"module.wasm.gz": gz(t, fin)}}
	if err := e.C.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	optest.CreateModule(t, e.C, "claim-fin", v1alpha1.Source{SHA256: supervisor.Digest(fin), ConfigMap: &v1alpha1.KeyRef{Namespace: e.NS, Name: "claim-fin-module"}})
	optest.ModuleCondition(t, e.C, "claim-fin", "Ready", metav1.ConditionTrue, "Loaded")
	testenv.Eventually(t, 2*time.Minute, "the ReconcileModule to hold "+modulecontroller.DrainFinalizer, func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.C.Get(ctx, client.ObjectKey{Name: "claim-fin"}, rm); err != nil {
			return err
		}
		if !slices.Contains(rm.Finalizers, modulecontroller.DrainFinalizer) {
			return fmt.Errorf("finalizers %v", rm.Finalizers)
		}
		return nil
	})
	for _, name := range []string{"a", "b"} {
		if err := e.C.Create(ctx, optest.Responder(e.NS, name, map[string]any{"status": map[string]any{"phase": "up"}})); err != nil {
			t.Fatal(err)
		}
		optest.WaitPhase(t, e, name, "up")
		optest.WaitFinalizer(t, e, name)
	}

	if err := e.C.Delete(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "claim-fin"}}); err != nil {
		t.Fatal(err)
	}
	// Until it goes, every status written says why it stays; once it is
	// gone, no object holds the module's finalizer.
	var draining []string
	testenv.Eventually(t, 2*time.Minute, "the ReconcileModule to go", func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.C.Get(ctx, client.ObjectKey{Name: "claim-fin"}, rm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if c := meta.FindStatusCondition(rm.Status.Conditions, modulecontroller.ConditionDraining); c != nil && !slices.Contains(draining, c.Message) {
			draining = append(draining, c.Message)
		}
		return fmt.Errorf("still there, finalizers %v", rm.Finalizers)
	})
	t.Logf("Draining conditions seen: %q", draining)
	for _, name := range []string{"a", "b"} {
		u, ok := optest.GetResponder(t, e, name)
		if !ok {
			t.Fatalf("Responder %s gone: nothing deleted it", name)
		}
		if slices.Contains(u.GetFinalizers(), optest.ClaimFinalizer) {
			t.Errorf("Responder %s still holds %s after its ReconcileModule went: %v", name, optest.ClaimFinalizer, u.GetFinalizers())
		}
	}
	optest.DeleteAndWaitGone(t, e, "a")
}
