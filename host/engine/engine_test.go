package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

var (
	sharedEngine     *engine.Engine
	sharedEngineOnce sync.Once
)

// newEngine shares one Engine across tests, compiling in the compile
// worker, with the tests' compilation cache on disk: the engine frees a module's code when its last module
// closes, and every test closes its modules, so without the disk each test
// would compile the same guest again (seconds under -race).
func newEngine(t *testing.T) *engine.Engine {
	sharedEngineOnce.Do(func() {
		dir, err := testshare.CompilationCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		// Guests compile in the compile worker, a build without -race
		// (testworker), several times faster than in this process.
		w, err := engine.SelfCompileWorker()
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(engine.Options{CompilationCacheDir: dir, Compile: engine.CompileOptions{Worker: w}})
		if err != nil {
			t.Fatal(err)
		}
		sharedEngine = e
	})
	return sharedEngine
}

func load(t *testing.T, pkg string, limits engine.Limits) *engine.Module {
	t.Helper()
	ctx := context.Background()
	m, err := newEngine(t).Load(ctx, pkg, testwasm.Build(t, pkg), limits)
	if err != nil {
		t.Fatalf("Load(%s): %v", pkg, err)
	}
	t.Cleanup(func() { _ = m.Close(ctx) })
	return m
}

func request(t testing.TB, spec map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(abi.Request{
		Object: map[string]any{
			"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "default", "generation": 2},
			"spec":     spec,
		},
		Now: "2026-01-01T00:00:00Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, b []byte) abi.Response {
	t.Helper()
	var r abi.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response %q: %v", b, err)
	}
	return r
}

func TestLoadReadsManifestAndDigest(t *testing.T) {
	t.Parallel()
	wasm := testwasm.Build(t, "./widget")
	m, err := newEngine(t).Load(context.Background(), "widget.wasm", wasm, engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	sum := sha256.Sum256(wasm)
	if want := "sha256:" + hex.EncodeToString(sum[:]); m.Digest() != want {
		t.Errorf("Digest() = %s, want %s", m.Digest(), want)
	}
	want := abi.Manifest{Name: "widget", For: abi.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}}
	if !reflect.DeepEqual(m.Manifest(), want) {
		t.Errorf("Manifest() = %+v, want %+v", m.Manifest(), want)
	}
	if m.Name() != "widget" {
		t.Errorf("Name() = %q", m.Name())
	}
	if got := m.Limits(); got.Timeout != engine.DefaultTimeout || got.MaxInstances != engine.DefaultMaxInstances ||
		got.MemoryLimitPages != engine.DefaultMemoryLimitPages {
		t.Errorf("defaults not applied: %+v", got)
	}
}

func TestReconcileWidget(t *testing.T) {
	t.Parallel()
	m := load(t, "./widget", engine.Limits{})
	res, err := m.Reconcile(context.Background(), "reconcile default/w", request(t, map[string]any{"size": 3, "color": "blue"}))
	if err != nil {
		t.Fatal(err)
	}
	out := res.Output
	r := decode(t, out)
	if res.Fuel == 0 || res.Duration <= 0 {
		t.Errorf("fuel %d and duration %s not reported", res.Fuel, res.Duration)
	}
	if r.Error != nil || r.Status["summary"] != "3 x blue" || r.Status["observedGeneration"] != float64(2) {
		t.Errorf("unexpected response %s", out)
	}
}

func TestLoadRejectsBadModules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		wasm []byte
		want string
	}{
		{"garbage", []byte("this is not wasm"), "not a valid WebAssembly module"},
		{"truncated", testwasm.Build(t, "./widget")[:1000], "not a valid WebAssembly module"},
		// The smallest valid module: magic and version, no sections.
		{"no abi marker", []byte{0, 'a', 's', 'm', 1, 0, 0, 0}, `does not export "wr_abi_v1"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newEngine(t).Load(context.Background(), "bad.wasm", tc.wasm, engine.Limits{})
			if err == nil {
				m.Close(context.Background())
				t.Fatal("Load succeeded")
			}
			var invalid *engine.InvalidModuleError
			if !errors.As(err, &invalid) {
				t.Fatalf("error %T is not *InvalidModuleError: %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "module[bad.wasm]") {
				t.Errorf("error %q does not name the module and say %q", err, tc.want)
			}
		})
	}
}

// TestLoadRejectsCommandModule builds a guest against guest-sdk without
// -buildmode=c-shared, the mistake of a new author: a WASI command, which
// exports _start and no _initialize. The error says so and how to build a
// reactor, not to rebuild against guest-sdk (it was).
func TestLoadRejectsCommandModule(t *testing.T) {
	t.Parallel()
	_, err := newEngine(t).Load(context.Background(), "widget.wasm", testwasm.BuildCommand(t, "./widget"), engine.Limits{})
	var invalid *engine.InvalidModuleError
	if !errors.As(err, &invalid) {
		t.Fatalf("want *InvalidModuleError, got %T %v", err, err)
	}
	for _, want := range []string{
		"module[widget.wasm] invalid: module exports _start but not _initialize: it was built as a WASI command",
		"build it as a reactor: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared",
		"-mexec-model=reactor",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "rebuild it against guest-sdk") {
		t.Errorf("error %q tells to rebuild against guest-sdk, which the module was built against", err)
	}
}

func TestLoadRejectsMemoryOverLimit(t *testing.T) {
	t.Parallel()
	// Go guests start with more than one page of memory.
	_, err := newEngine(t).Load(context.Background(), "w", testwasm.Build(t, "./widget"), engine.Limits{MemoryLimitPages: 1})
	if !engine.IsInvalidModule(err) || !strings.Contains(err.Error(), "memoryPages") {
		t.Fatalf("want memory-limit InvalidModuleError, got %v", err)
	}
}

func TestDeadlineStopsSpinningGuestAndPoolRecovers(t *testing.T) {
	m := load(t, "./internal/testguests/misbehave", engine.Limits{Fuel: 1 << 50, Timeout: 200 * time.Millisecond, MaxInstances: 1})
	ctx := context.Background()
	_, err := m.Reconcile(ctx, "reconcile default/spin", request(t, map[string]any{"mode": "spin"}))
	var dl *engine.DeadlineExceededError
	if !errors.As(err, &dl) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want *DeadlineExceededError, got %T %v", err, err)
	}
	if !strings.Contains(err.Error(), "module[misbehave] reconcile default/spin: deadline exceeded") {
		t.Errorf("message %q", err)
	}
	// The only instance was discarded; the next call gets a fresh one.
	res, err := m.Reconcile(ctx, "reconcile default/ok", request(t, map[string]any{}))
	if err != nil {
		t.Fatalf("call after deadline: %v", err)
	}
	if r := decode(t, res.Output); r.Status["summary"] != "ok" {
		t.Errorf("unexpected response %s", res.Output)
	}
}

func TestCallerCancel(t *testing.T) {
	m := load(t, "./internal/testguests/misbehave", engine.Limits{Fuel: 1 << 50, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := m.Reconcile(ctx, "reconcile default/spin", request(t, map[string]any{"mode": "spin"}))
	var c *engine.CanceledError
	if !errors.As(err, &c) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want *CanceledError, got %T %v", err, err)
	}
}

func TestGuestExitIsTrap(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/testguests/misbehave", engine.Limits{MaxInstances: 1})
	_, err := m.Reconcile(context.Background(), "reconcile default/exit", request(t, map[string]any{"mode": "exit"}))
	var trap *engine.TrapError
	if !errors.As(err, &trap) {
		t.Fatalf("want *TrapError, got %T %v", err, err)
	}
	if !strings.Contains(trap.Reason, "exit") {
		t.Errorf("reason %q does not mention exit", trap.Reason)
	}
	if _, err := m.Reconcile(context.Background(), "reconcile default/ok", request(t, map[string]any{})); err != nil {
		t.Fatalf("call after trap: %v", err)
	}
}

func TestGuestPanicIsRecoveredIntoError(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/testguests/misbehave", engine.Limits{})
	res, err := m.Reconcile(context.Background(), "reconcile default/panic", request(t, map[string]any{"mode": "panic"}))
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, res.Output)
	if r.Error == nil || r.Error.Terminal || !strings.Contains(r.Error.Message, "panicked") {
		t.Errorf("want retryable panic error, got %s", res.Output)
	}
}

func TestSizeLimits(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/testguests/misbehave", engine.Limits{MaxRequestBytes: 1 << 20, MaxResponseBytes: 64 << 10})
	ctx := context.Background()

	_, err := m.Reconcile(ctx, "reconcile default/huge", make([]byte, 1<<20+1))
	var abiErr *engine.ABIError
	if !errors.As(err, &abiErr) || !strings.Contains(err.Error(), "maxRequestBytes") {
		t.Fatalf("oversized request: want *ABIError, got %T %v", err, err)
	}

	_, err = m.Reconcile(ctx, "reconcile default/big", request(t, map[string]any{"mode": "big", "bytes": 100 << 10}))
	if !errors.As(err, &abiErr) || !strings.Contains(err.Error(), "maxResponseBytes") {
		t.Fatalf("oversized response: want *ABIError, got %T %v", err, err)
	}
	if _, err := m.Reconcile(ctx, "reconcile default/small", request(t, map[string]any{"mode": "big", "bytes": 10})); err != nil {
		t.Fatalf("small response after oversized one: %v", err)
	}
}

// TestConcurrentCalls hammers one module from many goroutines; run with -race.
func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	m := load(t, "./widget", engine.Limits{MaxInstances: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				res, err := m.Reconcile(context.Background(), "reconcile", request(t, map[string]any{"size": g, "color": "c"}))
				if err != nil {
					errs <- err
					return
				}
				var r abi.Response
				if err := json.Unmarshal(res.Output, &r); err != nil {
					errs <- err
					return
				}
				if want := string(rune('0'+g)) + " x c"; r.Status["summary"] != want {
					errs <- errors.New("cross-talk: got " + r.Status["summary"].(string) + ", want " + want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestGuestLogLevels checks the log host function through the conformance
// guest: each level arrives in the call's logger, named "guest".
func TestGuestLogLevels(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/tck", engine.Limits{})
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 1})
	ctx := logr.NewContext(context.Background(), logger)
	req, _ := json.Marshal(abi.Request{Object: map[string]any{
		"apiVersion": "tck.wasmreconcile.io/v1", "kind": "Probe",
		"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"op": "log"},
	}})
	if _, err := m.Reconcile(ctx, "reconcile p", req); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`guest "level"=1 "msg"="tck debug line"`,
		`guest "level"=0 "msg"="tck info line"`,
		`guest "level"=0 "msg"="tck warn line" "guestLevel"="warn"`,
		`guest "msg"="tck error line" "error"=null`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i := range want {
		if strings.TrimSpace(lines[i]) != want[i] {
			t.Errorf("line %d = %q, want %q", i, lines[i], want[i])
		}
	}
}

// TestManifestLimits: the webapp module declares fuel 50M, 2 s and 512 pages.
// A manifest may ask for less than the caller allows (its own limits, or
// the defaults), never more: what it asks over that is lowered, and said.
func TestManifestLimits(t *testing.T) {
	t.Parallel()
	wasm := testwasm.Build(t, "./webapp")
	ctx := context.Background()
	m, err := newEngine(t).Load(ctx, "webapp", wasm, engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if l := m.Limits(); l.Fuel != 50_000_000 || l.Timeout != 2*time.Second || l.MemoryLimitPages != 512 || l.MaxInstances != engine.DefaultMaxInstances {
		t.Errorf("manifest defaults not applied: %+v", l)
	}
	m2, err := newEngine(t).Load(ctx, "webapp", wasm, engine.Limits{Fuel: 7_000_000, MemoryLimitPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(ctx)
	if l := m2.Limits(); l.Fuel != 7_000_000 || l.MemoryLimitPages != 512 || l.Timeout != 2*time.Second {
		t.Errorf("want the caller's fuel (the manifest asks for more) and the manifest's memory and timeout (it asks for less): %+v", l)
	}
	if got := m2.Clamped(); len(got) != 1 || !strings.Contains(got[0], "the manifest's fuel 50000000 lowered to the 7000000 the operator allows") {
		t.Errorf("Clamped() = %q, want the manifest's fuel lowered", got)
	}
	// The module still reconciles after the runtime was rebuilt for 512 pages.
	req, _ := json.Marshal(abi.Request{Object: map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "w", "namespace": "d"}, "spec": map[string]any{"image": "x"}}})
	if _, err := m.Reconcile(ctx, "reconcile d/w", req); err != nil {
		t.Fatal(err)
	}
}

// TestConformanceManifestTriggers loads the conformance guest, whose
// manifest declares a trigger, and checks the host reads it as declared.
func TestConformanceManifestTriggers(t *testing.T) {
	t.Parallel()
	m := load(t, "./internal/tck", engine.Limits{})
	want := []abi.Trigger{{Kind: abi.GroupVersionKind{Version: "v1", Kind: "Secret"}, Field: "spec.secretName"}}
	if got := m.Manifest().Triggers; !reflect.DeepEqual(got, want) {
		t.Fatalf("Triggers = %+v, want %+v", got, want)
	}
}
