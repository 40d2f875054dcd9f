package reconciler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// TestSourceDamperDampsOneSourceOnly: a related object that fans out more
// than Threshold times within Window is deferred to one fan-out per
// Backoff, carrying its latest objects; another related object still fans
// out at once; a source quiet for a window and a backoff starts afresh.
func TestSourceDamperDampsOneSourceOnly(t *testing.T) {
	d := newSourceDamper(policy.Storm{Threshold: 3, Window: 10 * time.Second, Backoff: time.Minute})
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if now, _, _, _ := d.admit("sa", t0.Add(time.Duration(i)*time.Second), nil); !now {
			t.Fatalf("event %d of a new source was damped", i)
		}
	}
	latest := []client.Object{nil}
	now, delay, schedule, started := d.admit("sa", t0.Add(3*time.Second), latest)
	if now || !schedule || !started || delay != time.Minute-time.Second {
		t.Fatalf("4th event: now %v delay %s schedule %v started %v; want deferred by the rest of the backoff, scheduled, storm started", now, delay, schedule, started)
	}
	if now, _, schedule, _ := d.admit("sa", t0.Add(4*time.Second), latest); now || schedule {
		t.Errorf("5th event: now %v schedule %v; want it to ride on the scheduled fan-out", now, schedule)
	}
	if now, _, _, _ := d.admit("configmap", t0.Add(4*time.Second), nil); !now {
		t.Error("another source was damped by the churning one")
	}
	if got := d.fired("sa", t0.Add(62*time.Second)); len(got) != 1 {
		t.Errorf("the deferred fan-out carries %d objects, want the latest event's", len(got))
	}
	if now, _, schedule, _ := d.admit("sa", t0.Add(63*time.Second), nil); now || !schedule {
		t.Errorf("still churning after the deferred fan-out: now %v schedule %v; want deferred again", now, schedule)
	}
	d.fired("sa", t0.Add(123*time.Second))
	if now, _, _, _ := d.admit("sa", t0.Add(300*time.Second), nil); !now {
		t.Error("a source quiet for a window and a backoff is still damped")
	}
}

// TestTriggeredMarkIsTakenOnce: a trigger's mark is seen by the owner's
// next call only.
func TestTriggeredMarkIsTakenOnce(t *testing.T) {
	s := newObjects(policy.Storm{})
	k := types.NamespacedName{Namespace: "ns", Name: "owner"}
	if s.takeTriggered(k) {
		t.Fatal("an unmarked owner is marked")
	}
	s.markTriggered(k)
	if !s.takeTriggered(k) || s.takeTriggered(k) {
		t.Error("the mark is not taken exactly once")
	}
}
