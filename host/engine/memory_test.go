package engine

// What a module and an instance cost the process (issue 13, "per-module
// memory"). Run with `make bench`.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// Goals of issue 13 for the widget guest.
const (
	goalModuleMiB   = 15 // fixed cost of one more module, no instance
	goalInstanceMiB = 6  // one more warm instance
)

// withCustomSection returns wasm with a custom section named name appended:
// the same program under other bytes (another digest, so another
// compilation), as a second module of the same size would be.
func withCustomSection(wasm []byte, name string) []byte {
	uleb := func(out []byte, v uint64) []byte {
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				c |= 0x80
			}
			out = append(out, c)
			if v == 0 {
				return out
			}
		}
	}
	body := uleb(nil, uint64(len(name)))
	body = append(body, name...)
	body = append(body, 0) // wazero v1.12 refuses an empty payload
	out := append(append([]byte(nil), wasm...), 0)
	out = uleb(out, uint64(len(body)))
	return append(out, body...)
}

// memSample is the process's memory after a full collection.
type memSample struct {
	heap   uint64 // live Go heap (HeapAlloc after a GC)
	rss    uint64 // resident set, heap returned to the OS first
	code   uint64 // resident compiled guest code
	mapped uint64 // compiled guest code mapped, resident or not
}

func sampleMemory(tb testing.TB) memSample {
	tb.Helper()
	runtime.GC()
	runtime.GC() // a second cycle runs the finalizers the first queued
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	code, mapped := codeBytes()
	return memSample{heap: ms.HeapAlloc, rss: residentBytes(tb), code: code, mapped: mapped}
}

// codeBytes sums the resident set and the size of the mappings of compiled
// guest code in /proc/self/smaps: anonymous executable mappings, where
// wazero puts it, and the files in wasmreconcile-code/ the engine maps it
// from (Options.CodeInMemory); 0 when smaps cannot be read (or before
// anything was compiled).
func codeBytes() (rss, mapped uint64) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0
	}
	code := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4: // a mapping's header
			code = f[1][2] == 'x' && (len(f) == 5 || // no path: anonymous
				len(f) == 6 && strings.Contains(f[5], "/"+codeDir+"/"))
		case code && len(f) == 3 && (f[0] == "Rss:" || f[0] == "Size:"):
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			if f[0] == "Rss:" {
				rss += kb << 10
			} else {
				mapped += kb << 10
			}
		}
	}
	return rss, mapped
}

// residentBytes reads the resident set from /proc/self/statm.
func residentBytes(tb testing.TB) uint64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		tb.Fatalf("/proc/self/statm %q: %v", b, err)
	}
	return pages * uint64(os.Getpagesize())
}

func toMiB(bytes float64) float64 { return bytes / (1 << 20) }

// delta is (to - from) / n in MiB.
func delta(from, to memSample, n int) (heap, rss, code float64) {
	d := func(a, b uint64) float64 { return toMiB((float64(b) - float64(a)) / float64(n)) }
	return d(from.heap, to.heap), d(from.rss, to.rss), d(from.code, to.code)
}

// warmInstances makes m hold k instances that have each served a call: it
// holds every idle instance while it calls, so that each call creates one.
func warmInstances(tb testing.TB, m *Module, k int, req []byte) {
	tb.Helper()
	ctx := context.Background()
	for m.PoolStats().Live < k {
		var held []*instance
		for m.PoolStats().Idle > 0 {
			inst, err := m.pool.get(ctx, "warm", time.Minute)
			if err != nil {
				tb.Fatal(err)
			}
			held = append(held, inst)
		}
		if _, err := m.Reconcile(ctx, "warm", req); err != nil {
			tb.Fatal(err)
		}
		for _, inst := range held {
			m.pool.put(inst, true)
		}
	}
}

// closeIdle closes m's idle instances.
func closeIdle(m *Module) { m.pool.closeIdle() }

// benchModules is WASMRECONCILE_MEMORY_MODULES, the modules the memory
// benchmarks load beside the first; 8 when unset.
func benchModules() int {
	if n, err := strconv.Atoi(os.Getenv("WASMRECONCILE_MEMORY_MODULES")); err == nil && n > 0 {
		return n
	}
	return 8
}

