package reconciler

import (
	"context"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSwapLetsRunningCallsFinish checks the swap protocol without a
// cluster: a call that holds a version keeps it usable after a swap, Retire
// waits for that call, and acquire never returns a retired version.
func TestSwapLetsRunningCallsFinish(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	load := func(version string) *engine.Module {
		m, err := eng.Load(ctx, "widget.wasm", testwasm.BuildVersion(t, "./widget", version), engine.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	v1, v2 := load("1"), load("2")
	r := &Reconciler{name: "widget", storms: newStormTracker(StormOptions{})}
	r.current.Store(NewVersion(v1))

	running := r.acquire() // a reconcile in flight on v1
	old, err := r.SwapVersion(NewVersion(v2))
	if err != nil {
		t.Fatal(err)
	}
	if old != running || r.Module() != v2 {
		t.Fatal("Swap did not return the running version or did not install the new one")
	}
	retired := make(chan error, 1)
	go func() { retired <- old.Retire(ctx) }()
	select {
	case <-retired:
		t.Fatal("Retire closed a version while a call still held it")
	case <-time.After(100 * time.Millisecond):
	}
	// The running call can still use v1.
	if _, err := running.Module.Reconcile(ctx, "still running", []byte(`{"object":{"metadata":{"name":"w"},"spec":{}}}`)); err != nil {
		t.Fatalf("the old version failed for a call that started before the swap: %v", err)
	}
	running.mu.RUnlock()
	if err := <-retired; err != nil {
		t.Fatal(err)
	}
	if v := r.acquire(); v.Module != v2 {
		t.Error("acquire after the swap did not return the new version")
	} else {
		v.mu.RUnlock()
	}

	// Swapping in a module of another kind is refused.
	other, err := eng.Load(ctx, "misbehave.wasm", testwasm.Build(t, "./internal/testguests/misbehave"), engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := r.SwapVersion(NewVersion(other)); err == nil {
		t.Error("a module with another name and kind was swapped in")
	}
}
