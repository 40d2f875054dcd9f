package operator

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmreconcile/wasmreconcile/host/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
)

type fakeActivity struct {
	name string
	a    reconciler.Activity
}

func (f fakeActivity) Activity() reconciler.Activity { return f.a }
func (f fakeActivity) Name() string                  { return f.name }

func TestLifecycleStates(t *testing.T) {
	now := time.Unix(10_000, 0)
	l := &lifecycle{quiescentAfter: time.Minute, reconcilers: func() []activityReporter {
		return []activityReporter{
			fakeActivity{"idle", reconciler.Activity{}},
			fakeActivity{"recent", reconciler.Activity{LastChange: now.Add(-10 * time.Second)}},
			fakeActivity{"failing", reconciler.Activity{Failing: 1}},
			fakeActivity{"busy", reconciler.Activity{Active: 2}},
			fakeActivity{"queued", reconciler.Activity{Queued: 3}},
		}
	}}
	l.evaluateWith(now)
	want := map[string][3]float64{ // initialized, converged, quiescent
		"idle":    {1, 1, 1},
		"recent":  {1, 1, 0},
		"failing": {1, 0, 0},
		"busy":    {1, 0, 0},
		"queued":  {1, 0, 0},
	}
	for name, w := range want {
		for i, st := range []string{"initialized", "converged", "quiescent"} {
			if got := testutil.ToFloat64(metrics.ModuleState.WithLabelValues(name, st)); got != w[i] {
				t.Errorf("%s %s = %v, want %v", name, st, got, w[i])
			}
		}
	}
}
