package wholeprocess_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// The lifecycle tests churn one operator's modules (version swaps,
// controller restarts, removals with a backlog) and then check that the
// process is back where it started: as many goroutines as before, give or
// take goroutineSlack, and an idle CPU. A leak of one event handler per
// controller, one retirement per swap or one worker per removal adds
// hundreds of goroutines over a test's rounds, far beyond the slack; a
// worker spinning on a removed module burns a whole core.

// goroutineSlack absorbs what a healthy process may hold beyond its
// baseline at any moment: the goroutines of an Event being written, of an
// HTTP/2 connection opened meanwhile, of a watch being renewed.
const goroutineSlack = 20

// idleWindow is how long the idle CPU is measured, and maxIdleCPU the
// process CPU time (user and system) allowed over it. One goroutine spinning
// burns about a full idleWindow of CPU, still more than half of one on two
// cores kept busy by other processes; an idle operator burns milliseconds.
const (
	idleWindow = 2 * time.Second
	maxIdleCPU = 500 * time.Millisecond
)

// cpuTime is the CPU time (user and system) the test process has used.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// baselineGoroutines is the number of goroutines of a settled process: the
// lowest of a few samples, since an Event being written or a request in
// flight holds a goroutine for a moment.
func baselineGoroutines() int {
	n := runtime.NumGoroutine()
	for i := 0; i < 10; i++ {
		time.Sleep(20 * time.Millisecond)
		n = min(n, runtime.NumGoroutine())
	}
	return n
}

// waitGoroutines waits until at most baseline+goroutineSlack goroutines
// run, and returns how many do. On timeout it fails the test with the most
// common stacks of the goroutines that run.
func waitGoroutines(t testing.TB, baseline int, what string) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline+goroutineSlack {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d goroutines, baseline %d (+%d allowed), 2 minutes on; most common stacks:\n%s",
				what, n, baseline, goroutineSlack, commonStacks(5))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// commonStacks returns the n most common goroutine stacks, with counts.
func commonStacks(n int) string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	// debug=1 groups identical stacks, most common first, separated by
	// blank lines: "N @ 0x...\n#\t0x...\tfunction\tfile:line\n...".
	groups := strings.SplitN(buf.String(), "\n\n", n+1)
	return strings.Join(groups[:min(n, len(groups))], "\n\n")
}

// assertIdle measures the process's CPU time over idleWindow and fails the
// test if it exceeds maxIdleCPU.
func assertIdle(t testing.TB, what string) {
	t.Helper()
	runtime.GC() // not counted: collect the churn's garbage before measuring
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(idleWindow) // the measurement window, not a wait for something to happen
	cpu, wall := cpuTime(t)-cpu0, time.Since(wall0)
	t.Logf("%s: %s of CPU over %s idle", what, cpu.Round(time.Millisecond), wall.Round(time.Millisecond))
	if cpu > maxIdleCPU {
		t.Errorf("%s: the idle process used %s of CPU over %s (at most %s allowed): something spins; most common stacks:\n%s",
			what, cpu.Round(time.Millisecond), wall.Round(time.Millisecond), maxIdleCPU, commonStacks(5))
	}
}

// lifecycleOperator starts an operator with no module for e's namespace.
func lifecycleOperator(t *testing.T, e optest.Env, opts operator.Options) (*operator.Operator, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	return optest.Start(t, e.Cfg, e.OperatorOptions(), opts), reg
}

// TestLifecycleVersionSwaps swaps the widget module's version 100 times
// under a running controller with 20 Widgets, alternating two builds and
// loading each with other limits, so that every swap loads a new version,
// requeues every Widget and, beyond the versions kept compiled, retires an
// old one. Afterwards the goroutines are back to their baseline and the
// idle process burns no CPU.
func TestLifecycleVersionSwaps(t *testing.T) {
	e := optest.NewEnv(t)
	op, reg := lifecycleOperator(t, e, operator.Options{})
	builds := [][]byte{testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")}
	ctx := context.Background()
	apply := func(i int) {
		t.Helper()
		if err := op.Apply(ctx, operator.Module{
			Name: "widget", Source: source.Bytes(fmt.Sprintf("widget v%d", i%2+1), builds[i%2]),
			Policy: policy.Policy{Limits: engine.Limits{Fuel: engine.DefaultFuel - uint64(i)}}, // another version at each swap
		}); err != nil {
			t.Fatalf("swap %d: %v", i, err)
		}
	}
	const widgets = 20
	var names []string
	for i := 0; i < widgets; i++ {
		names = append(names, fmt.Sprintf("w-%d", i))
		if err := e.C.Create(ctx, optest.Widget(e.NS, names[i], 1)); err != nil {
			t.Fatal(err)
		}
	}
	allBy := func(version string) {
		t.Helper()
		for _, name := range names {
			testenv.Eventually(t, 3*time.Minute, name+" by widget v"+version, func() error {
				w := optest.Widget(e.NS, name, 0)
				if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
					return err
				}
				if m := optest.ReadyMessage(w); !strings.HasSuffix(m, "by widget v"+version) {
					return fmt.Errorf("Ready message %q", m)
				}
				return nil
			})
		}
	}
	apply(0)
	allBy("1")
	baseline := baselineGoroutines()

	const swaps = 100
	start := time.Now()
	for i := 1; i <= swaps; i++ {
		apply(i)
	}
	t.Logf("%d swaps in %s", swaps, time.Since(start).Round(time.Millisecond))
	if got := optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "swapped"}); got != swaps {
		t.Errorf("%v swaps counted, want %d", got, swaps)
	}
	allBy(fmt.Sprint(swaps%2 + 1)) // the last version serves every Widget
	after := waitGoroutines(t, baseline, fmt.Sprintf("after %d swaps", swaps))
	t.Logf("goroutines: %d before the swaps, %d after", baseline, after)
	assertIdle(t, fmt.Sprintf("after %d swaps", swaps))
}

