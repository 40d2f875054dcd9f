package clusterhardening_test

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// The hardening tests attack the operator as a tenant would, against the
// real API server: a compile bomb as a ReconcileModule and as a candidate,
// a manifest that asks for 4 GiB of memory, a guest that copies a Secret
// everywhere, a canary that fails beside the flight recorder, a related
// object that never stops changing, a module of a kind the operator may
// not list. Each fails without its fix (docs/security.md).

// moduleFromBytes creates a ReconcileModule of bytes b (written to a file),
// deleted when the test ends.
func moduleFromBytes(t *testing.T, e optest.Env, name string, b []byte, mutate func(*v1alpha1.ReconcileModuleSpec)) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ReconcileModuleSpec{Source: fileSource(t, name, b)}}
	if mutate != nil {
		mutate(&rm.Spec)
	}
	if err := e.C.Create(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.C.Delete(context.Background(), rm); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ReconcileModule %s: %v", name, err)
		}
		testenv.Eventually(t, 2*time.Minute, "ReconcileModule "+name+" gone", func() error {
			if err := e.C.Get(context.Background(), client.ObjectKeyFromObject(rm), &v1alpha1.ReconcileModule{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
	})
	return rm
}

// fileSource writes b to a file of the test's and returns it as a pinned
// source.
func fileSource(t *testing.T, name string, b []byte) v1alpha1.Source {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".wasm")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return v1alpha1.Source{File: p, SHA256: supervisor.Digest(b)}
}

// conditionOf returns the condition typ of the ReconcileModule name, or nil.
func conditionOf(t *testing.T, c client.Client, name, typ string) *metav1.Condition {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err != nil {
		return nil
	}
	return meta.FindStatusCondition(rm.Status.Conditions, typ)
}

func runtimeGC() { debug.FreeOSMemory() }

// vmRSS is this process's resident set now, in bytes.
func vmRSS(t testing.TB) int64 { return procStatus(t, "VmRSS:") }

// resetPeakRSS resets the process's peak resident set (VmHWM) and returns
// it; 0 when the kernel does not offer it.
func resetPeakRSS(t testing.TB) int64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0
	}
	return procStatus(t, "VmHWM:")
}

func procStatus(t testing.TB, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("reading /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb); err == nil {
				return kb << 10
			}
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestCompileBombReconcileModule loads the audit's 48 KB compile bomb
// (testwasm.CompileBomb(4000, 4000)) through ReconcileModules, as a module
// and as a candidate:
//
//   - as shipped (the shape check on), it is refused before compiling, in
//     milliseconds, as InvalidModule naming the limit and its flag;
//   - with the shape check off, it reaches the compiler, in a worker
//     process, which is stopped at its limit (here --compile-timeout 15s);
//     meanwhile this process's resident memory stays within 200 MiB of
//     where it was, and another ReconcileModule's change is applied while
//     the bomb still compiles (positive barrier: the bomb's Loading
//     condition is still True when the change is seen).
//
// Without the fix the bomb compiled in the operator: 20 s of CPU, 900 MB,
// and the ReconcileModule controller's one worker held every other change.
func TestCompileBombReconcileModule(t *testing.T) {
	e := optest.NewEnv(t)
	v1 := testwasm.BuildVersion(t, "./widget", "1")

	t.Run("shape check", func(t *testing.T) {
		optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
			ReconcileModules: true,
			Engine:           operator.EngineOptions{Compile: engine.CompileOptions{Worker: testworker.With(t, engine.CompileWorker{})}},
			ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond},
		})
		moduleFromBytes(t, e, "widget", v1, nil)
		optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
		begin := time.Now()
		moduleFromBytes(t, e, "bomb", testwasm.CompileBomb(4000, 4000, `{"name":"bomb","for":{"group":"test.wasmreconcile.io","version":"v1","kind":"Gadget"}}`), nil)
		rm := optest.ModuleCondition(t, e.C, "bomb", "LoadFailed", metav1.ConditionTrue, "InvalidModule")
		msg := meta.FindStatusCondition(rm.Status.Conditions, "LoadFailed").Message
		if !strings.Contains(msg, "refused before compiling") || !strings.Contains(msg, "--max-function-complexity") {
			t.Errorf("LoadFailed message %q, want the shape refusal naming its flag", msg)
		}
		t.Logf("the bomb was refused %s after its ReconcileModule was created: %s", time.Since(begin).Round(time.Millisecond), msg)

		// As a candidate: refused, the serving version untouched.
		optest.SetModuleSpec(t, e.C, "widget", func(s *v1alpha1.ReconcileModuleSpec) {
			s.Candidate = &v1alpha1.Candidate{Source: fileSource(t, "widget-bomb", testwasm.CompileBomb(4000, 4000, `{"name":"widget","for":{"group":"examples.wasmreconcile.io","version":"v1alpha1","kind":"Widget"}}`))}
		})
		got := optest.WaitModule(t, e.C, "widget", "the bomb candidate refused", func(rm *v1alpha1.ReconcileModule) error {
			if r := rm.Status.Rollout; r == nil || r.Candidate == nil || !strings.Contains(r.Candidate.LastError, "--max-function-complexity") {
				return fmt.Errorf("rollout %+v", rm.Status.Rollout)
			}
			return nil
		})
		if got.Status.Digest != supervisor.Digest(v1) || meta.FindStatusCondition(got.Status.Conditions, "Ready").Status != metav1.ConditionTrue {
			t.Errorf("the serving version changed: digest %s, conditions %v", got.Status.Digest, got.Status.Conditions)
		}
	})

	t.Run("compile worker", func(t *testing.T) {
		optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
			ReconcileModules: true,
			Engine: operator.EngineOptions{Compile: engine.CompileOptions{MaxFunctionComplexity: math.MaxUint64, MaxModuleComplexity: math.MaxUint64,
				Worker: testworker.With(t, engine.CompileWorker{MaxMemory: 4 << 30, MaxCPU: 10 * time.Minute, Timeout: 15 * time.Second})}},
			ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond},
		})
		moduleFromBytes(t, e, "widget", v1, nil)
		optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")

		runtimeGC()
		before := vmRSS(t)
		base := resetPeakRSS(t)
		moduleFromBytes(t, e, "bomb", testwasm.CompileBomb(4000, 4000, `{"name":"bomb","for":{"group":"test.wasmreconcile.io","version":"v1","kind":"Gadget"}}`), nil)
		optest.ModuleCondition(t, e.C, "bomb", "Loading", metav1.ConditionTrue, "Fetching")

		// Another ReconcileModule's change, while the bomb compiles.
		changed := time.Now()
		optest.SetModuleSpec(t, e.C, "widget", func(s *v1alpha1.ReconcileModuleSpec) { s.Paused = true })
		optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionFalse, "Paused")
		applied := time.Since(changed)
		if c := conditionOf(t, e.C, "bomb", "Loading"); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("the bomb's load ended before the other change was seen (Loading %v): the test proves nothing", c)
		}
		t.Logf("another ReconcileModule's change was applied %s after it was made, while the bomb compiled", applied.Round(time.Millisecond))

		rm := optest.ModuleCondition(t, e.C, "bomb", "LoadFailed", metav1.ConditionTrue, "InvalidModule")
		msg := meta.FindStatusCondition(rm.Status.Conditions, "LoadFailed").Message
		if !strings.Contains(msg, "the compile took longer than 15s (--compile-timeout)") {
			t.Errorf("LoadFailed message %q, want the compile worker's timeout", msg)
		}
		after, peak := vmRSS(t), procStatus(t, "VmHWM:")
		t.Logf("RSS %d MiB before, %d MiB after, peak %d MiB (reset at %d MiB)", before>>20, after>>20, peak>>20, base>>20)
		if peak-base > 200<<20 && base > 0 {
			t.Errorf("this process's peak resident set rose by %d MiB while the bomb compiled", (peak-base)>>20)
		}
	})
}

