package reconciler_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

func TestGuestComputesStatusAndFollowsSpec(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./widget", runOptions{})
	h.create(widgetGVK, "w1", map[string]any{"size": int64(3), "color": "blue"})
	testenv.Eventually(t, time.Minute, "status from the guest", func() error {
		u := h.get(widgetGVK, "w1")
		if got := statusString(u, "summary"); got != "3 x blue" {
			return fmt.Errorf("summary %q", got)
		}
		if gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); gen != u.GetGeneration() {
			return fmt.Errorf("observedGeneration %d, generation %d", gen, u.GetGeneration())
		}
		if c := readyCondition(u); c == nil || c["status"] != "True" || c["reason"] != "Reconciled" {
			return fmt.Errorf("Ready condition %v", c)
		}
		return nil
	})

	// A spec change makes the status follow.
	h.update(widgetGVK, "w1", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(7), "spec", "size")
	})
	testenv.Eventually(t, time.Minute, "status to follow the spec", func() error {
		u := h.get(widgetGVK, "w1")
		gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if got := statusString(u, "summary"); got != "7 x blue" || gen != 2 {
			return fmt.Errorf("summary %q observedGeneration %d", got, gen)
		}
		return nil
	})

	// An invalid spec gives Ready=False and a ReconcileFailed Warning.
	h.update(widgetGVK, "w1", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(1000), "spec", "size")
	})
	testenv.Eventually(t, time.Minute, "Ready=False and a Warning Event", func() error {
		if c := readyCondition(h.get(widgetGVK, "w1")); c == nil || c["status"] != "False" || c["reason"] != "InvalidSpec" {
			return fmt.Errorf("Ready condition %v", c)
		}
		e, err := h.findEvent("w1", corev1.EventTypeWarning, string(protocol.ReconcileFailed))
		if err != nil {
			return err
		}
		if !strings.Contains(e.Note, "spec.size 1000 is outside 0..100") || !strings.Contains(e.Note, "module[widget] reconcile "+h.ns+"/w1") {
			return fmt.Errorf("event note %q", e.Note)
		}
		return nil
	})
}

// TestUnchangedStatusIsNotWritten touches a Widget's metadata: it is
// reconciled again, the guest computes the same status, and the host must
// not write it. With one worker, the workqueue is first-in first-out: a
// sibling Widget changed after the touch converges only after the touched
// Widget's reconcile has finished, which is the barrier before the check.
func TestUnchangedStatusIsNotWritten(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./widget", runOptions{workers: 1})
	h.create(widgetGVK, "w2", map[string]any{"size": int64(1)})
	h.create(widgetGVK, "sibling", map[string]any{"size": int64(1)})
	for _, name := range []string{"w2", "sibling"} {
		testenv.Eventually(t, time.Minute, "first status of "+name, func() error {
			if got := statusString(h.get(widgetGVK, name), "summary"); got != "1 x grey" {
				return fmt.Errorf("summary %q", got)
			}
			return nil
		})
	}
	if h.writes("w2") == 0 {
		t.Fatal("no status write was counted for the first status; the counter is broken")
	}
	// The reconcile after the first status write (a watch event of our own
	// write) is covered too: by the same barrier.
	writes := h.writes("w2")
	before := h.metric(h.metrics.ReconcileTotal.WithLabelValues("widget", "Success"))
	h.update(widgetGVK, "w2", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"touched": "yes"}) })
	rv := h.get(widgetGVK, "w2").GetResourceVersion() // a status write after the touch shows in writes too
	h.update(widgetGVK, "sibling", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "size")
	})
	// The sibling's status is visible before its reconcile has counted
	// itself (the count comes after the write): wait for both.
	testenv.Eventually(t, time.Minute, "the sibling to converge, and both reconciles counted", func() error {
		if got := statusString(h.get(widgetGVK, "sibling"), "summary"); got != "2 x grey" {
			return fmt.Errorf("summary %q", got)
		}
		if after := h.metric(h.metrics.ReconcileTotal.WithLabelValues("widget", "Success")); after < before+2 {
			return fmt.Errorf("reconciles after the touch: %v, want at least 2 (w2, then the sibling)", after-before)
		}
		return nil
	})
	if n := h.writes("w2") - writes; n != 0 {
		t.Fatalf("%d status write(s) sent for an unchanged status", n)
	}
	if got := h.get(widgetGVK, "w2").GetResourceVersion(); got != rv {
		t.Fatalf("resourceVersion moved from %s to %s: an unchanged status was written", rv, got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.liveGets != 0 {
		t.Fatalf("the reconciler made %d live GETs; objects must be read from the informer cache", h.liveGets)
	}
}

func TestGuestErrorGivesWarningEventAndRetry(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{})
	h.create(gadgetGVK, "flaky", map[string]any{"mode": "flaky", "failAttempts": int64(3)})
	testenv.Eventually(t, 2*time.Minute, "recovery after retries", func() error {
		u := h.get(gadgetGVK, "flaky")
		attempts, _, _ := unstructured.NestedInt64(u.Object, "status", "attempts")
		if statusString(u, "summary") != "recovered" || attempts != 3 {
			return fmt.Errorf("status %v", u.Object["status"])
		}
		return nil
	})
	e, err := h.findEvent("flaky", corev1.EventTypeWarning, string(protocol.ReconcileFailed))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Note, "fails on purpose") {
		t.Errorf("event note %q", e.Note)
	}
	if got := h.metric(h.metrics.ReconcileTotal.WithLabelValues("misbehave", "ReconcileFailed")); got < 3 {
		t.Errorf("ReconcileFailed results counted: %v, want 3", got)
	}
	testenv.Eventually(t, time.Minute, "no object failing after the recovery", func() error {
		if n := h.rec.Activity().Failing; n != 0 {
			return fmt.Errorf("%d objects still count as failing", n)
		}
		return nil
	})
}

