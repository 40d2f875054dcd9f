package supervisor

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
		m := lifecycleStates(c.a, c.synced, now, time.Minute)
		if got := [3]bool{m.Initialized, m.Converged, m.Quiescent}; got != c.want {
			t.Errorf("%s: initialized, converged, quiescent = %v, want %v", c.name, got, c.want)
		}
	}
}

// reasons lists the reasons of events, a Warning's marked with "!".
func reasons(events []HealthEvent) []string {
	var out []string
	for _, e := range events {
		r := e.Reason
		if e.Warning {
			r = "!" + r
		}
		out = append(out, r)
	}
	return out
}

// TestHealthReportsEachEpisodeOnce feeds one module's health the checks of
// a cache that syncs late and a watch that goes quiet and comes back: each
// problem is reported once when it starts and once when it ends, however
// many checks see it meanwhile, and nothing is reported before SyncTimeout
// or StaleAfter has passed.
func TestHealthReportsEachEpisodeOnce(t *testing.T) {
	start := time.Unix(10_000, 0)
	const syncTimeout, staleAfter = time.Minute, 5 * time.Minute
	h := &health{since: start}
	steps := []struct {
		at        time.Duration // after start
		synced    bool
		lastEvent time.Duration // after start; <0: none yet
		want      string
	}{
		{10 * time.Second, false, -1, ""}, // syncing, within SyncTimeout
		{syncTimeout, false, -1, ""},      // at the limit: not past it
		{syncTimeout + time.Second, false, -1, "!SyncFailed"},
		{2 * syncTimeout, false, -1, ""}, // still failing: said already
		{3 * syncTimeout, true, 3 * syncTimeout, "Synced"},
		{4 * syncTimeout, true, 3 * syncTimeout, ""},
		{3*syncTimeout + staleAfter, true, 3 * syncTimeout, ""}, // at the limit
		{3*syncTimeout + staleAfter + time.Second, true, 3 * syncTimeout, "!CacheStale"},
		{20 * time.Minute, true, 3 * syncTimeout, ""}, // still stale: said already
		{21 * time.Minute, true, 21 * time.Minute, "Fresh"},
		{22 * time.Minute, true, 21 * time.Minute, ""},
	}
	for _, st := range steps {
		var last time.Time
		if st.lastEvent >= 0 {
			last = start.Add(st.lastEvent)
		}
		events := h.observe("m", "Widget", st.synced, "the informer has not synced", last, start.Add(st.at), syncTimeout, staleAfter)
		if got := strings.Join(reasons(events), ","); got != st.want {
			t.Errorf("at %s (synced %v): events %q, want %q: %+v", st.at, st.synced, got, st.want, events)
		}
		for _, e := range events {
			if e.Module != "m" || !strings.Contains(e.Message, "Widget") {
				t.Errorf("at %s: event %+v does not name the module and the kind", st.at, e)
			}
		}
	}
}

// TestHealthUnservedKinds: the first failed attempt to get a kind's
// informer is one SyncFailed Warning, later attempts are only counted, the
// timed SyncFailed does not repeat it, and Synced waits until every
// unserved kind is served again, not only the module's own.
func TestHealthUnservedKinds(t *testing.T) {
	start := time.Unix(10_000, 0)
	h := &health{since: start}
	late := schema.GroupVersionKind{Group: "late.example.com", Version: "v1", Kind: "Latecomer"}
	noMatch := &meta.NoKindMatchError{GroupKind: late.GroupKind(), SearchedVersions: []string{"v1"}}

	w := h.informer("m", reconciler.InformerState{GVK: late, Err: noMatch})
	if w == nil || !w.Warning || w.Reason != ReasonSyncFailed || !strings.Contains(w.Message, "Latecomer") {
		t.Fatalf("first failed attempt: %+v, want a SyncFailed Warning naming the kind", w)
	}
	for i := 0; i < 3; i++ {
		if w := h.informer("m", reconciler.InformerState{GVK: late, Err: noMatch}); w != nil {
			t.Fatalf("attempt %d reported again: %+v", i+2, w)
		}
	}
	if got := h.unserved[late].Attempts; got != 4 {
		t.Errorf("attempts counted: %d, want 4", got)
	}
	if ev := h.observe("m", "Widget", false, "", time.Time{}, start.Add(time.Hour), time.Minute, time.Hour); len(ev) != 0 {
		t.Errorf("the timed check repeated the warning: %v", reasons(ev))
	}
	if ev := h.observe("m", "Widget", true, "", time.Time{}, start.Add(time.Hour), time.Minute, time.Hour); len(ev) != 0 {
		t.Errorf("Synced while a kind is unserved: %v", reasons(ev))
	}
	if w := h.informer("m", reconciler.InformerState{GVK: late}); w != nil || len(h.unserved) != 0 {
		t.Fatalf("served again: %+v, unserved %v", w, h.unserved)
	}
	if got := reasons(h.observe("m", "Widget", true, "", time.Time{}, start.Add(time.Hour), time.Minute, time.Hour)); strings.Join(got, ",") != "Synced" {
		t.Errorf("once every kind is served: %v, want Synced", got)
	}
	// A new episode is reported again.
	if w := h.informer("m", reconciler.InformerState{GVK: late, Err: noMatch}); w == nil {
		t.Error("a second episode was not reported")
	}
}