// TestLifecycleControllerRestarts restarts the misbehave module's
// controller 100 times by changing its configuration, each time waiting
// until the new controller has reconciled a Gadget with the new
// configuration: every stopped controller must remove its event handlers
// from the shared informers (each leaked handler keeps two goroutines and
// receives every event of its kind forever). Afterwards the goroutines are
// back to their baseline and the idle process burns no CPU.
func TestLifecycleControllerRestarts(t *testing.T) {
	e := optest.NewEnv(t)
	op, reg := lifecycleOperator(t, e, operator.Options{})
	wasm := testwasm.Build(t, "./internal/testguests/misbehave")
	ctx := context.Background()
	if err := e.C.Create(ctx, optest.Gadget(e.NS, "echo", "config")); err != nil {
		t.Fatal(err)
	}
	restart := func(round int64) {
		t.Helper()
		if err := op.Apply(ctx, operator.Module{
			Name: "misbehave", Source: source.Bytes("misbehave", wasm), Config: map[string]any{"round": round},
		}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Positive barrier: the new controller runs and has reconciled
		// the Gadget with the new configuration.
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("the Gadget reconciled with round %d", round), func() error {
			g := optest.Gadget(e.NS, "echo", "")
			if err := e.C.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return err
			}
			got, _, _ := unstructured.NestedFieldNoCopy(g.Object, "status", "config", "round")
			if fmt.Sprint(got) != fmt.Sprint(round) {
				return fmt.Errorf("status.config.round is %v", got)
			}
			return nil
		})
	}
	restart(0)
	baseline := baselineGoroutines()

	const restarts = 100
	start := time.Now()
	for i := int64(1); i <= restarts; i++ {
		restart(i)
	}
	t.Logf("%d restarts in %s", restarts, time.Since(start).Round(time.Millisecond))
	if got := optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "misbehave", "result": "restarted"}); got != restarts+1 {
		t.Errorf("%v restarts counted, want %d", got, restarts+1)
	}
	after := waitGoroutines(t, baseline, fmt.Sprintf("after %d controller restarts", restarts))
	t.Logf("goroutines: %d before the restarts, %d after", baseline, after)
	assertIdle(t, fmt.Sprintf("after %d controller restarts", restarts))
}

// TestLifecycleRemovalsWithBacklog removes the misbehave module 20 times
// while its workqueue holds a backlog of about 300 Gadgets, each of which
// spins until its deadline, so that the backlog cannot drain before the
// removal. A removed module's reconciles return at once without calling
// the guest (at most the calls already running at the removal end, as
// Canceled), its workers stop and its handlers go: the goroutines come
// back to their baseline after every removal, and the idle process burns
// no CPU afterwards.
func TestLifecycleRemovalsWithBacklog(t *testing.T) {
	e := optest.NewEnv(t)
	const workers = 4
	op, reg := lifecycleOperator(t, e, operator.Options{Policy: policy.Policy{MaxConcurrentReconciles: workers}})
	wasm := testwasm.Build(t, "./internal/testguests/misbehave")
	ctx := context.Background()
	const backlog = 300
	for i := 0; i < backlog; i++ {
		if err := e.C.Create(ctx, optest.Gadget(e.NS, fmt.Sprintf("spin-%d", i), "spin")); err != nil {
			t.Fatal(err)
		}
	}
	calls := func() float64 {
		return optest.Gather(t, reg, "wasmreconcile_guest_duration_seconds", map[string]string{"module": "misbehave"})
	}
	// round applies the module, waits until it calls the guest with a
	// backlog in its queue, removes it, and returns the count of guest calls
	// right after the removal.
	round := func(i int) float64 {
		t.Helper()
		if err := op.Apply(ctx, operator.Module{
			Name: "misbehave", Source: source.Bytes("misbehave", wasm),
			Policy: policy.Policy{Limits: engine.Limits{Timeout: 100 * time.Millisecond}}, // every call spins until this deadline
		}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("round %d: a guest call with a backlog", i), func() error {
			s, ok := optest.ModuleStatus(op, "misbehave")
			if !ok {
				return fmt.Errorf("the module does not run")
			}
			if a := s.Activity; a.Active < 1 || a.Queued < backlog-50 {
				return fmt.Errorf("%d reconciles running, %d queued", a.Active, a.Queued)
			}
			return nil
		})
		if !op.Remove("misbehave") {
			t.Fatalf("round %d: the module did not run", i)
		}
		return calls()
	}
	round(0) // starts the informers of the module's kinds, which stay
	baseline := waitGoroutines(t, baselineGoroutines(), "after the first removal")

	const removals = 20
	for i := 1; i <= removals; i++ {
		before := round(i)
		n := waitGoroutines(t, baseline, fmt.Sprintf("after removal %d", i))
		if extra := calls() - before; extra > workers {
			t.Errorf("removal %d: %v guest calls ended after the removal; only the calls of the %d workers running then may", i, extra, workers)
		}
		if i%5 == 0 {
			t.Logf("removal %d: %d goroutines (baseline %d)", i, n, baseline)
		}
	}
	assertIdle(t, fmt.Sprintf("after %d removals with a backlog of %d", removals, backlog))
}
