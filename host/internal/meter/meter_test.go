package meter_test

import (
	"context"
	_ "embed"
	"errors"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
)

//go:embed testdata/count.wasm
var countWasm []byte

func instance(t *testing.T) api.Module {
	t.Helper()
	ctx := context.Background()
	out, err := instrument.Instrument(countWasm)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { rt.Close(ctx) })
	if err := meter.Instantiate(ctx, rt); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, out, wazero.NewModuleConfig())
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func call(t *testing.T, mod api.Module, m *meter.Meter, ctx context.Context, fn string, args ...uint64) error {
	t.Helper()
	ctx = meter.WithMeter(ctx, m)
	if !m.Start(mod) {
		t.Fatal("module is not instrumented")
	}
	_, err := mod.ExportedFunction(fn).Call(ctx, args...)
	return err
}

// TestExactCounts checks the cost model against counts made by hand, with
// slices small enough to force many refuels mid-loop.
func TestExactCounts(t *testing.T) {
	mod := instance(t)
	for _, slice := range []uint64{1, 7, 1 << 20} {
		m := &meter.Meter{Budget: 1 << 40, Slice: slice}
		if err := call(t, mod, m, context.Background(), "three"); err != nil {
			t.Fatal(err)
		}
		if got := m.Used(mod); got != 3 {
			t.Errorf("slice %d: three used %d, want 3", slice, got)
		}
		for _, n := range []uint64{1, 10, 1000} {
			m := &meter.Meter{Budget: 1 << 40, Slice: slice}
			if err := call(t, mod, m, context.Background(), "loop", n); err != nil {
				t.Fatal(err)
			}
			if got, want := m.Used(mod), 1+5*n; got != want {
				t.Errorf("slice %d: loop(%d) used %d, want %d", slice, n, got, want)
			}
		}
	}
}

func TestBudgetExhausted(t *testing.T) {
	mod := instance(t)
	m := &meter.Meter{Budget: 10_000, Slice: 1000}
	err := call(t, mod, m, context.Background(), "spin")
	var ex *meter.ExhaustedError
	if !errors.As(err, &ex) {
		t.Fatalf("want *ExhaustedError, got %v", err)
	}
	if ex.Budget != 10_000 || ex.Used < ex.Budget || ex.Used > ex.Budget+10 {
		t.Errorf("used %d of %d: the overrun should be at most one region", ex.Used, ex.Budget)
	}
}

func TestDeadlineAndCancel(t *testing.T) {
	mod := instance(t)
	m := &meter.Meter{Budget: 1 << 60, Slice: 1000, Deadline: time.Now().Add(20 * time.Millisecond)}
	start := time.Now()
	err := call(t, mod, m, context.Background(), "spin")
	var st *meter.StoppedError
	if !errors.As(err, &st) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline stop, got %v", err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Errorf("stopped before its deadline")
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	m = &meter.Meter{Budget: 1 << 60, Slice: 1000}
	if err := call(t, mod, m, ctx, "spin"); !errors.As(err, &st) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want a cancel stop, got %v", err)
	}
}

func TestNoMeterIsAHostBug(t *testing.T) {
	mod := instance(t)
	g, _ := meter.Global(mod)
	g.Set(0) // force a refuel at the first charge
	_, err := mod.ExportedFunction("three").Call(context.Background())
	if err == nil {
		t.Fatal("a metered call without a meter in its context succeeded")
	}
}