//go:embed testdata/hog.wasm
var hogWasm []byte

// TestMemoryBudgetHoldsAManifestAsking4GiB runs the hog guest, whose
// manifest asks for 4 GiB of memory and whose every call fills its whole
// memory and spins, on three Gadgets at once, under a guest memory budget
// of 384 MiB and a memory limit of 256 MiB per instance: the manifest gets
// the 256 MiB the operator allows, not 4 GiB; one instance fits the
// budget, the other calls wait (counted, and a Warning Event on their
// object) instead of growing; and this process's peak resident set rises
// by less than the budget and a margin. Without the budget three
// instances held 768 MiB; without the optest.Rule that a manifest may not ask for
// more than the operator allows, 3 GiB.
func TestMemoryBudgetHoldsAManifestAsking4GiB(t *testing.T) {
	if resetPeakRSS(t) == 0 {
		t.Fatal("no /proc/self/clear_refs: the test cannot read the peak resident set")
	}
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	hog := filepath.Join(t.TempDir(), "hog.wasm")
	if err := os.WriteFile(hog, hogWasm, 0o644); err != nil {
		t.Fatal(err)
	}
	const budget = 384 << 20
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:    []string{hog},
		Registerer: reg,
		Policy:     policy.Policy{Limits: engine.Limits{MemoryLimitPages: 4096, Timeout: 3 * time.Second}},
		Engine:     operator.EngineOptions{MemoryBudget: budget},
	})
	runtimeGC()
	base := resetPeakRSS(t)
	for i := range 3 {
		if err := e.C.Create(ctx, optest.Gadget(e.NS, fmt.Sprintf("hog-%d", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 3*time.Minute, "two calls waited for the budget", func() error {
		if n := optest.Gather(t, reg, "wasmreconcile_memory_budget_events_total", map[string]string{"event": "wait"}); n < 2 {
			return fmt.Errorf("%v waits", n)
		}
		return nil
	})
	// The waits are visible on the objects: a call that got its memory
	// late warns MemoryBudgetWait, one that gave up MemoryBudgetExceeded.
	testenv.Eventually(t, 2*time.Minute, "a budget Warning Event", func() error {
		for i := range 3 {
			for _, reason := range []string{"MemoryBudgetWait", "MemoryBudgetExceeded"} {
				if hasEvent(e, fmt.Sprintf("hog-%d", i), reason) {
					return nil
				}
			}
		}
		return fmt.Errorf("none yet")
	})
	peak := procStatus(t, "VmHWM:")
	t.Logf("peak resident set rose by %d MiB with a budget of %d MiB (three instances of 256 MiB)", (peak-base)>>20, budget>>20)
	if peak-base > budget+128<<20 {
		t.Errorf("the peak resident set rose by %d MiB, over the budget of %d MiB and a 128 MiB margin", (peak-base)>>20, budget>>20)
	}
	if n := optest.Gather(t, reg, "wasmreconcile_memory_budget_bytes", map[string]string{"state": "limit"}); n != budget {
		t.Errorf("wasmreconcile_memory_budget_bytes{state=limit} = %v, want %d", n, budget)
	}
}

// hasEvent reports whether the object name of the test's namespace has an
// Event with reason.
func hasEvent(e optest.Env, name, reason string) bool {
	var list eventsv1.EventList
	if err := e.C.List(context.Background(), &list, client.InNamespace(e.NS)); err != nil {
		return false
	}
	for _, ev := range list.Items {
		if ev.Regarding.Name == name && ev.Reason == reason {
			return true
		}
	}
	return false
}
