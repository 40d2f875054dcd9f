package operator_test

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// The finalizer tests run the claim guest's "fin" variant (module
// claim-fin, which declares a finalizer): once the module is gone, or a
// version of it without the finalizer serves, deleting its objects must
// complete (docs/abi.md, "Finalizers and removal").

const claimFinalizer = reconciler.FinalizerPrefix + "claim-fin"

// getResponder reads Responder name live; ok is false when it is gone.
func getResponder(t *testing.T, e env, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(responderKind)
	err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return u, true
}

// waitFinalizer waits until Responder name holds the claim-fin finalizer.
func waitFinalizer(t *testing.T, e env, name string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "Responder "+name+" to hold "+claimFinalizer, func() error {
		u, ok := getResponder(t, e, name)
		if !ok {
			return fmt.Errorf("gone")
		}
		if !slices.Contains(u.GetFinalizers(), claimFinalizer) {
			return fmt.Errorf("finalizers %v", u.GetFinalizers())
		}
		return nil
	})
}

// deleteAndWaitGone deletes Responder name and waits until it is gone.
func deleteAndWaitGone(t *testing.T, e env, name string) {
	t.Helper()
	if err := e.c.Delete(context.Background(), responder(e.ns, name, nil)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "deleted Responder "+name+" to go", func() error {
		if u, ok := getResponder(t, e, name); ok {
			return fmt.Errorf("still there, deletionTimestamp %v, finalizers %v", u.GetDeletionTimestamp(), u.GetFinalizers())
		}
		return nil
	})
}

// TestFinalizerDrainOnRemove: a module with a finalizer is removed; its
// finalizer is removed from its objects, so deleting one completes.
func TestFinalizerDrainOnRemove(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := newEnv(t)
	op := start(t, e.cfg, e.operatorOptions(), operator.Options{Modules: []string{claimFile(t, "fin")}})
	if err := e.c.Create(context.Background(), responder(e.ns, "r", map[string]any{"status": map[string]any{"phase": "up"}})); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, e, "r", "up")
	waitFinalizer(t, e, "r")
	if !op.Remove("claim-fin") {
		t.Fatal("Remove(claim-fin): the module did not run")
	}
	deleteAndWaitGone(t, e, "r")
}

// TestFinalizerDrainOnDroppedFinalizer: a new version of a module no
// longer declares the finalizer; the old finalizer is drained, deleting an
// object completes, and the new version serves.
func TestFinalizerDrainOnDroppedFinalizer(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := newEnv(t)
	ctx := context.Background()
	fin, nofin := testwasm.BuildVersion(t, "./internal/testguests/claim", "fin"), testwasm.BuildVersion(t, "./internal/testguests/claim", "nofin")
	op := start(t, e.cfg, e.operatorOptions(), operator.Options{})
	if err := op.Apply(ctx, operator.Module{Source: source.Bytes("claim-fin (fin)", fin)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := e.c.Create(ctx, responder(e.ns, name, map[string]any{"status": map[string]any{"phase": "one"}})); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, e, name, "one")
		waitFinalizer(t, e, name)
	}
	if err := op.Apply(ctx, operator.Module{Source: source.Bytes("claim-fin (nofin)", nofin)}); err != nil {
		t.Fatal(err)
	}
	deleteAndWaitGone(t, e, "a")
	testenv.Eventually(t, 2*time.Minute, "the finalizer drained from Responder b", func() error {
		u, ok := getResponder(t, e, "b")
		if !ok {
			return fmt.Errorf("gone")
		}
		if slices.Contains(u.GetFinalizers(), claimFinalizer) {
			return fmt.Errorf("finalizers %v", u.GetFinalizers())
		}
		return nil
	})
	setResponse(t, e, "b", map[string]any{"status": map[string]any{"phase": "two"}})
	waitPhase(t, e, "b", "two") // the new version serves
	if u, _ := getResponder(t, e, "b"); slices.Contains(u.GetFinalizers(), claimFinalizer) {
		t.Errorf("the version without a finalizer added it again: %v", u.GetFinalizers())
	}
	deleteAndWaitGone(t, e, "b")
}

// TestReconcileModuleDrainsOnDelete: a ReconcileModule whose module
// declares a finalizer holds wasmreconcile.io/drain; deleted, its module
// stops and the ReconcileModule goes only once the module's finalizer is
// off its objects; deleting an object then completes.
func TestReconcileModuleDrainsOnDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	start(t, e.cfg, e.operatorOptions(), operator.Options{
		ReconcileModules: true,
		Sources:          operator.SourceOptions{Namespaces: []string{e.ns}},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second},
	})
	fin := testwasm.BuildVersion(t, "./internal/testguests/claim", "fin")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "claim-fin-module"},
		BinaryData: map[string][]byte{"module.wasm.gz": gz(t, fin)}}
	if err := e.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	createModule(t, e.c, "claim-fin", v1alpha1.Source{SHA256: supervisor.Digest(fin), ConfigMap: &v1alpha1.KeyRef{Namespace: e.ns, Name: "claim-fin-module"}})
	moduleCondition(t, e.c, "claim-fin", "Ready", metav1.ConditionTrue, "Loaded")
	testenv.Eventually(t, 2*time.Minute, "the ReconcileModule to hold "+modulecontroller.DrainFinalizer, func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "claim-fin"}, rm); err != nil {
			return err
		}
		if !slices.Contains(rm.Finalizers, modulecontroller.DrainFinalizer) {
			return fmt.Errorf("finalizers %v", rm.Finalizers)
		}
		return nil
	})
	for _, name := range []string{"a", "b"} {
		if err := e.c.Create(ctx, responder(e.ns, name, map[string]any{"status": map[string]any{"phase": "up"}})); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, e, name, "up")
		waitFinalizer(t, e, name)
	}

	if err := e.c.Delete(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "claim-fin"}}); err != nil {
		t.Fatal(err)
	}
	// Until it goes, every status written says why it stays; once it is
	// gone, no object holds the module's finalizer.
	var draining []string
	testenv.Eventually(t, 2*time.Minute, "the ReconcileModule to go", func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "claim-fin"}, rm); err != nil {
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
		u, ok := getResponder(t, e, name)
		if !ok {
			t.Fatalf("Responder %s gone: nothing deleted it", name)
		}
		if slices.Contains(u.GetFinalizers(), claimFinalizer) {
			t.Errorf("Responder %s still holds %s after its ReconcileModule went: %v", name, claimFinalizer, u.GetFinalizers())
		}
	}
	deleteAndWaitGone(t, e, "a")
}
