package reconciler

import (
	"sync"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Stats accumulate one module's reconciles since the process started, for
// the ReconcileModule status. They are the reconciler's own state; the
// metrics count the same events for Prometheus and are never read back.
// The zero value is ready to use; it is safe for concurrent use.
type Stats struct {
	mu         sync.Mutex
	reconciles int64 // settled reconciles, damped ones excluded
	errors     int64 // those that did not end in Success
	calls      int64 // guest calls, with their fuel and time
	fuel       uint64
	duration   time.Duration
	lastError  string
}

// StatsSnapshot is a copy of Stats at one moment.
type StatsSnapshot struct {
	Reconciles          int64
	Errors              int64
	MeanFuel            int64
	MeanDurationSeconds float64
	// LastError is the last failure, as "Kind namespace/name: message", or "".
	LastError string
}

func (s *Stats) record(kind protocol.Kind, called bool, res engine.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconciles++
	if kind != protocol.Success {
		s.errors++
	}
	if called {
		s.calls++
		s.fuel += res.Fuel
		s.duration += res.Duration
	}
}

func (s *Stats) setLastError(e string) {
	s.mu.Lock()
	s.lastError = e
	s.mu.Unlock()
}

// Snapshot returns the statistics now.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := StatsSnapshot{Reconciles: s.reconciles, Errors: s.errors, LastError: s.lastError}
	if s.calls > 0 {
		out.MeanFuel = int64(s.fuel / uint64(s.calls))
		out.MeanDurationSeconds = s.duration.Seconds() / float64(s.calls)
	}
	return out
}

// Activity describes what a Reconciler is doing, for lifecycle states.
type Activity struct {
	Queued     int       // objects waiting in the controller's workqueue
	Failing    int       // objects whose last reconcile failed and await a retry
	Active     int       // reconciles running now
	LastChange time.Time // when a reconcile last wrote anything; zero if never
}

// Activity reports the reconciler's current activity.
func (r *Reconciler) Activity() Activity {
	a := Activity{Failing: r.objects.failingCount(), Active: int(r.activity.active.Load())}
	if q := r.queue.Load(); q != nil {
		a.Queued = (*q).Len()
	}
	if ns := r.activity.lastChange.Load(); ns != 0 {
		a.LastChange = time.Unix(0, ns)
	}
	return a
}
