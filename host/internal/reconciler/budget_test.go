package reconciler_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// floodEvents counts the Event objects of misbehave's flood mode on name.
func (h *harness) floodEvents(name string) int {
	n := 0
	for _, e := range h.events(name) {
		if strings.HasPrefix(e.Reason, "Flood") {
			n++
		}
	}
	return n
}

// TestEventBudgetInTheCluster: a guest returns 10 Events on every
// reconcile, requeueAfterSeconds: 1, and a status that changes every second
// (so that client-go's Event series, keyed by the object's
// resourceVersion, do not fold them). Without a budget, every Event is an
// Event object in the API; with the default budget (per object: 10 at
// once, then one per 10 s), the Event objects stay within the budget of the
// window, and the rest is counted as dropped.
func TestEventBudgetInTheCluster(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	spec := map[string]any{"mode": "flood", "events": int64(10)}
	calls := func(h *harness) float64 {
		return h.metric(h.metrics.ReconcileTotal.WithLabelValues("misbehave", "Success"))
	}

	// Before: no budget.
	before := run(t, "./internal/testguests/misbehave", runOptions{workers: 1, rec: reconciler.Options{Policy: policy.Policy{Events: policy.Events{Disabled: true}}}})
	start := time.Now()
	before.create(gadgetGVK, "flood", spec)
	testenv.Eventually(t, 2*time.Minute, "100 Event objects without a budget", func() error {
		if n := before.floodEvents("flood"); n < 100 {
			return fmt.Errorf("%d Event objects", n)
		}
		return nil
	})
	t.Logf("without a budget: %d Event objects on one object after %v reconciles in %s", before.floodEvents("flood"), calls(before), time.Since(start).Round(100*time.Millisecond))

	// After: the default budget.
	h := run(t, "./internal/testguests/misbehave", runOptions{workers: 1})
	start = time.Now()
	h.create(gadgetGVK, "flood", spec)
	testenv.Eventually(t, 2*time.Minute, "12 reconciles (120 Events asked for)", func() error {
		if n := calls(h); n < 12 {
			return fmt.Errorf("%v reconciles", n)
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "the burst of 10 recorded", func() error {
		if n := h.floodEvents("flood"); n < policy.DefaultEventObjectBurst {
			return fmt.Errorf("%d Event objects", n)
		}
		return nil
	})
	n, asked := h.floodEvents("flood"), 10*calls(h)
	window := time.Since(start) // every Event counted was recorded within it
	budget := policy.DefaultEventObjectBurst + int(math.Ceil(window.Seconds()*policy.DefaultEventObjectQPS))
	t.Logf("with the default budget: %d Event objects on one object after %v reconciles (%v Events asked for) in %s; budget %d",
		n, asked/10, asked, window.Round(100*time.Millisecond), budget)
	if n > budget {
		t.Errorf("%d Event objects within %s; the budget allows %d", n, window, budget)
	}
	dropped := h.metric(h.metrics.EventsDropped.WithLabelValues("misbehave", "object"))
	if dropped < 120-float64(budget) {
		t.Errorf("Events dropped by the object's bucket: %v, want at least %d", dropped, 120-budget)
	}
	if got := h.metric(h.metrics.EventsDropped.WithLabelValues("misbehave", "module")); got != 0 {
		t.Errorf("Events dropped by the module's bucket: %v; one object cannot reach it", got)
	}
}

// TestTrapNoteKeepsBothEndsOfStderr: a guest that writes 3,000 bytes to
// stderr and exits gets a GuestTrapped Warning Event (the API server
// refuses notes over 1,024 bytes) whose note holds the head and the tail of
// its stderr.
func TestTrapNoteKeepsBothEndsOfStderr(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{})
	h.create(gadgetGVK, "crash", map[string]any{"mode": "stderr", "bytes": int64(3000)})
	testenv.Eventually(t, time.Minute, "a GuestTrapped Event", func() error {
		_, err := h.findEvent("crash", corev1.EventTypeWarning, string(protocol.GuestTrapped))
		return err
	})
	e, _ := h.findEvent("crash", corev1.EventTypeWarning, string(protocol.GuestTrapped))
	if len(e.Note) > protocol.MaxEventMessageBytes {
		t.Errorf("note of %d bytes", len(e.Note))
	}
	for _, want := range []string{"module[misbehave] reconcile " + h.ns + "/crash: guest trapped", "guest stderr:\nSTDERR-HEAD", "STDERR-TAIL", " … "} {
		if !strings.Contains(e.Note, want) {
			t.Errorf("the note lacks %q:\n%s", want, e.Note)
		}
	}
	t.Logf("note of %d bytes:\n%s", len(e.Note), e.Note)
}

// TestDroppedGuestLogLinesAreCounted: a guest that logs 12 lines per call
// under a budget of 5 lines has 7 dropped per call, counted.
func TestDroppedGuestLogLinesAreCounted(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{limits: engine.Limits{MaxLogLines: 5}})
	h.create(gadgetGVK, "chatty", map[string]any{"mode": "log", "lines": int64(12)})
	dropped := h.metrics.GuestLogDropped.WithLabelValues("misbehave")
	testenv.Eventually(t, time.Minute, "dropped log lines counted", func() error {
		if statusString(h.get(gadgetGVK, "chatty"), "summary") != "ok" {
			return fmt.Errorf("no status yet")
		}
		if h.metric(dropped) < 7 {
			return fmt.Errorf("%v dropped lines counted", h.metric(dropped))
		}
		return nil
	})
	if n := h.metric(dropped); math.Mod(n, 7) != 0 {
		t.Errorf("%v dropped lines counted; want 7 per call", n)
	}
}
