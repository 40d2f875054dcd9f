package engine

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// capBytes is the memory cap the budget tests give the ceiling guest.
const (
	capPages = 64
	capBytes = capPages * pageBytes
)

func budgetEngine(t *testing.T, b *MemoryBudget) *Engine {
	t.Helper()
	e, err := New(Options{MemoryBudget: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func budget(t *testing.T, n int64) *MemoryBudget {
	t.Helper()
	b, err := NewMemoryBudget(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMemoryBudgetWaitsThenServes: with room for two instances, two
// spinning calls hold the whole budget; a third call waits (visibly: the
// budget counts it) instead of growing the process, and is served once a
// spinner ends, reporting how long it waited.
func TestMemoryBudgetWaitsThenServes(t *testing.T) {
	b := budget(t, 2*capBytes)
	m := loadCeiling(t, budgetEngine(t, b), Limits{MemoryLimitPages: capPages, Fuel: 1 << 50, Timeout: 2 * time.Second})
	// The spinners hold the budget until their callers give up, well
	// inside the waiting call's 2 s: the wait ends by their release, not
	// by a race between two equal timeouts.
	spinCtx, stopSpinning := context.WithCancel(context.Background())
	defer stopSpinning()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = m.Reconcile(spinCtx, "reconcile spin", []byte("spin!"))
		}()
	}
	waitFor(t, "two instances", func() bool { return b.Stats().Reserved == 2*capBytes && m.PoolStats().Idle == 0 })
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = m.Reconcile(context.Background(), "reconcile grow", []byte("grow"))
	}()
	waitFor(t, "the third call to wait", func() bool { return b.Stats().Waiting == 1 })
	if r := b.Stats().Reserved; r > b.Limit() {
		t.Errorf("reserved %d over the budget %d", r, b.Limit())
	}
	stopSpinning()
	<-done
	wg.Wait()
	if err != nil {
		t.Fatalf("the waiting call failed: %v", err)
	}
	if res.MemoryWait <= 0 {
		t.Errorf("the call waited but reports MemoryWait %s", res.MemoryWait)
	}
	if st := b.Stats(); st.Waits < 1 || st.Waiting != 0 {
		t.Errorf("stats %+v: want a wait counted and none waiting", st)
	}
}

// TestMemoryBudgetEvictsIdleInstances: a module's idle instance is closed
// to make room for another module's instance, rather than making it wait.
func TestMemoryBudgetEvictsIdleInstances(t *testing.T) {
	b := budget(t, capBytes)
	e := budgetEngine(t, b)
	a := loadCeiling(t, e, Limits{MemoryLimitPages: capPages})
	if a.PoolStats().Idle != 1 || b.Stats().Reserved != capBytes {
		t.Fatalf("after the first load: pool %+v, budget %+v; want its instance idle, holding the budget", a.PoolStats(), b.Stats())
	}
	c := loadCeiling(t, e, Limits{MemoryLimitPages: capPages})
	if a.PoolStats().Live != 0 || c.PoolStats().Idle != 1 {
		t.Errorf("pools %+v and %+v: want the first module's idle instance closed for the second's", a.PoolStats(), c.PoolStats())
	}
	if st := b.Stats(); st.Evicted != 1 || st.Waits != 0 {
		t.Errorf("stats %+v: want one eviction and no wait", st)
	}
}

// TestMemoryBudgetCallGivesUp: a call that waits its whole timeout for
// memory fails with a MemoryBudgetError that says what to do, and leaves
// nothing reserved.
func TestMemoryBudgetCallGivesUp(t *testing.T) {
	b := budget(t, capBytes)
	e := budgetEngine(t, b)
	other := loadCeiling(t, e, Limits{MemoryLimitPages: capPages, Timeout: 200 * time.Millisecond})
	spinner := loadCeiling(t, e, Limits{MemoryLimitPages: capPages, Fuel: 1 << 50, Timeout: time.Minute}) // evicts other's idle instance
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		_, _ = spinner.Reconcile(ctx, "reconcile spin", []byte("spin!"))
	}()
	waitFor(t, "the spinner to hold the budget", func() bool { return spinner.PoolStats().Idle == 0 && b.Stats().Reserved == capBytes })
	_, err := other.Reconcile(context.Background(), "reconcile default/o", []byte("grow"))
	var be *MemoryBudgetError
	if !errors.As(err, &be) || be.Never || be.Need != capBytes {
		t.Fatalf("want a MemoryBudgetError for %d bytes, got %T: %v", capBytes, err, err)
	}
	for _, want := range []string{"module[ceiling] reconcile default/o: waited", "of the operator's guest memory budget of 4Mi", "--memory-budget"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if st := b.Stats(); st.Refused != 1 || st.Waiting != 0 {
		t.Errorf("stats %+v: want one refusal and nothing waiting", st)
	}
	cancel()
	<-spun
}

// TestMemoryBudgetLowersTheCeiling: no instance may be larger than the
// whole budget, so the engine's memory ceiling is lowered to it, and a
// compile worker that could never fit is refused.
func TestMemoryBudgetLowersTheCeiling(t *testing.T) {
	b := budget(t, 8<<20)
	m := loadCeiling(t, budgetEngine(t, b), Limits{MemoryLimitPages: 65536})
	if l := m.Limits(); l.MemoryLimitPages != 128 {
		t.Errorf("memory %d pages, want the budget's 128", l.MemoryLimitPages)
	}
	w := &CompileWorker{Command: func(context.Context) *exec.Cmd { return nil }, MaxMemory: 16 << 20}
	if _, err := New(Options{MemoryBudget: b, Compile: CompileOptions{Worker: w}}); err == nil || !strings.Contains(err.Error(), "--compile-max-memory") {
		t.Errorf("a compile worker larger than the budget: %v, want refused naming --compile-max-memory", err)
	}
}
