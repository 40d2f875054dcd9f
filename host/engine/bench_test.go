package engine

// Benchmarks for docs/benchmarks.md. Each benchmark measures the variants it
// compares inside one run, interleaved, and reports their ratio, so that
// machine noise affects numerator and denominator alike. Run with
// `make bench`.

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/linmem"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

//go:embed testdata/echo.wasm
var echoWasm []byte

// baseline runs the original, uninstrumented module the plain wazero way,
// optionally with WithCloseOnContextDone (the only other way to stop a
// compiled guest).
type baseline struct {
	rt               wazero.Runtime
	mod              api.Module
	alloc, reconcile api.Function
}

func newBaseline(b *testing.B, wasm []byte, closeOnDone bool) *baseline {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone))
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	if err := instantiateHostModule(ctx, rt); err != nil {
		b.Fatal(err)
	}
	// The same memory backend as the engine's (package linmem), so that the
	// ratios measure the instrumentation, not wazero's default memory.
	alloc := &linmem.Allocator{}
	mod, err := rt.InstantiateWithConfig(experimental.WithMemoryAllocator(ctx, alloc), wasm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize).WithName(""))
	alloc.Memory.Exit()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(ctx) })
	return &baseline{rt: rt, mod: mod, alloc: mod.ExportedFunction(abi.ExportAlloc), reconcile: mod.ExportedFunction(abi.ExportReconcile)}
}

func (bl *baseline) call(ctx context.Context, req []byte) ([]byte, error) {
	res, err := bl.alloc.Call(ctx, uint64(len(req)))
	if err != nil {
		return nil, err
	}
	bl.mod.Memory().Write(uint32(res[0]), req)
	res, err = bl.reconcile.Call(ctx, res[0], uint64(len(req)))
	if err != nil {
		return nil, err
	}
	p := abi.PackedBuffer(res[0])
	out, _ := bl.mod.Memory().Read(p.Ptr(), p.Len())
	return append([]byte(nil), out...), nil
}

// testCache returns opts with the tests' compilation cache (testshare),
// shared by the run's test processes, and the compile worker (a build
// without -race, several times faster than this process), unless opts
// names a cache already: for the tests that do not measure compiling.
func testCache(tb testing.TB, opts Options) Options {
	if opts.CompilationCacheDir != "" {
		return opts
	}
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		tb.Fatal(err)
	}
	opts.CompilationCacheDir = dir
	if opts.Compile.Worker == nil && !opts.Interpreter {
		if opts.Compile.Worker, err = SelfCompileWorker(); err != nil {
			tb.Fatal(err)
		}
	}
	return opts
}

func benchLoad(b testing.TB, wasm []byte, opts Options, limits Limits) *Module {
	ctx := context.Background()
	if _, test := b.(*testing.T); test {
		// A test compiles the guest once for the run (testshare); a
		// benchmark keeps its engine's own, cold cache.
		opts = testCache(b, opts)
	}
	e, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	m, err := e.Load(ctx, "bench", wasm, limits)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close(ctx); e.Close(ctx) })
	return m
}

func gadget(b testing.TB, spec map[string]any, padTo int) []byte {
	obj := map[string]any{
		"apiVersion": "test.wasmreconcile.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "bench", "namespace": "default", "generation": 3,
			"labels": map[string]any{"app": "bench"}, "annotations": map[string]any{}},
		"spec": spec,
	}
	req, _ := json.Marshal(abi.Request{Object: obj, Now: "2026-01-01T00:00:00Z"})
	for i := 0; len(req) < padTo; i++ {
		obj["metadata"].(map[string]any)["annotations"].(map[string]any)[fmt.Sprintf("example.com/note-%02d", i)] = strings.Repeat("v", 40)
		req, _ = json.Marshal(abi.Request{Object: obj, Now: "2026-01-01T00:00:00Z"})
	}
	return req
}

