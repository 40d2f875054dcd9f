package engine_test

import (
	"context"
	_ "embed"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

var (
	//go:embed testdata/initrap.wasm
	initrapWasm []byte
	//go:embed testdata/grow.wasm
	growWasm []byte
	//go:embed testdata/recurse.wasm
	recurseWasm []byte
)

// assertHealthy proves the host survived: a GC completes promptly, and the
// module serves a normal call from a pool that refills.
func assertHealthy(t *testing.T, m *engine.Module, okRequest []byte) {
	t.Helper()
	gc := make(chan struct{})
	go func() { runtime.GC(); close(gc) }()
	select {
	case <-gc:
	case <-time.After(30 * time.Second):
		t.Fatal("runtime.GC did not complete: a guest is still pinning a P")
	}
	if okRequest == nil {
		return
	}
	if _, err := m.Reconcile(context.Background(), "reconcile default/ok", okRequest); err != nil {
		t.Fatalf("call after containment failed: %v", err)
	}
	if s := m.PoolStats(); s.Live < 1 || s.Idle < 1 {
		t.Fatalf("pool not refilled: %+v", s)
	}
}

// TestContainment runs each misbehaviour of the list and checks that
// it ends in its typed error, the host stays healthy and the pool refills.
func TestContainment(t *testing.T) {
	goGuest := "./internal/testguests/misbehave"
	cases := []struct {
		name   string
		limits engine.Limits
		spec   map[string]any
		check  func(t *testing.T, err error)
	}{
		{
			name:   "for {} runs out of fuel",
			limits: engine.Limits{Fuel: 20_000_000},
			spec:   map[string]any{"mode": "spin"},
			check: func(t *testing.T, err error) {
				var fe *engine.FuelExhaustedError
				if !errors.As(err, &fe) {
					t.Fatalf("want *FuelExhaustedError, got %T %v", err, err)
				}
				if fe.Budget != 20_000_000 || fe.Used < fe.Budget {
					t.Errorf("used %d of budget %d", fe.Used, fe.Budget)
				}
				if !strings.Contains(err.Error(), "raise spec.limits.fuel or fix the loop") {
					t.Errorf("message %q", err)
				}
			},
		},
		{
			name:   "for {} is stopped at its deadline",
			limits: engine.Limits{Fuel: 1 << 60, Timeout: 50 * time.Millisecond},
			spec:   map[string]any{"mode": "spin"},
			check: func(t *testing.T, err error) {
				var de *engine.DeadlineExceededError
				if !errors.As(err, &de) {
					t.Fatalf("want *DeadlineExceededError, got %T %v", err, err)
				}
			},
		},
		{
			name:   "counter loop runs out of fuel",
			limits: engine.Limits{Fuel: 20_000_000},
			spec:   map[string]any{"mode": "count", "iterations": int64(1) << 40},
			check: func(t *testing.T, err error) {
				var fe *engine.FuelExhaustedError
				if !errors.As(err, &fe) {
					t.Fatalf("want *FuelExhaustedError, got %T %v", err, err)
				}
			},
		},
		{
			name: "allocating loop hits the memory limit",
			// 64 MiB; the deadline is not what this case tests, and under
			// -race on loaded cores filling 64 MiB took over 5 s.
			limits: engine.Limits{MemoryLimitPages: 1024, Timeout: 2 * time.Minute},
			spec:   map[string]any{"mode": "alloc"},
			check: func(t *testing.T, err error) {
				var me *engine.MemoryLimitError
				if !errors.As(err, &me) {
					t.Fatalf("want *MemoryLimitError, got %T %v", err, err)
				}
				if me.LimitPages != 1024 || !strings.Contains(err.Error(), "raise spec.limits.memoryPages") {
					t.Errorf("error %v", err)
				}
			},
		},
		{
			name:   "deep Go recursion is contained",
			limits: engine.Limits{MemoryLimitPages: 256, Fuel: 4_000_000_000, Timeout: time.Minute},
			spec:   map[string]any{"mode": "recurse"},
			check: func(t *testing.T, err error) {
				var se *engine.StackOverflowError
				var me *engine.MemoryLimitError
				// The Go runtime grows goroutine stacks in linear memory, so
				// whichever of the two limits is reached first is correct.
				if !errors.As(err, &se) && !errors.As(err, &me) {
					t.Fatalf("want *StackOverflowError or *MemoryLimitError, got %T %v", err, err)
				}
			},
		},
		{
			name:   "oversized response",
			limits: engine.Limits{MaxResponseBytes: 64 << 10},
			spec:   map[string]any{"mode": "big", "bytes": int64(1 << 20)},
			check: func(t *testing.T, err error) {
				var ae *engine.ABIError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), "maxResponseBytes") {
					t.Fatalf("want *ABIError, got %T %v", err, err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.limits.MaxInstances = 1
			m := load(t, goGuest, tc.limits)
			_, err := m.Reconcile(context.Background(), "reconcile default/bad", request(t, tc.spec))
			tc.check(t, err)
			if s := m.PoolStats(); s.Live != 0 {
				t.Errorf("the failed instance was not discarded: %+v", s)
			}
			assertHealthy(t, m, request(t, map[string]any{}))
		})
	}
}

func TestWatGuestsContainment(t *testing.T) {
	ctx := context.Background()
	t.Run("memory.grow past the cap", func(t *testing.T) {
		m, err := newEngine(t).Load(ctx, "grow.wasm", growWasm, engine.Limits{MemoryLimitPages: 256})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		_, err = m.Reconcile(ctx, "reconcile default/grow", []byte(`{}`))
		var me *engine.MemoryLimitError
		if !errors.As(err, &me) {
			t.Fatalf("want *MemoryLimitError, got %T %v", err, err)
		}
		// grow.wat traps whenever it is called, so healthy means: the host
		// runs GC, and the pool replaced the instance on the next call.
		assertHealthy(t, m, nil)
		if _, err := m.Reconcile(ctx, "reconcile default/grow", []byte(`{}`)); !errors.As(err, &me) {
			t.Fatalf("second call: want *MemoryLimitError from a fresh instance, got %v", err)
		}
	})
	t.Run("deep wasm recursion", func(t *testing.T) {
		m, err := newEngine(t).Load(ctx, "recurse.wasm", recurseWasm, engine.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		_, err = m.Reconcile(ctx, "reconcile default/recurse", []byte(`{}`))
		var se *engine.StackOverflowError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "unbounded recursion") {
			t.Fatalf("want *StackOverflowError, got %T %v", err, err)
		}
		assertHealthy(t, m, nil)
	})
	t.Run("trap during _initialize", func(t *testing.T) {
		_, err := newEngine(t).Load(ctx, "initrap.wasm", initrapWasm, engine.Limits{})
		var invalid *engine.InvalidModuleError
		var trap *engine.TrapError
		if !errors.As(err, &invalid) || !errors.As(err, &trap) {
			t.Fatalf("want *InvalidModuleError wrapping *TrapError, got %T %v", err, err)
		}
		if !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("message does not say why: %v", err)
		}
		assertHealthy(t, nil, nil)
	})
}
