package supervisor

import (
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

func TestLifecycleStates(t *testing.T) {
	now := time.Unix(10_000, 0)
	for _, c := range []struct {
		name   string
		a      reconciler.Activity
		synced bool
		want   [3]bool // initialized, converged, quiescent
	}{
		{"idle", reconciler.Activity{}, true, [3]bool{true, true, true}},
		{"recent", reconciler.Activity{LastChange: now.Add(-10 * time.Second)}, true, [3]bool{true, true, false}},
		{"long ago", reconciler.Activity{LastChange: now.Add(-2 * time.Minute)}, true, [3]bool{true, true, true}},
		{"failing", reconciler.Activity{Failing: 1}, true, [3]bool{true, false, false}},
		{"busy", reconciler.Activity{Active: 2}, true, [3]bool{true, false, false}},
		{"queued", reconciler.Activity{Queued: 3}, true, [3]bool{true, false, false}},
		{"not synced", reconciler.Activity{}, false, [3]bool{false, false, false}},
	} {
		m := lifecycle(c.a, c.synced, now, time.Minute)
		if got := [3]bool{m.Initialized, m.Converged, m.Quiescent}; got != c.want {
			t.Errorf("%s: initialized, converged, quiescent = %v, want %v", c.name, got, c.want)
		}
	}
}
