package engine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// memoryBytes is the linear memory of the module's one idle instance.
func memoryBytes(t testing.TB, m *Module) uint32 {
	t.Helper()
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	if len(m.pool.idle) != 1 {
		t.Fatalf("%d idle instances, want 1", len(m.pool.idle))
	}
	return m.pool.idle[0].mod.Memory().Size()
}

// TestFuelClockKeepsMemoryFlat: one instance of the widget guest serving
// 25,000 calls keeps its linear memory and its fuel per call. Under wazero's
// fake clock (1 ms per reading) memory grew from call ~21,000 and reached
// the 128 MiB cap at call 29,400 (issue 13); see fuelClock.
func TestFuelClockKeepsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("25,000 calls")
	}
	req := gadget(t, map[string]any{"size": 3, "color": "blue"}, 2400)
	// The eager build: it allocates per call as the widget did when the
	// leak was found, so its runtime reads the clock as often. The lazy
	// one allocates so little that 25,000 calls would not show the leak.
	m := benchLoad(t, testwasm.BuildFlags(t, "./widget", "-tags=eager"), Options{}, Limits{MaxInstances: 1})
	ctx := context.Background()
	var firstMem uint32
	var firstFuel, fuel uint64
	for i := 1; i <= 25000; i++ {
		res, err := m.Reconcile(ctx, "soak", req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		fuel += res.Fuel
		if i%2500 != 0 {
			continue
		}
		mem, perCall := memoryBytes(t, m), fuel/2500
		fuel = 0
		if firstMem == 0 {
			firstMem, firstFuel = mem, perCall
			continue
		}
		if float64(mem) > 1.1*float64(firstMem) || float64(perCall) > 1.1*float64(firstFuel) {
			t.Fatalf("call %d: memory %d bytes, fuel %d per call; at call 2,500: %d bytes, %d per call", i, mem, perCall, firstMem, firstFuel)
		}
	}
}

// TestFuelClock: readings strictly increase, advance with fuel across
// calls, and are the same in every instance that did the same work.
func TestFuelClock(t *testing.T) {
	t.Parallel()
	c := &fuelClock{}
	a, b := c.nanotime(), c.nanotime()
	if b <= a {
		t.Fatalf("readings %d then %d: not increasing", a, b)
	}
	c.exit(1000)
	if got := c.nanotime(); got < 1000*NanosPerFuel {
		t.Fatalf("after a call of 1000 fuel the clock reads %d", got)
	}
	d := &fuelClock{}
	d.nanotime()
	d.nanotime()
	d.exit(1000)
	d.nanotime()
	if c.nanotime() != d.nanotime() {
		t.Fatal("two clocks that saw the same calls and readings differ")
	}
	sec, _ := c.walltime()
	if sec < fuelClockEpoch/1e9 {
		t.Fatalf("walltime %d s is before the epoch", sec)
	}
}

// BenchmarkSoak runs one instance of the widget guest for 200,000 calls
// (WASMRECONCILE_SOAK_CALLS overrides), printing its linear memory and fuel
// per call every 10,000: both must stay flat (±10%; issue 13).
func BenchmarkSoak(b *testing.B) {
	calls := 200_000
	if n, err := strconv.Atoi(os.Getenv("WASMRECONCILE_SOAK_CALLS")); err == nil && n > 0 {
		calls = n
	}
	req := gadget(b, map[string]any{"size": 3, "color": "blue"}, 2400)
	// No recycling: the soak is of one instance (which also served the
	// manifest read at load).
	m := benchLoad(b, testwasm.Build(b, "./widget"), Options{}, Limits{MaxInstances: 1, RecycleAfterCalls: calls + 10, RecycleMemoryPages: 65536})
	ctx := context.Background()
	for range b.N {
		var fuel uint64
		var lowMem, highMem uint32
		var lowFuel, highFuel uint64
		for i := 1; i <= calls; i++ {
			res, err := m.Reconcile(ctx, "soak", req)
			if err != nil {
				b.Fatalf("call %d: %v", i, err)
			}
			fuel += res.Fuel
			if i%10_000 != 0 {
				continue
			}
			mem, perCall := memoryBytes(b, m), fuel/10_000
			fuel = 0
			fmt.Printf("soak: call %7d: linear memory %6.2f MiB, fuel per call %d\n", i, float64(mem)/(1<<20), perCall)
			if lowMem == 0 || mem < lowMem {
				lowMem = mem
			}
			highMem = max(highMem, mem)
			if lowFuel == 0 || perCall < lowFuel {
				lowFuel = perCall
			}
			highFuel = max(highFuel, perCall)
		}
		memSpread, fuelSpread := float64(highMem)/float64(lowMem), float64(highFuel)/float64(lowFuel)
		b.ReportMetric(float64(highMem)/(1<<20), "MiB-max")
		b.ReportMetric(memSpread, "memory-max/min")
		b.ReportMetric(fuelSpread, "fuel-max/min")
		verdict := "met"
		if memSpread > 1.1 || fuelSpread > 1.1 {
			verdict = "missed"
		}
		b.Logf("goal: memory and fuel per call flat within ±10%% over %d calls: memory max/min %.3f, fuel max/min %.3f — %s", calls, memSpread, fuelSpread, verdict)
	}
}

