package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// calls is the number of guest calls the harness's module has made.
func (h *harness) calls() uint64 { return samples(h.t, h.metrics.FuelUsed) }

func (h *harness) unchanged(module string) float64 {
	return h.metric(h.metrics.Unchanged.WithLabelValues(module))
}

// reconcileNow runs one reconcile of name directly, as a worker would, and
// reports whether it called the guest and whether it was answered as
// unchanged. The test's controller may run reconciles at the same time;
// callers use it once the object has settled.
func (h *harness) reconcileNow(module string, gvk schema.GroupVersionKind, name string) (called, unchanged bool) {
	h.t.Helper()
	calls, skips := h.calls(), h.unchanged(module)
	if _, err := h.rec.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: h.ns, Name: name}}); err != nil {
		h.t.Fatalf("reconcile %s: %v", name, err)
	}
	return h.calls() > calls, h.unchanged(module) > skips
}

// TestUnchangedEventsSkipTheGuest: the event of the host's own status write
// is answered without a call, and every change the guest can react to
// still calls it (unchanged.go lists them).
func TestUnchangedEventsSkipTheGuest(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./widget", runOptions{workers: 1})
	h.create(widgetGVK, "w", map[string]any{"size": int64(1)})
	// The status write makes an update event, which the controller
	// answers without a call: a positive barrier for the count below.
	testenv.Eventually(t, time.Minute, "first status, and the event of its write answered unchanged", func() error {
		if got := statusString(h.get(widgetGVK, "w"), "summary"); got != "1 x grey" {
			return fmt.Errorf("summary %q", got)
		}
		if h.unchanged("widget") < 1 {
			return fmt.Errorf("no unchanged reconcile yet")
		}
		return nil
	})
	if n := h.calls(); n != 1 {
		t.Fatalf("%d guest calls to converge one new Widget, want 1: the status write's own event called the guest", n)
	}
	if called, unchanged := h.reconcileNow("widget", widgetGVK, "w"); called || !unchanged {
		t.Fatalf("a settled object: called=%v unchanged=%v, want no call", called, unchanged)
	}

	// Each change below must call the guest.
	for _, c := range []struct {
		what   string
		mutate func(u *unstructured.Unstructured)
		status bool // a status write, so the status subresource
	}{
		{"a label", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) }, false},
		{"an annotation", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"note": "x"}) }, false},
		{"the spec", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "size")
		}, false},
		{"a finalizer of someone else", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"example.com/keep"}) }, false},
		{"the status, by someone else", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "tampered", "status", "summary")
		}, true},
	} {
		before := h.calls()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(widgetGVK)
		u.SetNamespace(h.ns)
		u.SetName("w")
		if c.status {
			testenv.UpdateStatus(t, h.k8s, u, func() { c.mutate(u) })
		} else {
			testenv.Update(t, h.k8s, u, func() { c.mutate(u) })
		}
		testenv.Eventually(t, time.Minute, "a call after a change of "+c.what, func() error {
			if h.calls() == before {
				return fmt.Errorf("no call yet")
			}
			if got := statusString(h.get(widgetGVK, "w"), "summary"); got == "tampered" {
				return fmt.Errorf("status not restored yet")
			}
			return nil
		})
		// Settled again: the next event without a change is not a call.
		testenv.Eventually(t, time.Minute, "settled after "+c.what, func() error {
			if called, unchanged := h.reconcileNow("widget", widgetGVK, "w"); called || !unchanged {
				return fmt.Errorf("called=%v unchanged=%v", called, unchanged)
			}
			return nil
		})
	}
	if got := statusString(h.get(widgetGVK, "w"), "summary"); got != "2 x grey" {
		t.Fatalf("summary %q after the changes, want \"2 x grey\"", got)
	}
	// Clean up the foreign finalizer so the namespace can go.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(h.ns)
	u.SetName("w")
	testenv.Update(t, h.k8s, u, func() { u.SetFinalizers(nil) })
}

// TestCallUnchangedCallsOnEveryEvent: with Options.Policy.CallUnchanged, the event
// of the status write calls the guest again, as before.
func TestCallUnchangedCallsOnEveryEvent(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./widget", runOptions{workers: 1, rec: reconciler.Options{Policy: policy.Policy{CallUnchanged: true}}})
	h.create(widgetGVK, "w", map[string]any{"size": int64(1)})
	testenv.Eventually(t, time.Minute, "the status write's event to call the guest", func() error {
		if got := statusString(h.get(widgetGVK, "w"), "summary"); got != "1 x grey" {
			return fmt.Errorf("summary %q", got)
		}
		if n := h.calls(); n < 2 {
			return fmt.Errorf("%d calls", n)
		}
		return nil
	})
	if called, unchanged := h.reconcileNow("widget", widgetGVK, "w"); !called || unchanged {
		t.Fatalf("called=%v unchanged=%v, want a call", called, unchanged)
	}
	if got := h.unchanged("widget"); got != 0 {
		t.Fatalf("%v reconciles answered unchanged with CallUnchanged set", got)
	}
}

// TestUnchangedKeepsRequeues: a guest that asks for a requeue is called
// again when it is due, although nothing changed; the event of its status
// write, before that, is not a call.
func TestUnchangedKeepsRequeues(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/respond", runOptions{workers: 1})
	h.create(responderGVK, "r", map[string]any{"response": map[string]any{
		"status":              map[string]any{"summary": "polling"},
		"requeueAfterSeconds": int64(1),
	}})
	testenv.Eventually(t, time.Minute, "requeued calls, and the status write's event answered unchanged", func() error {
		if got := statusString(h.get(responderGVK, "r"), "summary"); got != "polling" {
			return fmt.Errorf("summary %q", got)
		}
		if n := h.calls(); n < 3 {
			return fmt.Errorf("%d calls, want 3: the requeue must still call the guest", n)
		}
		if h.unchanged("respond") < 1 {
			return fmt.Errorf("no unchanged reconcile yet")
		}
		return nil
	})
}

// TestCacheReadsAreNotSkipped: a call that read other objects is not
// skipped next time, because what it read may have changed without an
// event for its object.
func TestCacheReadsAreNotSkipped(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{workers: 1})
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name, cm.Data = h.ns, "settings", map[string]string{"color": "blue"}
	if err := h.k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	h.create(gadgetGVK, "reader", map[string]any{"mode": "read", "configMap": "settings", "selector": "team=a"})
	data := func() any {
		st, _, _ := unstructured.NestedMap(h.get(gadgetGVK, "reader").Object, "status", "data")
		return st["color"]
	}
	testenv.Eventually(t, time.Minute, "status from the read", func() error {
		if got := data(); got != "blue" {
			return fmt.Errorf("data.color %v", got)
		}
		return nil
	})
	testenv.Update(t, h.k8s, cm, func() { cm.Data["color"] = "red" })
	// The ConfigMap's change makes no event for the Gadget (no trigger):
	// the next reconcile, for any reason, must still call the guest.
	testenv.Eventually(t, time.Minute, "the new data, through a reconcile that called the guest", func() error {
		called, unchanged := h.reconcileNow("misbehave", gadgetGVK, "reader")
		if !called || unchanged {
			return fmt.Errorf("called=%v unchanged=%v: a reader was skipped", called, unchanged)
		}
		if got := data(); got != "red" {
			return fmt.Errorf("data.color %v", got)
		}
		return nil
	})
}
