package reconciler_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// countingRecorder counts the Events recorded through it, by reason, as
// they are recorded (the API server receives them later).
type countingRecorder struct {
	recorder.EventRecorder
	mu    sync.Mutex
	notes map[string][]string // by reason
}

func (c *countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.mu.Lock()
	c.notes[reason] = append(c.notes[reason], fmt.Sprintf(note, args...))
	c.mu.Unlock()
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (c *countingRecorder) recorded(reason string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notes[reason]...)
}

// TestTerminalFailureGivesOneEvent: a Widget with an invalid spec is a
// terminal error with a status (Ready=False). The host writes that status,
// and the event of its own write used to reconcile the object again: the
// guest failed again and a second, identical ReconcileFailed Warning was
// recorded. Now the event is answered without a call (unchanged.go), so one
// failure gives one Event; a new failure (another spec) gives one more.
func TestTerminalFailureGivesOneEvent(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	rec := &countingRecorder{notes: map[string][]string{}}
	h := run(t, "./widget", runOptions{recorder: func(r recorder.EventRecorder) recorder.EventRecorder {
		rec.EventRecorder = r
		return rec
	}})
	failed := h.metrics.ReconcileTotal.WithLabelValues("widget", string(protocol.ReconcileFailed))
	unchanged := h.metrics.Unchanged.WithLabelValues("widget")
	h.create(widgetGVK, "bad", map[string]any{"size": int64(1000)})
	// The barrier: the event of the status write has been handled, either
	// answered without a call or by a second failing call.
	testenv.Eventually(t, time.Minute, "the status write's event to be handled", func() error {
		if statusString(h.get(widgetGVK, "bad"), "summary") == "" && readyCondition(h.get(widgetGVK, "bad")) == nil {
			return fmt.Errorf("no status yet")
		}
		if n := h.metric(failed) + h.metric(unchanged); n < 2 {
			return fmt.Errorf("%v failures + unchanged events", n)
		}
		return nil
	})
	if notes := rec.recorded(string(protocol.ReconcileFailed)); len(notes) != 1 {
		t.Fatalf("one terminal failure recorded %d ReconcileFailed Events: %q", len(notes), notes)
	}
	if n := h.metric(failed); n != 1 {
		t.Errorf("%v failing calls, want 1", n)
	}
	testenv.Eventually(t, time.Minute, "the Warning in the API server", func() error {
		e, err := h.findEvent("bad", corev1.EventTypeWarning, string(protocol.ReconcileFailed))
		if err != nil {
			return err
		}
		if e.Series != nil {
			return fmt.Errorf("the Event is a series of %d", e.Series.Count)
		}
		return nil
	})

	// Another invalid spec is another failure: one more Event.
	h.update(widgetGVK, "bad", func(u *unstructured.Unstructured) { u.Object["spec"] = map[string]any{"size": int64(2000)} })
	testenv.Eventually(t, time.Minute, "the second failure's status write to be handled", func() error {
		if n := h.metric(failed); n < 2 {
			return fmt.Errorf("%v failures", n)
		}
		if n := h.metric(unchanged); n < 2 {
			return fmt.Errorf("%v unchanged events", n)
		}
		return nil
	})
	notes := rec.recorded(string(protocol.ReconcileFailed))
	if len(notes) != 2 || !strings.Contains(notes[1], "spec.size 2000") {
		t.Errorf("two failures recorded %d ReconcileFailed Events: %q", len(notes), notes)
	}
}

// TestTerminalFailureAfterReadGivesOneEvent: a guest that reads through
// cache_read is called again for the event of its own status write (what
// it read may have changed), and a terminal failure then fails the same
// way again. The repeat is not a new failure: it records no second
// Warning. A new generation that fails is a new failure: one more.
func TestTerminalFailureAfterReadGivesOneEvent(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	rec := &countingRecorder{notes: map[string][]string{}}
	h := run(t, "./internal/testguests/claim", runOptions{recorder: func(r recorder.EventRecorder) recorder.EventRecorder {
		rec.EventRecorder = r
		return rec
	}})
	failed := h.metrics.ReconcileTotal.WithLabelValues("claim", string(protocol.ReconcileFailed))
	spec := func(msg string) map[string]any {
		return map[string]any{
			"read":     map[string]any{"apiVersion": "v1", "kind": "Secret", "namespace": h.ns, "name": "absent"},
			"response": map[string]any{"status": map[string]any{"phase": "Failed"}, "error": map[string]any{"message": msg, "terminal": true}},
		}
	}
	h.create(responderGVK, "bad", spec("bad spec, first"))
	// The barrier: the status write's event was answered by a second call.
	testenv.Eventually(t, time.Minute, "the failing call and the one for its status write", func() error {
		if n := h.metric(failed); n < 2 {
			return fmt.Errorf("%v failing calls", n)
		}
		return nil
	})
	if notes := rec.recorded(string(protocol.ReconcileFailed)); len(notes) != 1 {
		t.Fatalf("one terminal failure, called twice, recorded %d ReconcileFailed Events: %q", len(notes), notes)
	}
	h.update(responderGVK, "bad", func(u *unstructured.Unstructured) { u.Object["spec"] = spec("bad spec, second") })
	testenv.Eventually(t, time.Minute, "the second failure's Warning", func() error {
		if notes := rec.recorded(string(protocol.ReconcileFailed)); len(notes) < 2 {
			return fmt.Errorf("%d Warnings", len(notes))
		}
		return nil
	})
	if notes := rec.recorded(string(protocol.ReconcileFailed)); len(notes) != 2 || !strings.Contains(notes[1], "bad spec, second") {
		t.Errorf("two failures recorded %q", notes)
	}
}
