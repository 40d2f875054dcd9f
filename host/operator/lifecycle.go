package operator

import (
	"context"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
)

// lifecycle publishes each module's lifecycle state (wasmreconcile_module_state)
// every interval once the caches have synced:
//
//   - initialized: the informer caches have synced;
//   - converged: initialized, the module's workqueue is empty, no reconcile
//     is running, and no object's last reconcile failed;
//   - quiescent: converged, and no reconcile has written anything for
//     quiescentAfter.
type lifecycle struct {
	synced         func(context.Context) bool
	reconcilers    func() []activityReporter
	quiescentAfter time.Duration
	interval       time.Duration
}

// NeedLeaderElection is false: every replica reports its own state.
func (l *lifecycle) NeedLeaderElection() bool { return false }

func (l *lifecycle) Start(ctx context.Context) error {
	if !l.synced(ctx) {
		return nil // stopped before the caches synced
	}
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		l.evaluate(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// activityReporter is what lifecycle needs of a reconciler.
type activityReporter interface {
	Activity() reconciler.Activity
	Name() string
}

func (l *lifecycle) evaluate(now time.Time) {
	l.evaluateWith(now)
}

func (l *lifecycle) evaluateWith(now time.Time) {
	for _, r := range l.reconcilers() {
		a, name := r.Activity(), r.Name()
		converged := a.Queued == 0 && a.Active == 0 && a.Failing == 0
		quiescent := converged && (a.LastChange.IsZero() || now.Sub(a.LastChange) >= l.quiescentAfter)
		metrics.ModuleState.WithLabelValues(name, "initialized").Set(1)
		metrics.ModuleState.WithLabelValues(name, "converged").Set(b2f(converged))
		metrics.ModuleState.WithLabelValues(name, "quiescent").Set(b2f(quiescent))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
