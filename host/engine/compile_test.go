package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

const bombManifest = `{"name":"bomb","for":{"group":"test.wasmreconcile.io","version":"v1","kind":"Gadget"}}`

// bomb48k is the audit's compile bomb: a valid 48 KB module whose one
// function has 4,000 locals and 4,000 ifs. Compiled in process it costs
// wazero's optimizing compiler about 20 s of CPU and 900 MB.
func bomb48k() []byte { return testwasm.CompileBomb(4000, 4000, bombManifest) }

// loadErr loads wasm on a new engine of opts and returns the load's error,
// failing the test when the load succeeds.
func loadErr(t *testing.T, opts engine.Options, wasm []byte) error {
	t.Helper()
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	m, err := e.Load(context.Background(), "bomb.wasm", wasm, engine.Limits{})
	if err == nil {
		_ = m.Close(context.Background())
		t.Fatal("the compile bomb loaded")
	}
	return err
}

// TestCompileBombRefusedBeforeCompiling: the 48 KB bomb is refused by its
// shape, before any compile, with a message naming the function, its
// locals and blocks, the limit and the flag; a module of the widget's
// shape passes the same check.
func TestCompileBombRefusedBeforeCompiling(t *testing.T) {
	start := time.Now()
	err := loadErr(t, engine.Options{}, bomb48k())
	took := time.Since(start)
	var invalid *engine.InvalidModuleError
	if !errors.As(err, &invalid) {
		t.Fatalf("want an InvalidModuleError, got %T: %v", err, err)
	}
	for _, want := range []string{"refused before compiling", "function 4 has 4002 locals and 4000 blocks", "over the limit of 1000000", "--max-function-complexity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	t.Logf("refused in %s: %v", took, err)

	// Many functions each under the per-function limit add up.
	many := testwasm.CompileBomb(900, 1000, bombManifest) // 902*1001 = 902,902: under 1,000,000
	e, err := engine.New(engine.Options{Compile: engine.CompileOptions{MaxModuleComplexity: 500_000}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if _, err := e.Load(context.Background(), "many.wasm", many, engine.Limits{}); err == nil || !strings.Contains(err.Error(), "--max-module-complexity") {
		t.Errorf("a module over MaxModuleComplexity loaded or was refused for another reason: %v", err)
	}

	// The widget's most complex function is far under the default.
	newEngine(t)
	load(t, "./widget", engine.Limits{})
}

// TestCompileWorkerStopsAtItsMemoryLimit: with the shape check off, the
// bomb reaches the compiler, in a worker; the worker dies at its memory
// limit and the load fails naming the limit and its flag, while this
// process's resident memory stays where it was.
func TestCompileWorkerStopsAtItsMemoryLimit(t *testing.T) {
	opts := engine.Options{Compile: engine.CompileOptions{
		MaxFunctionComplexity: math.MaxUint64, MaxModuleComplexity: math.MaxUint64,
		Worker: testworker.With(t, engine.CompileWorker{MaxMemory: 256 << 20}),
	}}
	before := rssBytes(t)
	start := time.Now()
	err := loadErr(t, opts, bomb48k())
	took := time.Since(start)
	var limit *engine.CompileLimitError
	if !errors.As(err, &limit) || limit.Limit != "memory" {
		t.Fatalf("want a memory CompileLimitError, got %T: %v", err, err)
	}
	if !engine.IsInvalidModule(err) || !strings.Contains(err.Error(), "256Mi of memory (--compile-max-memory)") {
		t.Errorf("the error is not an InvalidModuleError naming the limit and the flag: %v", err)
	}
	after := rssBytes(t)
	t.Logf("refused after %s; this process's RSS %d MiB -> %d MiB: %v", took, before>>20, after>>20, err)
	if after-before > 200<<20 {
		t.Errorf("this process grew by %d MiB while the worker compiled", (after-before)>>20)
	}
}

// TestCompileWorkerStopsAtItsCPULimit: a compile under the memory limit
// that runs longer than its CPU limit is killed by the kernel.
func TestCompileWorkerStopsAtItsCPULimit(t *testing.T) {
	t.Parallel()
	opts := engine.Options{Compile: engine.CompileOptions{
		MaxFunctionComplexity: math.MaxUint64, MaxModuleComplexity: math.MaxUint64,
		Worker: testworker.With(t, engine.CompileWorker{MaxMemory: 4 << 30, MaxCPU: time.Second}),
	}}
	err := loadErr(t, opts, bomb48k())
	var limit *engine.CompileLimitError
	if !errors.As(err, &limit) || limit.Limit != "cpu" || !strings.Contains(err.Error(), "--compile-max-cpu") {
		t.Fatalf("want a cpu CompileLimitError naming --compile-max-cpu, got %T: %v", err, err)
	}
}

// TestCompileWorkerStopsAtItsTimeout: the host kills a worker that runs
// past its wall-clock timeout.
func TestCompileWorkerStopsAtItsTimeout(t *testing.T) {
	t.Parallel()
	opts := engine.Options{Compile: engine.CompileOptions{
		MaxFunctionComplexity: math.MaxUint64, MaxModuleComplexity: math.MaxUint64,
		Worker: testworker.With(t, engine.CompileWorker{MaxMemory: 4 << 30, Timeout: 300 * time.Millisecond}),
	}}
	err := loadErr(t, opts, bomb48k())
	var limit *engine.CompileLimitError
	if !errors.As(err, &limit) || limit.Limit != "time" || !strings.Contains(err.Error(), "--compile-timeout") {
		t.Fatalf("want a time CompileLimitError naming --compile-timeout, got %T: %v", err, err)
	}
}

// TestCompileWorkerStopsAtItsCodeLimit: a compile whose machine code is
// larger than MaxCodeBytes cannot write it.
func TestCompileWorkerStopsAtItsCodeLimit(t *testing.T) {
	t.Parallel()
	opts := engine.Options{Compile: engine.CompileOptions{Worker: testworker.With(t, engine.CompileWorker{MaxCodeBytes: 1 << 20})}}
	err := loadErr(t, opts, testwasm.Build(t, "./widget"))
	var limit *engine.CompileLimitError
	if !errors.As(err, &limit) || limit.Limit != "code" || !strings.Contains(err.Error(), "--compile-max-code-bytes") {
		t.Fatalf("want a code CompileLimitError naming --compile-max-code-bytes, got %T: %v", err, err)
	}
}

// TestCompileWorkerHandsCodeOverThroughTheCache: a module compiled by a
// worker serves, and the host found the worker's code in the cache: the
// cache holds exactly the one file the worker wrote (a host that compiled
// again, under another key, would have added a second). A second engine
// on the same directory loads the same bytes from it too.
func TestCompileWorkerHandsCodeOverThroughTheCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 2 {
		e, err := engine.New(engine.Options{CompilationCacheDir: dir, Compile: engine.CompileOptions{Worker: testworker.With(t, engine.CompileWorker{})}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(context.Background(), "widget.wasm", testwasm.Build(t, "./widget"), engine.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Reconcile(context.Background(), "reconcile", request(t, map[string]any{"size": 3}))
		if err != nil || len(res.Output) == 0 {
			t.Fatalf("load %d: the module does not serve: %v", i, err)
		}
		_ = m.Close(context.Background())
		_ = e.Close(context.Background())
		files, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 1 {
			t.Fatalf("load %d: the cache holds %d files, want the worker's one: %v", i, len(files), files)
		}
	}
}

// TestCompileWorkerMustBeAWorker: a Command that does not run a worker
// fails the load with an error that says so, not an InvalidModuleError:
// the bytes are not at fault.
func TestCompileWorkerMustBeAWorker(t *testing.T) {
	t.Parallel()
	w := &engine.CompileWorker{Command: func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, "false") }}
	e, err := engine.New(engine.Options{Compile: engine.CompileOptions{Worker: w}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	_, err = e.Load(context.Background(), "widget.wasm", testwasm.Build(t, "./widget"), engine.Limits{})
	if err == nil || engine.IsInvalidModule(err) || !strings.Contains(err.Error(), "compile worker failed") {
		t.Fatalf("want a compile worker failure, got %v", err)
	}
}

// rssBytes is this process's resident set size.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm on this platform")
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		t.Fatal(err)
	}
	return resident * int64(os.Getpagesize())
}

// TestInputValidatedWhereItCompiles: bytes the instrumenter passes but
// wazero refuses (wr_alloc returns an i64 where its type says i32) fail the
// load as invalid whether validation runs in this process or, with a
// compile worker, in the worker; with a worker, no rewrite of them is
// written to the cache, and valid bytes then load and serve.
func TestInputValidatedWhereItCompiles(t *testing.T) {
	t.Parallel()
	valid := testwasm.CompileBomb(1, 1, bombManifest)
	alloc := []byte{0x00, 0x41, 0x80, 0xc0, 0x00, 0x0b} // i32.const 8192; end
	i := bytes.Index(valid, alloc)
	if i < 0 || bytes.Count(valid, alloc) != 1 {
		t.Fatal("wr_alloc's body not found once in the module")
	}
	invalid := bytes.Clone(valid)
	invalid[i+1] = 0x42 // i64.const
	for _, worker := range []bool{false, true} {
		t.Run(fmt.Sprintf("worker=%v", worker), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := engine.Options{CompilationCacheDir: dir}
			if worker {
				opts.Compile.Worker = testworker.With(t, engine.CompileWorker{})
			}
			e, err := engine.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			_, err = e.Load(context.Background(), "invalid.wasm", invalid, engine.Limits{})
			if !engine.IsInvalidModule(err) || !strings.Contains(err.Error(), "not a valid WebAssembly module") {
				t.Fatalf("want an invalid module, got %v", err)
			}
			if rewrites, _ := filepath.Glob(filepath.Join(dir, "wasmreconcile-rewrites", "*")); len(rewrites) != 0 {
				t.Errorf("the rewrite of refused bytes was kept: %v", rewrites)
			}
			m, err := e.Load(context.Background(), "valid.wasm", valid, engine.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			if _, err := m.Reconcile(context.Background(), "reconcile", request(t, map[string]any{})); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCompileWorkerValidatesTheInput speaks the worker's protocol: with an
// input to validate that wazero refuses, the worker answers it invalid even
// though the module to compile is valid; with a valid input it compiles.
// (An input the instrumenter would turn into a valid rewrite is what this
// check exists for; the rewrite of the load test above stays invalid.)
func TestCompileWorkerValidatesTheInput(t *testing.T) {
	t.Parallel()
	valid := testwasm.CompileBomb(1, 1, bombManifest)
	invalid := append(bytes.Clone(valid), 0xff) // a section id that does not exist
	for _, c := range []struct {
		input       []byte
		wantInvalid bool
	}{{invalid, true}, {valid, false}} {
		header, _ := json.Marshal(map[string]any{"wazero": engine.WazeroVersion(), "cacheDir": t.TempDir(), "size": len(valid), "validate": len(c.input)})
		req := append(append(append(header, '\n'), valid...), c.input...)
		var out bytes.Buffer
		if err := engine.ServeCompileWorker(bytes.NewReader(req), &out); err != nil {
			t.Fatal(err)
		}
		var answer struct {
			Error   string `json:"error"`
			Invalid bool   `json:"invalid"`
		}
		if err := json.Unmarshal(out.Bytes(), &answer); err != nil {
			t.Fatalf("answer %q: %v", out.String(), err)
		}
		if answer.Invalid != c.wantInvalid || (answer.Error != "") != c.wantInvalid {
			t.Errorf("input valid=%v: answer %+v", !c.wantInvalid, answer)
		}
	}
}

// countedWorker is testworker's worker, counting the workers it starts.
func countedWorker(t *testing.T) (*engine.CompileWorker, *atomic.Int32) {
	w := testworker.With(t, engine.CompileWorker{})
	runs := &atomic.Int32{}
	cmd := w.Command
	w.Command = func(ctx context.Context) *exec.Cmd {
		runs.Add(1)
		return cmd(ctx)
	}
	return w, runs
}

// TestCompileWorkerOnlyForCodeNotInTheCache: a worker runs for a module
// whose code the compilation cache does not hold, and only then: an
// engine started again on the same directory (a restarted operator)
// loads the module from the cache without one; with wazero's files gone,
// the load runs a worker again rather than compiling in the operator, and
// so does a module waking from unload whose code was removed meanwhile.
func TestCompileWorkerOnlyForCodeNotInTheCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, runs := countedWorker(t)
	wasm := testwasm.Build(t, "./widget")
	req := request(t, map[string]any{"size": 3})
	ctx := context.Background()
	removeCode := func() {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("wazero's files: %v (%v), want some", files, err)
		}
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	var want []byte
	for i, step := range []struct {
		name    string
		prepare func()
		runs    int32
	}{
		{"the first load", nil, 1},
		{"a restart", nil, 1},
		{"a restart with wazero's files gone", removeCode, 2},
	} {
		if step.prepare != nil {
			step.prepare()
		}
		e, err := engine.New(engine.Options{CompilationCacheDir: dir, Compile: engine.CompileOptions{Worker: w}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(ctx, "widget.wasm", wasm, engine.Limits{IdleModuleTimeout: time.Hour})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		res, err := m.ReconcileFresh(ctx, "reconcile", req)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if i == 0 {
			want = res.Output
		} else if !bytes.Equal(res.Output, want) {
			t.Errorf("%s: answered %s, want %s", step.name, res.Output, want)
		}
		if got := runs.Load(); got != step.runs {
			t.Errorf("after %s: %d workers run in all, want %d", step.name, got, step.runs)
		}
		if i < 2 {
			_ = m.Close(ctx)
			_ = e.Close(ctx)
			continue
		}
		// Unloaded, its code removed, then woken by a call.
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		e, err = engine.New(engine.Options{CompilationCacheDir: dir, Compile: engine.CompileOptions{Worker: w}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		if m, err = e.Load(ctx, "widget.wasm", wasm, engine.Limits{IdleModuleTimeout: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		deadline := time.Now().Add(time.Minute)
		for m.Loaded() {
			if time.Now().After(deadline) {
				t.Fatal("not unloaded a minute after its idle timeout of 50 ms")
			}
			time.Sleep(10 * time.Millisecond)
		}
		before := runs.Load()
		removeCode()
		if res, err = m.ReconcileFresh(ctx, "reconcile", req); err != nil {
			t.Fatalf("the wake with its code removed: %v", err)
		}
		if !bytes.Equal(res.Output, want) {
			t.Errorf("the wake with its code removed answered %s, want %s", res.Output, want)
		}
		if got := runs.Load() - before; got != 1 {
			t.Errorf("the wake with its code removed ran %d workers, want 1", got)
		}
	}
}