func TestDeadlineExceededGivesWarningEvent(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{limits: engine.Limits{Fuel: 1 << 50, Timeout: 200 * time.Millisecond}})
	h.create(gadgetGVK, "spin", map[string]any{"mode": "spin"})
	testenv.Eventually(t, time.Minute, "a DeadlineExceeded event", func() error {
		e, err := h.findEvent("spin", corev1.EventTypeWarning, string(protocol.DeadlineExceeded))
		if err != nil {
			return err
		}
		if !strings.Contains(e.Note, "module[misbehave]") || !strings.Contains(e.Note, "raise spec.limits.timeout") {
			return fmt.Errorf("event note %q", e.Note)
		}
		return nil
	})
	if h.metric(h.metrics.Preemptions.WithLabelValues("misbehave", "deadline")) < 1 {
		t.Error("the deadline preemption was not counted")
	}
}

func TestGuestEventsAreRecorded(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{})
	h.create(gadgetGVK, "ev", map[string]any{"mode": "events"})
	testenv.Eventually(t, time.Minute, "guest events", func() error {
		if _, err := h.findEvent("ev", corev1.EventTypeNormal, "Hello"); err != nil {
			return err
		}
		_, err := h.findEvent("ev", corev1.EventTypeWarning, "Careful")
		return err
	})
}

func TestMetrics(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./widget", runOptions{})
	if v := h.metric(h.metrics.ReconcileTotal.WithLabelValues("widget", "GuestTrapped")); v != 0 {
		t.Errorf("GuestTrapped = %v before any reconcile", v)
	}
	if n := testutil.CollectAndCount(h.metrics.ReconcileTotal); n < len(protocol.Kinds)-1 {
		t.Errorf("reconcile_total has %d series; the label sets are not pre-initialised", n)
	}
	h.create(widgetGVK, "m", map[string]any{"size": int64(2)})
	testenv.Eventually(t, time.Minute, "widget metrics", func() error {
		if h.metric(h.metrics.ReconcileTotal.WithLabelValues("widget", "Success")) < 1 {
			return fmt.Errorf("no successful reconcile counted")
		}
		if h.metric(h.metrics.StatusWrites.WithLabelValues("widget")) < 1 {
			return fmt.Errorf("no status write counted")
		}
		for name, c := range map[string]prometheus.Collector{"fuel": h.metrics.FuelUsed, "guest duration": h.metrics.GuestDuration} {
			if n := samples(t, c); n < 1 {
				return fmt.Errorf("%s: %d samples", name, n)
			}
		}
		return nil
	})
	st := h.rec.Activity()
	if st.LastChange.IsZero() {
		t.Error("Activity: no last change after a status write")
	}

	// Fuel preemptions and their result.
	h2 := run(t, "./internal/testguests/misbehave", runOptions{limits: engine.Limits{Fuel: 5_000_000}})
	h2.create(gadgetGVK, "spin", map[string]any{"mode": "spin"})
	testenv.Eventually(t, time.Minute, "a fuel preemption counted", func() error {
		if h2.metric(h2.metrics.Preemptions.WithLabelValues("misbehave", "fuel")) < 1 {
			return fmt.Errorf("no fuel preemption")
		}
		if h2.metric(h2.metrics.ReconcileTotal.WithLabelValues("misbehave", "FuelExhausted")) < 1 {
			return fmt.Errorf("no FuelExhausted result")
		}
		return nil
	})
}