// compare runs the variants in interleaved blocks (ten rounds, each running
// every variant b.N/10 times) and reports each variant's mean and its ratio
// to the first. Blocks keep one variant's garbage from being collected on
// another's clock, while interleaving still spreads machine drift evenly.
func compare(b *testing.B, unit time.Duration, unitName string, variants []string, run func(variant int)) {
	total := make([]time.Duration, len(variants))
	for i := range variants { // warm up
		run(i)
	}
	rounds := min(10, b.N)
	b.ResetTimer()
	done := 0
	for r := 0; r < rounds; r++ {
		k := (b.N - done) / (rounds - r)
		for i := range variants {
			runtime.GC() // start each block with no GC debt
			start := time.Now()
			for n := 0; n < k; n++ {
				run(i)
			}
			total[i] += time.Since(start)
		}
		done += k
	}
	b.StopTimer()
	for i, v := range variants {
		b.ReportMetric(float64(total[i])/float64(b.N)/float64(unit), v+"-"+unitName+"/op")
		if i > 0 {
			b.ReportMetric(float64(total[i])/float64(total[0]), v+"/"+variants[0])
		}
	}
}

func BenchmarkMeteringComputeLoop(b *testing.B) {
	wasm := testwasm.Build(b, "./internal/testguests/misbehave")
	req := gadget(b, map[string]any{"mode": "count", "iterations": 5_000_000}, 0)
	m := benchLoad(b, wasm, Options{}, Limits{Fuel: 1 << 40, MaxInstances: 1})
	plain, closing := newBaseline(b, wasm, false), newBaseline(b, wasm, true)
	ctx := context.Background()
	compare(b, time.Millisecond, "ms", []string{"plain", "metered", "closeondone"}, func(v int) {
		var err error
		switch v {
		case 0:
			_, err = plain.call(ctx, req)
		case 1:
			_, err = m.Reconcile(ctx, "bench", req)
		case 2:
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err = closing.call(cctx, req)
			cancel()
		}
		if err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkMeteringJSONReconcile(b *testing.B) {
	wasm := testwasm.Build(b, "./widget")
	req := gadget(b, map[string]any{"size": 3, "color": "blue"}, 2400)
	m := benchLoad(b, wasm, Options{}, Limits{MaxInstances: 1})
	plain, closing := newBaseline(b, wasm, false), newBaseline(b, wasm, true)
	ctx := context.Background()
	b.ReportMetric(float64(len(req)), "request-bytes")
	compare(b, time.Microsecond, "us", []string{"plain", "metered", "closeondone"}, func(v int) {
		var err error
		switch v {
		case 0:
			_, err = plain.call(ctx, req)
		case 1:
			_, err = m.Reconcile(ctx, "bench", req)
		case 2:
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err = closing.call(cctx, req)
			cancel()
		}
		if err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRoundTrip2400B passes a 2.4 KB payload to a guest that returns it
// unchanged: the cost of the calling convention itself, against copying the
// same bytes in and out natively.
func BenchmarkRoundTrip2400B(b *testing.B) {
	req := []byte(strings.Repeat("x", 2400))
	m := benchLoad(b, echoWasm, Options{}, Limits{MaxInstances: 1})
	plain := newBaseline(b, echoWasm, false)
	ctx := context.Background()
	in, out := make([]byte, len(req)), make([]byte, len(req))
	var sink []byte
	compare(b, time.Nanosecond, "ns", []string{"native", "plain", "metered"}, func(v int) {
		switch v {
		case 0: // copy in and copy out, as the host does
			copy(in, req)
			copy(out, in)
			sink = append(sink[:0], out...)
		case 1:
			r, err := plain.call(ctx, req)
			if err != nil || len(r) != len(req) {
				b.Fatal(err)
			}
		case 2:
			r, err := m.Reconcile(ctx, "bench", req)
			if err != nil || len(r.Output) != len(req) {
				b.Fatal(err)
			}
		}
	})
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkDeadlineLateness measures how long after its deadline a spinning
// guest returns.
func BenchmarkDeadlineLateness(b *testing.B) {
	wasm := testwasm.Build(b, "./internal/testguests/misbehave")
	const timeout = 20 * time.Millisecond
	m := benchLoad(b, wasm, Options{}, Limits{Fuel: 1 << 60, Timeout: timeout, MaxInstances: 1})
	req := gadget(b, map[string]any{"mode": "spin"}, 0)
	var late []time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		// Result.Duration is the time in the guest; it excludes creating
		// the replacement for the instance the previous spin discarded.
		res, err := m.Reconcile(context.Background(), "bench", req)
		late = append(late, res.Duration-timeout)
		if _, ok := err.(*DeadlineExceededError); !ok {
			b.Fatalf("want deadline, got %v", err)
		}
	}
	b.ReportMetric(ms(percentile(late, 0.5)), "late-p50-ms")
	b.ReportMetric(ms(percentile(late, 0.99)), "late-p99-ms")
}

// BenchmarkFourSpinners runs four spinning guests at GOMAXPROCS=2 and
// measures their lateness, a concurrent runtime.GC, and a 1 ms ticker: how
// late its goroutine receives each tick (the clock read on receipt), and
// the share of ticks it received at all.
func BenchmarkFourSpinners(b *testing.B) {
	wasm := testwasm.Build(b, "./internal/testguests/misbehave")
	const timeout = 100 * time.Millisecond
	m := benchLoad(b, wasm, Options{}, Limits{Fuel: 1 << 60, Timeout: timeout, MaxInstances: 4})
	req := gadget(b, map[string]any{"mode": "spin"}, 0)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ok := gadget(b, map[string]any{"mode": "count", "iterations": 1}, 0)
	var late, gcs, idleGCs, tickDelays []time.Duration
	var ticksGot, ticksWanted int
	var mu sync.Mutex
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		var warm sync.WaitGroup // four warm instances, so no spinner waits for an instantiation
		for i := 0; i < 4; i++ {
			warm.Add(1)
			go func() { defer warm.Done(); m.Reconcile(context.Background(), "warm", ok) }()
		}
		warm.Wait()
		idle := time.Now() // the same GC with no guest running, for comparison
		runtime.GC()
		idleGCs = append(idleGCs, time.Since(idle))
		b.StartTimer()
		stop := make(chan struct{})
		tickerDone := make(chan struct{})
		go func() { // 1 ms ticker: record how late the goroutine receives each tick
			defer close(tickerDone)
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			start := time.Now()
			last := start
			for {
				select {
				case <-stop:
					mu.Lock()
					ticksWanted += int(time.Since(start) / time.Millisecond)
					mu.Unlock()
					return
				case <-t.C:
					// The value sent on t.C is when the timer fired, not
					// when this goroutine ran: a starved goroutine would
					// look punctual. Read the clock on receipt. A ticker
					// drops ticks its receiver misses, so the gap since
					// the last receipt carries the whole lateness.
					now := time.Now()
					mu.Lock()
					tickDelays = append(tickDelays, now.Sub(last)-time.Millisecond)
					ticksGot++
					mu.Unlock()
					last = now
				}
			}
		}()
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := m.Reconcile(context.Background(), "bench", req)
				mu.Lock()
				late = append(late, res.Duration-timeout)
				mu.Unlock()
				if _, ok := err.(*DeadlineExceededError); !ok {
					b.Errorf("want deadline, got %v", err)
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		gcStart := time.Now()
		runtime.GC()
		gcs = append(gcs, time.Since(gcStart))
		wg.Wait()
		close(stop)
		<-tickerDone
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(late, 1)), "late-max-ms")
	b.ReportMetric(ms(percentile(gcs, 1)), "gc-max-ms")
	b.ReportMetric(ms(percentile(idleGCs, 1)), "gc-idle-max-ms")
	b.ReportMetric(ms(percentile(gcs, 0.5)), "gc-p50-ms")
	b.ReportMetric(ms(percentile(tickDelays, 0.99)), "tick-delay-p99-ms")
	b.ReportMetric(ms(percentile(tickDelays, 1)), "tick-delay-max-ms")
	if ticksWanted > 0 {
		b.ReportMetric(float64(ticksGot)/float64(ticksWanted), "ticks-received/expected")
	}
}

// BenchmarkFuelSlice measures, for several slice sizes, the metering
// overhead on the compute loop and the deadline lateness of a spinner: the
// trade-off behind meter.DefaultSlice.
func BenchmarkFuelSlice(b *testing.B) {
	wasm := testwasm.Build(b, "./internal/testguests/misbehave")
	count := gadget(b, map[string]any{"mode": "count", "iterations": 5_000_000}, 0)
	spin := gadget(b, map[string]any{"mode": "spin"}, 0)
	plain := newBaseline(b, wasm, false)
	ctx := context.Background()
	for _, slice := range []uint64{10_000, 100_000, 1 << 20, 10_000_000, 100_000_000} {
		b.Run(fmt.Sprintf("slice=%d", slice), func(b *testing.B) {
			const timeout = 20 * time.Millisecond
			m := benchLoad(b, wasm, Options{FuelSlice: slice}, Limits{Fuel: 1 << 60, Timeout: time.Minute, MaxInstances: 1})
			spinner := benchLoad(b, wasm, Options{FuelSlice: slice}, Limits{Fuel: 1 << 60, Timeout: timeout, MaxInstances: 1})
			compare(b, time.Millisecond, "ms", []string{"plain", "metered"}, func(v int) {
				var err error
				if v == 0 {
					_, err = plain.call(ctx, count)
				} else {
					_, err = m.Reconcile(ctx, "bench", count)
				}
				if err != nil {
					b.Fatal(err)
				}
			})
			var late []time.Duration
			for i := 0; i < 10; i++ {
				res, _ := spinner.Reconcile(ctx, "bench", spin)
				late = append(late, res.Duration-timeout)
			}
			b.ReportMetric(ms(percentile(late, 0.5)), "late-p50-ms")
			b.ReportMetric(ms(percentile(late, 1)), "late-max-ms")
		})
	}
}

// BenchmarkLoadCompilerVsInterpreter measures what a hot reload of new bytes
// waits for: Load (instrument, compile, read the manifest) with wazero's
// optimizing compiler against its interpreter, each on a fresh Engine so no
// cache helps; and what a reconcile then costs on each. It reports
// load-ratio (compiler/interpreter) and reconcile-ratio
// (interpreter/compiler): serving from the interpreter first pays only if
// the first is large and the second is tolerable for the seconds it lasts.
func BenchmarkLoadCompilerVsInterpreter(b *testing.B) {
	wasm := testwasm.Build(b, "./widget")
	req := gadget(b, map[string]any{"size": 3, "color": "blue"}, 2400)
	ctx := context.Background()
	var load [2]time.Duration
	var call [2]time.Duration
	const calls = 20
	for i := 0; i < b.N; i++ {
		for v, interp := range []bool{false, true} {
			e, err := New(Options{Interpreter: interp})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			m, err := e.Load(ctx, "widget.wasm", wasm, Limits{MaxInstances: 1})
			if err != nil {
				b.Fatal(err)
			}
			load[v] += time.Since(start)
			if _, err := m.Reconcile(ctx, "warm", req); err != nil {
				b.Fatal(err)
			}
			start = time.Now()
			for j := 0; j < calls; j++ {
				if _, err := m.Reconcile(ctx, "bench", req); err != nil {
					b.Fatal(err)
				}
			}
			call[v] += time.Since(start)
			_ = m.Close(ctx)
			_ = e.Close(ctx)
		}
	}
	n := float64(b.N)
	b.ReportMetric(load[0].Seconds()*1000/n, "compiler-load-ms")
	b.ReportMetric(load[1].Seconds()*1000/n, "interpreter-load-ms")
	b.ReportMetric(float64(load[0])/float64(load[1]), "load-ratio")
	b.ReportMetric(call[0].Seconds()*1e6/n/calls, "compiler-reconcile-us")
	b.ReportMetric(call[1].Seconds()*1e6/n/calls, "interpreter-reconcile-us")
	b.ReportMetric(float64(call[1])/float64(call[0]), "reconcile-ratio")
}
