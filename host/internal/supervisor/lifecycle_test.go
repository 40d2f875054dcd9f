package supervisor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeController is a controller whose Start returns its errs in turn,
// then blocks until its context ends.
type fakeController struct {
	errs    []error
	started chan int // receives the count of Starts so far, each time
	mu      sync.Mutex
	n       int
}

func (f *fakeController) Start(ctx context.Context) error {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	f.started <- n
	if n <= len(f.errs) {
		return f.errs[n-1]
	}
	<-ctx.Done()
	return nil
}

// lifecycleUnderTest returns a lifecycle whose waits are recorded and
// take no time, and the record.
func lifecycleUnderTest(wg *sync.WaitGroup) (*lifecycle, func() []time.Duration) {
	var mu sync.Mutex
	var waits []time.Duration
	l := (&lifecycle{log: logr.Discard(), goroutines: wg, retry: time.Second, maxBackoff: 4 * time.Second,
		wait: func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			return ctx.Err() == nil
		}}).withDefaults()
	return l, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), waits...)
	}
}

func noMatch() error {
	return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "example.com", Kind: "Widget"}, SearchedVersions: []string{"v1"}}
}

// waitStopped fails t unless stopped closes and the goroutines end.
func waitStopped(t *testing.T, stopped <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller's goroutine did not return")
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a goroutine of the lifecycle is still counted")
	}
}

// TestLifecycleRestartsWithBackoff: a controller that stops with an error
// is built and started again, after waits that double from retry up to
// maxBackoff; cancel stops it and its goroutine returns.
func TestLifecycleRestartsWithBackoff(t *testing.T) {
	var wg sync.WaitGroup
	l, waits := lifecycleUnderTest(&wg)
	fail := errors.New("timed out waiting for cache to be synced")
	ctrl := &fakeController{errs: []error{fail, fail, fail, fail}, started: make(chan int, 10)}
	builds := 0
	cancel, stopped := l.start(context.Background(), controllerRun{module: "m",
		build:    func() (starter, error) { builds++; return ctrl, nil },
		unserved: func(error, int) { t.Error("unserved called for a controller that built") },
	})
	if cancel == nil || stopped == nil {
		t.Fatal("start gave no cancel or stopped channel")
	}
	for want := 1; want <= 5; want++ {
		if got := <-ctrl.started; got != want {
			t.Fatalf("start %d, want %d", got, want)
		}
	}
	// The fifth Start blocks: the waits before starts 2-5 are recorded.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	if got := waits(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Errorf("waits between restarts %v, want %v (doubling, capped at maxBackoff)", got, want)
	}
	if builds != 5 {
		t.Errorf("%d builds for 5 starts: each restart needs a new controller", builds)
	}
	cancel()
	waitStopped(t, stopped, &wg)
}

// TestLifecycleWaitsForServedKinds: while a build fails because a kind is
// not served, each attempt is reported and the build retried every retry;
// the controller starts once it builds.
func TestLifecycleWaitsForServedKinds(t *testing.T) {
	var wg sync.WaitGroup
	l, waits := lifecycleUnderTest(&wg)
	ctrl := &fakeController{started: make(chan int, 1)}
	var attempts []int
	builds := 0
	cancel, stopped := l.start(context.Background(), controllerRun{module: "m",
		build: func() (starter, error) {
			builds++
			if builds <= 3 {
				return nil, noMatch()
			}
			return ctrl, nil
		},
		unserved: func(err error, attempt int) {
			if !meta.IsNoMatchError(err) {
				t.Errorf("unserved got %v, not the build's no-match error", err)
			}
			attempts = append(attempts, attempt)
		},
	})
	if cancel == nil {
		t.Fatal("a controller whose kinds are not served yet was not started")
	}
	<-ctrl.started // attempts and builds are written before the Start that sends this
	if len(attempts) != 3 || attempts[0] != 1 || attempts[2] != 3 {
		t.Errorf("unserved attempts %v, want [1 2 3]", attempts)
	}
	if got := waits(); len(got) != 3 || got[0] != time.Second || got[2] != time.Second {
		t.Errorf("waits between builds %v, want retry (1s) three times", got)
	}
	cancel()
	waitStopped(t, stopped, &wg)
}

// TestLifecycleBuildFails: a first build that fails for another reason
// runs nothing; one that fails on a restart ends the goroutine.
func TestLifecycleBuildFails(t *testing.T) {
	var wg sync.WaitGroup
	l, _ := lifecycleUnderTest(&wg)
	cancel, stopped := l.start(context.Background(), controllerRun{module: "m",
		build:    func() (starter, error) { return nil, errors.New("bad options") },
		unserved: func(error, int) { t.Error("unserved called for an error that is not a no-match") },
	})
	if cancel != nil || stopped != nil {
		t.Fatal("a controller that could not be built was started")
	}

	ctrl := &fakeController{errs: []error{errors.New("cache did not sync")}, started: make(chan int, 1)}
	builds := 0
	cancel, stopped = l.start(context.Background(), controllerRun{module: "m",
		build: func() (starter, error) {
			builds++
			if builds == 1 {
				return ctrl, nil
			}
			return nil, noMatch() // on a restart, any build error gives up
		},
		unserved: func(error, int) { t.Error("unserved called on a restart") },
	})
	<-ctrl.started
	waitStopped(t, stopped, &wg) // without cancel
	cancel()
	if builds != 2 {
		t.Errorf("%d builds, want 2 (the first, then the restart that failed)", builds)
	}
}

// TestLifecycleCancelWhileWaiting: cancel during a wait for served kinds
// ends the goroutine without building again.
func TestLifecycleCancelWhileWaiting(t *testing.T) {
	var wg sync.WaitGroup
	l := (&lifecycle{log: logr.Discard(), goroutines: &wg, retry: time.Hour}).withDefaults() // the real timer
	reported := make(chan struct{}, 1)
	builds := 0
	cancel, stopped := l.start(context.Background(), controllerRun{module: "m",
		build:    func() (starter, error) { builds++; return nil, noMatch() },
		unserved: func(error, int) { reported <- struct{}{} },
	})
	<-reported // the goroutine now waits an hour
	cancel()
	waitStopped(t, stopped, &wg)
	if builds != 1 {
		t.Errorf("%d builds: cancel during the wait built again", builds)
	}
}