func TestModuleConfigReachesTheGuest(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{rec: reconciler.Options{Config: map[string]any{"region": "eu", "replicas": 3.0}}})
	h.create(gadgetGVK, "cfg", map[string]any{"mode": "config"})
	testenv.Eventually(t, time.Minute, "the config in the status", func() error {
		cfg, _, _ := unstructured.NestedMap(h.get(gadgetGVK, "cfg").Object, "status", "config")
		if cfg["region"] != "eu" || cfg["replicas"] != int64(3) {
			return fmt.Errorf("status.config = %v", cfg)
		}
		return nil
	})
}

// TestReconcileStormIsDamped churns an annotation (each change reconciles
// the object, and nothing changes), expects a ReconcileStorm Event and
// damping, then changes the spec and expects the object to resume at once.
func TestReconcileStormIsDamped(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{rec: reconciler.Options{Policy: policy.Policy{Storm: policy.Storm{Threshold: 5, Window: time.Minute, Backoff: 10 * time.Minute}}}})
	h.create(gadgetGVK, "churn", map[string]any{})
	testenv.Eventually(t, time.Minute, "first status", func() error {
		if statusString(h.get(gadgetGVK, "churn"), "summary") != "ok" {
			return fmt.Errorf("no status yet")
		}
		return nil
	})
	success := func() float64 { return h.metric(h.metrics.ReconcileTotal.WithLabelValues("misbehave", "Success")) }
	churn := func(i int) {
		// Each change is reconciled before the next (a barrier, not a
		// sleep), so every churn is one reconcile that changes nothing.
		before := success() + h.metric(h.metrics.Damped.WithLabelValues("misbehave"))
		h.update(gadgetGVK, "churn", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"churn": fmt.Sprint(i)}) })
		testenv.Eventually(t, time.Minute, "the churn reconciled", func() error {
			if success()+h.metric(h.metrics.Damped.WithLabelValues("misbehave")) <= before {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	for i := 0; i < 10; i++ {
		churn(i)
	}
	testenv.Eventually(t, time.Minute, "a ReconcileStorm event", func() error {
		_, err := h.findEvent("churn", corev1.EventTypeWarning, reconciler.ReasonReconcileStorm)
		return err
	})
	if got := h.metric(h.metrics.StormsDetected.WithLabelValues("misbehave")); got != 1 {
		t.Errorf("storms counted: %v, want 1", got)
	}
	calls := success()
	damped := h.metric(h.metrics.Damped.WithLabelValues("misbehave"))
	for i := 10; i < 15; i++ {
		churn(i)
	}
	if got := h.metric(h.metrics.Damped.WithLabelValues("misbehave")) - damped; got != 5 {
		t.Errorf("damped reconciles: %v, want 5", got)
	}
	if extra := success() - calls; extra > 0 {
		t.Errorf("the guest was called %v times while quiescent", extra)
	}

	// A new generation resumes at once, long before the 10-minute backoff.
	h.update(gadgetGVK, "churn", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "changed", "spec", "note")
	})
	testenv.Eventually(t, time.Minute, "the new generation reconciled", func() error {
		u := h.get(gadgetGVK, "churn")
		if gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); gen != u.GetGeneration() {
			return fmt.Errorf("observedGeneration %d, generation %d", gen, u.GetGeneration())
		}
		return nil
	})
}
