package operator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// The finalizer tests run the claim guest's "fin" variant (module
// claim-fin, which declares a finalizer): once the module is gone, or a
// version of it without the finalizer serves, deleting its objects must
// complete (docs/abi.md, "Finalizers and removal").

// TestFinalizerDrainOnRemove: a module with a finalizer is removed; its
// finalizer is removed from its objects, so deleting one completes.
func TestFinalizerDrainOnRemove(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{claimFile(t, "fin")}})
	if err := e.C.Create(context.Background(), optest.Responder(e.NS, "r", map[string]any{"status": map[string]any{"phase": "up"}})); err != nil {
		t.Fatal(err)
	}
	optest.WaitPhase(t, e, "r", "up")
	optest.WaitFinalizer(t, e, "r")
	if !op.Remove("claim-fin") {
		t.Fatal("Remove(claim-fin): the module did not run")
	}
	optest.DeleteAndWaitGone(t, e, "r")
}

// TestFinalizerDrainOnDroppedFinalizer: a new version of a module no
// longer declares the finalizer; the old finalizer is drained, deleting an
// object completes, and the new version serves.
func TestFinalizerDrainOnDroppedFinalizer(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	fin, nofin := testwasm.BuildVersion(t, "./internal/testguests/claim", "fin"), testwasm.BuildVersion(t, "./internal/testguests/claim", "nofin")
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{})
	if err := op.Apply(ctx, operator.Module{Source: source.Bytes("claim-fin (fin)", fin)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := e.C.Create(ctx, optest.Responder(e.NS, name, map[string]any{"status": map[string]any{"phase": "one"}})); err != nil {
			t.Fatal(err)
		}
		optest.WaitPhase(t, e, name, "one")
		optest.WaitFinalizer(t, e, name)
	}
	if err := op.Apply(ctx, operator.Module{Source: source.Bytes("claim-fin (nofin)", nofin)}); err != nil {
		t.Fatal(err)
	}
	optest.DeleteAndWaitGone(t, e, "a")
	testenv.Eventually(t, 2*time.Minute, "the finalizer drained from Responder b", func() error {
		u, ok := optest.GetResponder(t, e, "b")
		if !ok {
			return fmt.Errorf("gone")
		}
		if slices.Contains(u.GetFinalizers(), optest.ClaimFinalizer) {
			return fmt.Errorf("finalizers %v", u.GetFinalizers())
		}
		return nil
	})
	setResponse(t, e, "b", map[string]any{"status": map[string]any{"phase": "two"}})
	optest.WaitPhase(t, e, "b", "two") // the new version serves
	if u, _ := optest.GetResponder(t, e, "b"); slices.Contains(u.GetFinalizers(), optest.ClaimFinalizer) {
		t.Errorf("the version without a finalizer added it again: %v", u.GetFinalizers())
	}
	optest.DeleteAndWaitGone(t, e, "b")
}