// TestRecycleInstances: an instance is closed after RecycleAfterCalls calls
// or after a call that leaves its memory above RecycleMemoryPages, the
// Result says why, and the next call runs on a fresh instance.
func TestRecycleInstances(t *testing.T) {
	t.Parallel()
	req := gadget(t, map[string]any{"size": 3, "color": "blue"}, 2400)
	wasm := testwasm.Build(t, "./widget")
	ctx := context.Background()

	m := benchLoad(t, wasm, Options{}, Limits{MaxInstances: 1, RecycleAfterCalls: 3})
	var reasons []string
	var clocks []int64
	for range 7 {
		res, err := m.Reconcile(ctx, "recycle", req)
		if err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, res.Recycled)
		m.pool.mu.Lock()
		if len(m.pool.idle) == 1 {
			clocks = append(clocks, m.pool.idle[0].clock.base)
		}
		m.pool.mu.Unlock()
	}
	// The first instance also served the load's manifest call: it is
	// recycled after two reconciles, the next ones after three.
	if got := fmt.Sprint(reasons); got != "[ calls   calls  ]" {
		t.Errorf("Recycled per call: %q, want every instance recycled at its third call", got)
	}
	if m.PoolStats().Live != 1 {
		t.Errorf("%d live instances after recycling", m.PoolStats().Live)
	}
	// A fresh instance's clock starts over (the third instance, after one
	// call, reads less than the second after two), and reads the same
	// after the same calls: deterministic. (The first instance's reading
	// is not comparable: it also served the manifest call.)
	if len(clocks) != 5 || clocks[3] >= clocks[2] || clocks[1] != clocks[3] || clocks[2] != clocks[4] {
		t.Errorf("clocks of the instances after each call %v: want fresh instances, each reading as the last", clocks)
	}

	// The widget guest's memory is 64 pages (4 MiB) after a call: a mark
	// of 32 recycles after every call; the default (three quarters of the
	// cap) does not.
	small := benchLoad(t, wasm, Options{}, Limits{MaxInstances: 1, RecycleMemoryPages: 32})
	res, err := small.Reconcile(ctx, "recycle", req)
	if err != nil || res.Recycled != RecycledMemory {
		t.Errorf("memory above the mark: Recycled %q (%v), want %q", res.Recycled, err, RecycledMemory)
	}
	def := benchLoad(t, wasm, Options{}, Limits{MaxInstances: 1})
	if res, _ := def.Reconcile(ctx, "recycle", req); res.Recycled != "" {
		t.Errorf("default limits: Recycled %q after one call", res.Recycled)
	}
	if _, err := (Limits{RecycleAfterCalls: -1}).withDefaults(); err == nil {
		t.Error("a negative RecycleAfterCalls accepted")
	}
	if l, _ := (Limits{MemoryLimitPages: 100, RecycleMemoryPages: 500}).withDefaults(); l.RecycleMemoryPages != 75 {
		t.Errorf("RecycleMemoryPages above the memory limit became %d, want 75", l.RecycleMemoryPages)
	}
}
