package engine

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

//go:embed testdata/ceiling.wasm
var ceilingWasm []byte // manifest limits: fuel 9e9, 120 s, 32768 pages

// TestCeilingClampEachField: each of fuel, timeout and memory over its
// ceiling is lowered to it and reported; at or under it, and unset, it is
// left alone; other fields are never touched.
func TestCeilingClampEachField(t *testing.T) {
	t.Parallel()
	c := Limits{Fuel: 1000, Timeout: time.Second, MemoryLimitPages: 64}
	for _, tc := range []struct {
		name string
		in   Limits
		want Limits
		msgs []string
	}{
		{"unset", Limits{}, Limits{}, nil},
		{"at the ceilings", Limits{Fuel: 1000, Timeout: time.Second, MemoryLimitPages: 64}, Limits{Fuel: 1000, Timeout: time.Second, MemoryLimitPages: 64}, nil},
		{"fuel", Limits{Fuel: 1001}, Limits{Fuel: 1000}, []string{"fuel 1001 clamped to the ceiling 1000 (--max-fuel)"}},
		{"timeout", Limits{Timeout: time.Minute}, Limits{Timeout: time.Second}, []string{"timeout 1m0s clamped to the ceiling 1s (--max-timeout)"}},
		{"memory", Limits{MemoryLimitPages: 65536}, Limits{MemoryLimitPages: 64}, []string{"memory 65536 pages (4Gi) clamped to the ceiling 64 pages (4Mi) (--max-memory)"}},
		{"all, others untouched",
			Limits{Fuel: 1 << 40, Timeout: time.Hour, MemoryLimitPages: 100, InitFuel: 1 << 40, InitTimeout: time.Hour, MaxInstances: 9, MaxRequestBytes: 1 << 30, FreshInstancePerCall: true},
			Limits{Fuel: 1000, Timeout: time.Second, MemoryLimitPages: 64, InitFuel: 1 << 40, InitTimeout: time.Hour, MaxInstances: 9, MaxRequestBytes: 1 << 30, FreshInstancePerCall: true},
			[]string{"fuel 1099511627776 clamped to the ceiling 1000 (--max-fuel)", "timeout 1h0m0s clamped to the ceiling 1s (--max-timeout)", "memory 100 pages (6400Ki) clamped to the ceiling 64 pages (4Mi) (--max-memory)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, clamps := c.clamp(tc.in, false)
			if got != tc.want {
				t.Errorf("clamp(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
			var msgs []string
			for _, cl := range clamps {
				msgs = append(msgs, cl.String())
			}
			if !reflect.DeepEqual(msgs, tc.msgs) {
				t.Errorf("clamps %q, want %q", msgs, tc.msgs)
			}
		})
	}
	_, clamps := c.clamp(Limits{Fuel: 2000}, true)
	if len(clamps) != 1 || !clamps[0].Manifest || clamps[0].String() != "the manifest's fuel 2000 clamped to the ceiling 1000 (--max-fuel)" {
		t.Errorf("a manifest's clamp: %+v", clamps)
	}
}

// TestCeilingZeroIsDefault: a zero ceiling is the documented default.
func TestCeilingZeroIsDefault(t *testing.T) {
	t.Parallel()
	got, clamps := Limits{}.clamp(Limits{Fuel: 1 << 50, Timeout: 2 * time.Minute, MemoryLimitPages: 65536}, false)
	want := Limits{Fuel: DefaultMaxFuel, Timeout: DefaultMaxTimeout, MemoryLimitPages: DefaultMaxMemoryPages}
	if got != want || len(clamps) != 3 {
		t.Errorf("clamp under the default ceilings = %+v, %v; want %+v and 3 clamps", got, clamps, want)
	}
	if DefaultMaxFuel != 5_000_000_000 || DefaultMaxTimeout != time.Minute || DefaultMaxMemoryPages != 4096 {
		t.Errorf("the default ceilings changed: update the flag help, README.md and docs/abi.md")
	}
	if got, clamps := (Limits{Fuel: 7}).clamp(Limits{Fuel: DefaultMaxFuel, Timeout: DefaultMaxTimeout, MemoryLimitPages: DefaultMaxMemoryPages}, false); got.Timeout != DefaultMaxTimeout || got.MemoryLimitPages != DefaultMaxMemoryPages || got.Fuel != 7 || len(clamps) != 1 {
		t.Errorf("one ceiling set, the others default: %+v %v", got, clamps)
	}
}

// TestCeilingBelowDefault: a ceiling below a default lowers the default,
// and says nothing (nothing was asked for).
func TestCeilingBelowDefault(t *testing.T) {
	t.Parallel()
	c := Limits{Fuel: 1000, Timeout: time.Second, MemoryLimitPages: 64}
	if got := c.lowerDefaults(Limits{}); got != c {
		t.Errorf("lowerDefaults(unset) = %+v, want the ceilings %+v", got, c)
	}
	if got := c.lowerDefaults(Limits{Fuel: 10, Timeout: time.Millisecond, MemoryLimitPages: 2}); got != (Limits{Fuel: 10, Timeout: time.Millisecond, MemoryLimitPages: 2}) {
		t.Errorf("lowerDefaults changed set fields: %+v", got)
	}
	if got := (Limits{}).lowerDefaults(Limits{}); got != (Limits{}) {
		t.Errorf("the default ceilings are over every default, yet lowerDefaults gave %+v", got)
	}
}

// TestCeilingInvalid: New refuses a negative timeout ceiling and a memory
// ceiling over 4 GiB.
func TestCeilingInvalid(t *testing.T) {
	t.Parallel()
	for _, c := range []Limits{{Timeout: -time.Second}, {MemoryLimitPages: 65537}} {
		if e, err := New(Options{Ceilings: c}); err == nil {
			_ = e.Close(context.Background())
			t.Errorf("New(Ceilings: %+v) accepted", c)
		}
	}
}

// ceilingEngine is an engine with small ceilings: fuel 2,000,000, 300 ms,
// 64 pages (4 MiB).
func ceilingEngine(t *testing.T, c Limits) *Engine {
	t.Helper()
	e, err := New(Options{Ceilings: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func loadCeiling(t *testing.T, e *Engine, limits Limits) *Module {
	t.Helper()
	ctx := context.Background()
	m, err := e.Load(ctx, "ceiling.wasm", ceilingWasm, limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(ctx) })
	return m
}

// grownPages makes the guest grow its memory until memory.grow fails, and
// returns the pages it reached: the real cap of its runtime.
func grownPages(t *testing.T, m *Module) uint32 {
	t.Helper()
	res, err := m.Reconcile(context.Background(), "reconcile grow", []byte("grow"))
	if err != nil {
		t.Fatalf("grow: %v", err)
	}
	if len(res.Output) != 4 {
		t.Fatalf("grow returned %q", res.Output)
	}
	return binary.LittleEndian.Uint32(res.Output)
}

// TestCeilingManifestAsksForMore: the manifest asks for fuel 9e9, 120 s and
// 32768 pages, more than the operator allows when the caller sets nothing
// (the defaults, lowered by the ceilings): each is lowered to that, said
// so, and enforced: the memory cap of the runtime and the fuel budget of a
// call.
func TestCeilingManifestAsksForMore(t *testing.T) {
	t.Parallel()
	c := Limits{Fuel: 2_000_000, Timeout: 30 * time.Second, MemoryLimitPages: 64}
	m := loadCeiling(t, ceilingEngine(t, c), Limits{})
	l := m.Limits()
	if l.Fuel != c.Fuel || l.Timeout != DefaultTimeout || l.MemoryLimitPages != c.MemoryLimitPages {
		t.Errorf("limits %+v, want the ceilings' fuel and memory (under the defaults) and the default timeout", l)
	}
	want := []string{
		"the manifest's fuel 9000000000 lowered to the 2000000 the operator allows (spec.limits.fuel, --fuel): a manifest may ask for less, never more",
		"the manifest's timeout 2m0s lowered to the 5s the operator allows (spec.limits.timeout, --timeout): a manifest may ask for less, never more",
		"the manifest's memory 32768 pages (2Gi) lowered to the 64 pages (4Mi) the operator allows (spec.limits.memoryPages, --memory-limit-pages): a manifest may ask for less, never more",
	}
	if got := m.Clamped(); !reflect.DeepEqual(got, want) {
		t.Errorf("Clamped() = %q, want %q", got, want)
	}
	if got := grownPages(t, m); got != 64 {
		t.Errorf("the guest's memory grew to %d pages, want the ceiling's 64", got)
	}
	_, err := m.Reconcile(context.Background(), "reconcile spin", []byte("spin!"))
	var fe *FuelExhaustedError
	if !errors.As(err, &fe) || fe.Budget != 2_000_000 {
		t.Errorf("spin under the fuel ceiling: %v, want fuel exhausted with budget 2000000", err)
	}
}

// TestCeilingCallerOverCeiling: the caller's limits (operator flags, a
// ReconcileModule's spec.limits) over the ceilings are clamped too, before
// the module is first instantiated; then the manifest may lower them
// (fuel: 9e9 is under the clamped 2^50) but not raise them (timeout and
// memory).
//
// Not parallel: the grow call runs under the 200 ms ceiling, which tests
// running beside it on a loaded machine pushed past (204 ms).
func TestCeilingCallerOverCeiling(t *testing.T) {
	c := Limits{Fuel: 1 << 50, Timeout: 200 * time.Millisecond, MemoryLimitPages: 32}
	m := loadCeiling(t, ceilingEngine(t, c), Limits{Fuel: 1 << 60, Timeout: time.Hour, MemoryLimitPages: 65536})
	if l := m.Limits(); l.Fuel != 9_000_000_000 || l.Timeout != 200*time.Millisecond || l.MemoryLimitPages != 32 {
		t.Errorf("limits %+v, want the manifest's fuel and the ceilings' timeout and memory", l)
	}
	want := []string{
		"fuel 1152921504606846976 clamped to the ceiling 1125899906842624 (--max-fuel)",
		"timeout 1h0m0s clamped to the ceiling 200ms (--max-timeout)",
		"memory 65536 pages (4Gi) clamped to the ceiling 32 pages (2Mi) (--max-memory)",
		"the manifest's timeout 2m0s lowered to the 200ms the operator allows (spec.limits.timeout, --timeout): a manifest may ask for less, never more",
		"the manifest's memory 32768 pages (2Gi) lowered to the 32 pages (2Mi) the operator allows (spec.limits.memoryPages, --memory-limit-pages): a manifest may ask for less, never more",
	}
	if got := m.Clamped(); !reflect.DeepEqual(got, want) {
		t.Errorf("Clamped() = %q, want %q", got, want)
	}
	if got := grownPages(t, m); got != 32 {
		t.Errorf("the guest's memory grew to %d pages, want the ceiling's 32", got)
	}
	// The deadline is the ceiling's, not the hour asked for. The bound is
	// loose: it holds on a loaded machine.
	start := time.Now()
	_, err := m.Reconcile(context.Background(), "reconcile spin", []byte("spin!"))
	var de *DeadlineExceededError
	if !errors.As(err, &de) || de.Timeout != 200*time.Millisecond {
		t.Errorf("spin under the timeout ceiling: %v, want a deadline of 200ms", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the spin ran %s", d)
	}
}

// TestCeilingWithinCeilings: a manifest that asks for less than the caller
// allows, itself under the ceilings, gets what it asks and nothing is
// reported.
func TestCeilingWithinCeilings(t *testing.T) {
	t.Parallel()
	e := ceilingEngine(t, Limits{Fuel: DefaultMaxFuel * 2, Timeout: 5 * time.Minute, MemoryLimitPages: 65536})
	m := loadCeiling(t, e, Limits{Fuel: DefaultMaxFuel * 2, Timeout: 5 * time.Minute, MemoryLimitPages: 65536})
	if l := m.Limits(); l.Fuel != 9_000_000_000 || l.Timeout != 2*time.Minute || l.MemoryLimitPages != 32768 {
		t.Errorf("limits %+v, want the manifest's", l)
	}
	if got := m.Clamped(); got != nil {
		t.Errorf("Clamped() = %q, want none", got)
	}
}

// TestCeilingDefaultCeilings: an engine with no Ceilings allows a manifest
// no more than the defaults, and a ceiling below a default lowers it
// without a report.
func TestCeilingDefaultCeilings(t *testing.T) {
	t.Parallel()
	m := loadCeiling(t, ceilingEngine(t, Limits{}), Limits{})
	if l := m.Limits(); l.Fuel != DefaultFuel || l.Timeout != DefaultTimeout || l.MemoryLimitPages != DefaultMemoryLimitPages {
		t.Errorf("limits %+v, want the defaults", l)
	}
	if got := m.Clamped(); len(got) != 3 || !strings.Contains(got[0], "9000000000 lowered to the 500000000") || !strings.Contains(got[2], "lowered to the 2048 pages (128Mi)") {
		t.Errorf("Clamped() = %q", got)
	}

	// echo declares no limits: under a fuel ceiling of 1000 its default
	// fuel is lowered to 1000, silently.
	e := ceilingEngine(t, Limits{Fuel: 1000})
	echo, err := e.Load(context.Background(), "echo.wasm", echoWasm, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close(context.Background())
	if l := echo.Limits(); l.Fuel != 1000 || l.Timeout != DefaultTimeout || l.MemoryLimitPages != DefaultMemoryLimitPages {
		t.Errorf("limits %+v, want fuel lowered to 1000 and the other defaults", l)
	}
	if got := echo.Clamped(); got != nil {
		t.Errorf("Clamped() = %q, want none: nothing was asked for", got)
	}
}
