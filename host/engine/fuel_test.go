package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// fuelSequence loads the widget guest in a new Engine and returns the fuel
// of a three-call sequence on one pooled instance, then of the same request
// on two fresh instances. Fuel depends on an instance's history (the pooled
// instance has already answered wr_manifest, which warms encoding/json's
// caches), so the determinism claim is: the same module, history and input
// use the same fuel.
func fuelSequence(wasm []byte, opts engine.Options) ([]uint64, error) {
	ctx := context.Background()
	e, err := engine.New(opts)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	var out []uint64
	for _, fresh := range []bool{false, true} {
		m, err := e.Load(ctx, "widget", wasm, engine.Limits{MaxInstances: 1, FreshInstancePerCall: fresh})
		if err != nil {
			return nil, err
		}
		calls := 3
		if fresh {
			calls = 2
		}
		for i := 0; i < calls; i++ {
			size := 3 + i
			if fresh {
				size = 3
			}
			req, _ := json.Marshal(abi.Request{Object: map[string]any{
				"metadata": map[string]any{"name": "w", "generation": 1},
				"spec":     map[string]any{"size": size, "color": "blue"},
			}, Now: "2026-01-01T00:00:00Z"})
			res, err := m.Reconcile(ctx, "reconcile", req)
			if err != nil {
				return nil, err
			}
			out = append(out, res.Fuel)
		}
		m.Close(ctx)
	}
	return out, nil
}

func mustFuelSequence(t *testing.T, opts engine.Options) []uint64 {
	t.Helper()
	seq, err := fuelSequence(testwasm.Build(t, "./widget"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestMain doubles as the child process of TestFuelIsDeterministic: with
// WASMRECONCILE_FUEL_CHILD set to a wasm path it prints that module's fuel
// sequence and exits.
// The tests that measure the process (resident set, mapped code, how
// late a deadline or cancel lands, the memory budget's waits) and those
// sharing the idle engine's hook do not call t.Parallel: go test runs
// the parallel ones only after every serial test has returned, so those
// run alone. The others run beside each other.
func TestMain(m *testing.M) {
	// The compile worker of the tests that isolate compiles: a build of
	// its own, since this binary may be -race.
	if err := testworker.Use(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if path := os.Getenv("WASMRECONCILE_FUEL_CHILD"); path != "" {
		wasm, err := os.ReadFile(path)
		if err == nil {
			var seq []uint64
			if seq, err = fuelSequence(wasm, engine.Options{CompilationCacheDir: os.Getenv("WASMRECONCILE_FUEL_CACHE")}); err == nil {
				fmt.Printf("FUEL %v\n", seq)
				os.Exit(0)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// TestFuelIsDeterministic runs the same calls on new engines, on the
// interpreter, and in another process, and requires identical fuel counts.
// The first engine compiles the guest cold (in the compile worker); the
// others may take its code from the tests' compilation cache.
func TestFuelIsDeterministic(t *testing.T) {
	t.Parallel()
	cache, err := testshare.CompilationCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// A cold compile, in the compile worker (a build without -race:
	// compiling this guest in a -race process takes most of a minute).
	w, err := engine.SelfCompileWorker()
	if err != nil {
		t.Fatal(err)
	}
	a := mustFuelSequence(t, engine.Options{Compile: engine.CompileOptions{Worker: w}})
	for i, f := range a {
		if f == 0 {
			t.Fatalf("call %d reported no fuel: %v", i, a)
		}
	}
	if a[3] != a[4] {
		t.Errorf("two fresh instances used different fuel for the same request: %d vs %d", a[3], a[4])
	}
	// The other runs compare with the first and not with each other:
	// they run beside each other.
	same := func(t *testing.T, what string, got []uint64) {
		if fmt.Sprint(a) != fmt.Sprint(got) {
			t.Errorf("%s: %v, first engine: %v", what, got, a)
		}
	}
	t.Run("group", func(t *testing.T) {
		t.Run("second engine", func(t *testing.T) {
			t.Parallel()
			same(t, "second engine", mustFuelSequence(t, engine.Options{CompilationCacheDir: cache}))
		})
		t.Run("interpreter", func(t *testing.T) {
			t.Parallel()
			same(t, "interpreter", mustFuelSequence(t, engine.Options{Interpreter: true}))
		})
		t.Run("slice", func(t *testing.T) {
			t.Parallel()
			same(t, "with a 1000-unit slice (many refuels)", mustFuelSequence(t, engine.Options{FuelSlice: 1000, CompilationCacheDir: cache}))
		})
		t.Run("process", func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "WASMRECONCILE_FUEL_CHILD="+testwasm.BuildFile(t, "./widget"), "WASMRECONCILE_FUEL_CACHE="+cache)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child process: %v\n%s", err, out)
			}
			var child string
			for _, line := range strings.Split(string(out), "\n") {
				if v, ok := strings.CutPrefix(line, "FUEL "); ok {
					child = v
				}
			}
			if child != fmt.Sprint(a) {
				t.Errorf("another process: %q, this process: %q", child, fmt.Sprint(a))
			}
		})
	})
	t.Logf("fuel per call: %v (identical across engines, interpreter, slice sizes and processes)", a)
}

// TestHammerMixed calls one pool from many goroutines with a mix of healthy
// calls and calls that run out of fuel; run it with -race.
func TestHammerMixed(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/testguests/misbehave", engine.Limits{MaxInstances: 3, Fuel: 50_000_000})
	ok := request(t, map[string]any{"mode": "count", "iterations": int64(100)})
	spin := request(t, map[string]any{"mode": "spin"})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 6; i++ {
				if (g+i)%3 == 0 {
					_, err := m.Reconcile(context.Background(), "spin", spin)
					var fe *engine.FuelExhaustedError
					if !errors.As(err, &fe) {
						errs <- fmt.Errorf("spin: want *FuelExhaustedError, got %v", err)
					}
					continue
				}
				res, err := m.Reconcile(context.Background(), "ok", ok)
				if err != nil {
					errs <- err
				} else if !strings.Contains(string(res.Output), `"counted"`) {
					errs <- fmt.Errorf("unexpected output %s", res.Output)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := m.PoolStats(); s.Live > 3 || s.Idle > 3 {
		t.Errorf("pool exceeded MaxInstances: %+v", s)
	}
}

func TestFreshInstancePerCall(t *testing.T) {
	t.Parallel()
	m := load(t, "./widget", engine.Limits{FreshInstancePerCall: true, MaxInstances: 2})
	for i := 0; i < 3; i++ {
		if _, err := m.Reconcile(context.Background(), "reconcile", request(t, map[string]any{"size": i})); err != nil {
			t.Fatal(err)
		}
		if s := m.PoolStats(); s.Live != 0 || s.Idle != 0 {
			t.Fatalf("instance kept after a call in fresh mode: %+v", s)
		}
	}
}

func TestCompilationCacheDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	e, err := engine.New(engine.Options{CompilationCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	// A small guest: this tests where compiled code goes, not compiling
	// (the widget takes half a minute to compile under -race).
	echo, err := os.ReadFile("testdata/echo.wasm")
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Load(ctx, "echo", echo, engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close(ctx)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("compilation cache dir is empty after a load: %v %v", entries, err)
	}
	if _, err := engine.New(engine.Options{CompilationCacheDir: "/proc/no/such/dir"}); err == nil || !strings.Contains(err.Error(), "compilation cache") {
		t.Errorf("bad cache dir: %v", err)
	}
}