// loadVariant loads wasm under other bytes (a custom section named name,
// so that it compiles on its own) on e under limits, and calls it once
// with req.
func loadVariant(b *testing.B, e *Engine, wasm []byte, name string, limits Limits, req []byte) *Module {
	b.Helper()
	ctx := context.Background()
	m, err := e.Load(ctx, "widget.wasm", withCustomSection(wasm, name), limits)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Reconcile(ctx, "warm", req); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkModuleMemory loads WASMRECONCILE_MEMORY_MODULES (default 8)
// widget modules (or WASMRECONCILE_MEMORY_WASM, another build of the
// widget's logic) into one Engine, each under other bytes (a custom section
// appended), after a first module that pays for what all share. It reports
// what one more module costs with no instance (module-*), and what one more
// warm instance (one that served the 2.4 KB request) costs (instance-*), in
// live Go heap and in resident set, against issue 13's goals: ≤15 MiB per
// module, ≤6 MiB per warm instance.
func BenchmarkModuleMemory(b *testing.B) {
	modules := benchModules()
	const instances = 3 // warm instances per module
	wasm := testwasm.Build(b, "./widget")
	if path := os.Getenv("WASMRECONCILE_MEMORY_WASM"); path != "" {
		// Another build of the widget's logic: bin/modules/widget-rust.wasm,
		// widget-c.wasm (make modules-rust, make modules-c).
		var err error
		if wasm, err = os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
	req := gadget(b, map[string]any{"size": 3, "color": "blue"}, 2400)
	ctx := context.Background()
	for range b.N {
		// A cache directory, as the operator has by default (its compile
		// worker's): the code is mapped from files in it.
		e, err := New(Options{CompilationCacheDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		load := func(i int) *Module {
			return loadVariant(b, e, wasm, fmt.Sprintf("bench-%d-%d", i, b.N), Limits{MaxInstances: instances, IdleSpareTimeout: -1}, req) // warm spares are what it measures
		}
		mods := []*Module{load(0)}
		base := sampleMemory(b)
		for i := 1; i <= modules; i++ {
			mods = append(mods, load(i))
			closeIdle(mods[i])
		}
		loaded := sampleMemory(b)
		for _, m := range mods[1:] {
			warmInstances(b, m, instances, req)
		}
		warm := sampleMemory(b)
		modHeap, modRSS, modCode := delta(base, loaded, modules)
		instHeap, instRSS, _ := delta(loaded, warm, modules*instances)
		b.ReportMetric(modHeap, "module-heap-MiB")
		b.ReportMetric(modCode, "module-code-MiB")
		b.ReportMetric(modRSS, "module-rss-MiB")
		b.ReportMetric(instHeap, "instance-heap-MiB")
		b.ReportMetric(instRSS, "instance-rss-MiB")
		verdict := func(got, goal float64) string {
			if got <= goal {
				return "met"
			}
			return "missed"
		}
		b.Logf("%d modules (widget, %.2f MiB of wasm), %d warm instances each, one Engine", modules, toMiB(float64(len(wasm))), instances)
		b.Logf("one more module, no instance: %.2f MiB resident (%.2f MiB of it live Go heap, %.2f MiB compiled code); goal ≤%d MiB — %s",
			modRSS, modHeap, modCode, goalModuleMiB, verdict(modRSS, goalModuleMiB))
		b.Logf("one more warm instance: %.2f MiB resident (%.2f MiB of it live Go heap); goal ≤%d MiB — %s",
			instRSS, instHeap, goalInstanceMiB, verdict(instRSS, goalInstanceMiB))
		for _, m := range mods {
			_ = m.Close(ctx)
		}
		_ = e.Close(ctx)
	}
}

// TestIdenticalBytesShareCode: a second module loaded from the same bytes
// compiles nothing (wazero's cache shares the code by the hash of the
// instrumented bytes); closing the first, even twice, leaves the second
// working, new instances included (instantiation looks the code up by that
// hash); and closing the last gives the code back.
func TestIdenticalBytesShareCode(t *testing.T) {
	wasm := withCustomSection(testwasm.Build(t, "./widget"), "TestIdenticalBytesShareCode")
	req := gadget(t, map[string]any{"size": 3, "color": "blue"}, 2400)
	ctx := context.Background()
	// The code comes from the tests' compilation cache: what is measured
	// is what the engine maps and shares, not the compiling.
	e, err := New(testCache(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	_, err = os.Stat("/proc/self/smaps")
	measure := err == nil
	before := sampleMemory(t)
	a, err := e.Load(ctx, "a", wasm, Limits{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := sampleMemory(t)
	// Every call of b runs on a fresh instance.
	b, err := e.Load(ctx, "b", wasm, Limits{MaxInstances: 1, RecycleAfterCalls: 1})
	if err != nil {
		t.Fatal(err)
	}
	second := sampleMemory(t)
	// Mapped, not resident: code backed by a file is resident only where
	// it ran.
	firstCode, secondCode := toMiB(float64(first.mapped)-float64(before.mapped)), toMiB(float64(second.mapped)-float64(first.mapped))
	t.Logf("first load: %.2f MiB compiled code, %.2f MiB heap, %.2f MiB resident; second load of the same bytes: %.2f MiB code, %.2f MiB heap, %.2f MiB resident",
		firstCode, toMiB(float64(first.heap)-float64(before.heap)), toMiB(float64(first.rss)-float64(before.rss)),
		secondCode, toMiB(float64(second.heap)-float64(first.heap)), toMiB(float64(second.rss)-float64(first.rss)))
	if measure && (firstCode < 1 || secondCode > firstCode/10) {
		t.Errorf("compiled code: %.2f MiB for the first load, %.2f MiB for the second: not shared", firstCode, secondCode)
	}

	for range 2 {
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		res, err := b.Reconcile(ctx, "after a closed", req)
		if err != nil {
			t.Fatalf("call %d after the other module closed: %v", i, err)
		}
		if res.Recycled != RecycledCalls {
			t.Fatalf("call %d: Recycled %q: the next call would not instantiate", i, res.Recycled)
		}
	}
	c, err := e.Load(ctx, "c", wasm, Limits{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(ctx, "after b closed", req); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !measure {
		return
	}
	// The code is unmapped by a finalizer once nothing reaches it: wait for
	// it, with a deadline.
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := sampleMemory(t)
		left := toMiB(float64(now.mapped) - float64(before.mapped))
		if left < firstCode/10 {
			t.Logf("all closed: %.2f MiB of compiled code left", left)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("all three modules closed, %.2f MiB of their %.2f MiB of compiled code still mapped", left, firstCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCodeMappedFromTheCacheDirectory: with a compilation cache directory
// a module's machine code runs from a file in wasmreconcile-code/, mapped
// read-only and executable, not from anonymous memory; with
// Options.CodeInMemory it stays anonymous. Both serve calls.
func TestCodeMappedFromTheCacheDirectory(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		t.Skip("no /proc/self/maps")
	}
	wasm := withCustomSection(testwasm.Build(t, "./widget"), "TestCodeMappedFromTheCacheDirectory")
	req := gadget(t, map[string]any{"size": 3, "color": "blue"}, 2400)
	ctx := context.Background()
	mapped := func(dir string) bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 6 && f[1] == "r-xp" && strings.HasPrefix(f[5], filepath.Join(dir, codeDir)+"/") {
				return true
			}
		}
		return false
	}
	for _, inMemory := range []bool{false, true} {
		dir := t.TempDir()
		opts := Options{CompilationCacheDir: dir, CodeInMemory: inMemory, CodeMapFailed: func(m string, err error) {
			t.Errorf("module %s: code not mapped: %v", m, err)
		}}
		if inMemory {
			// Compiled in the compile worker (a build without -race, several
			// times faster than this process), as the operator compiles:
			// the code comes through the cache directory and still stays
			// in anonymous memory. Without CodeInMemory the compile stays
			// in this process, the path of an embedder with no worker.
			w, err := SelfCompileWorker()
			if err != nil {
				t.Fatal(err)
			}
			opts.Compile.Worker = w
		}
		e, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(ctx, "widget", wasm, Limits{MaxInstances: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Reconcile(ctx, "call", req); err != nil {
			t.Fatal(err)
		}
		if got := mapped(dir); got == inMemory {
			t.Errorf("CodeInMemory %v: code mapped from %s/%s is %v", inMemory, dir, codeDir, got)
		}
		_ = m.Close(ctx)
		_ = e.Close(ctx)
	}
}
