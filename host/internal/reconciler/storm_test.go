package reconciler

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

func TestStormTracker(t *testing.T) {
	s := newObjects(policy.Storm{Threshold: 3, Window: time.Second, Backoff: 10 * time.Second})
	k := types.NamespacedName{Namespace: "n", Name: "x"}
	t0 := time.Unix(1000, 0)
	if ok, _ := s.admitStorm(k, "1c", t0); !ok {
		t.Fatal("first call refused")
	}
	s.recordStorm(k, "1c", true, t0) // a change: no storm
	for i := 1; i <= 2; i++ {
		if storm, _ := s.recordStorm(k, "1c", false, t0.Add(time.Duration(i)*100*time.Millisecond)); storm {
			t.Fatalf("storm after %d no-ops", i)
		}
	}
	storm, n := s.recordStorm(k, "1c", false, t0.Add(300*time.Millisecond))
	if !storm || n != 3 {
		t.Fatalf("third no-op within the window: storm %v count %d", storm, n)
	}
	if ok, wait := s.admitStorm(k, "1c", t0.Add(time.Second)); ok || wait <= 0 || wait > 10*time.Second {
		t.Fatalf("quiescent object admitted: %v %v", ok, wait)
	}
	if ok, _ := s.admitStorm(k, "1c", t0.Add(11*time.Second)); !ok {
		t.Fatal("not admitted after the backoff")
	}
	if ok, _ := s.admitStorm(k, "2c", t0.Add(time.Second)); !ok {
		t.Fatal("a new generation did not resume")
	}
	// Slow no-ops never make a storm.
	k2 := types.NamespacedName{Name: "slow"}
	for i := 0; i < 10; i++ {
		if storm, _ := s.recordStorm(k2, "1", false, t0.Add(time.Duration(i)*2*time.Second)); storm {
			t.Fatalf("storm from no-ops 2 s apart (window 1 s) at %d", i)
		}
	}
	// Disabled never damps.
	d := newObjects(policy.Storm{Disabled: true})
	for i := 0; i < 50; i++ {
		if storm, _ := d.recordStorm(k, "1", false, t0); storm {
			t.Fatal("disabled tracker reported a storm")
		}
	}
}
