package reconciler

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

func TestStormTracker(t *testing.T) {
	s := newObjects(policy.Storm{Threshold: 3, Window: time.Second, Backoff: 10 * time.Second})
	k := types.NamespacedName{Namespace: "n", Name: "x"}
	t0 := time.Unix(1000, 0)
	if ok, _ := s.admitStorm(k, fp1, t0); !ok {
		t.Fatal("first call refused")
	}
	s.recordStorm(k, fp1, true, t0) // a change: no storm
	for i := 1; i <= 2; i++ {
		if storm, _ := s.recordStorm(k, fp1, false, t0.Add(time.Duration(i)*100*time.Millisecond)); storm {
			t.Fatalf("storm after %d no-ops", i)
		}
	}
	storm, n := s.recordStorm(k, fp1, false, t0.Add(300*time.Millisecond))
	if !storm || n != 3 {
		t.Fatalf("third no-op within the window: storm %v count %d", storm, n)
	}
	if ok, wait := s.admitStorm(k, fp1, t0.Add(time.Second)); ok || wait <= 0 || wait > 10*time.Second {
		t.Fatalf("quiescent object admitted: %v %v", ok, wait)
	}
	if ok, _ := s.admitStorm(k, fp1, t0.Add(11*time.Second)); !ok {
		t.Fatal("not admitted after the backoff")
	}
	if ok, _ := s.admitStorm(k, fp2, t0.Add(time.Second)); !ok {
		t.Fatal("a new generation did not resume")
	}
	// Slow no-ops never make a storm.
	k2 := types.NamespacedName{Name: "slow"}
	for i := 0; i < 10; i++ {
		if storm, _ := s.recordStorm(k2, fp1, false, t0.Add(time.Duration(i)*2*time.Second)); storm {
			t.Fatalf("storm from no-ops 2 s apart (window 1 s) at %d", i)
		}
	}
	// Disabled never damps.
	d := newObjects(policy.Storm{Disabled: true})
	for i := 0; i < 50; i++ {
		if storm, _ := d.recordStorm(k, fp1, false, t0); storm {
			t.Fatal("disabled tracker reported a storm")
		}
	}
}

// Two storm fingerprints: generation 1 and 2 of an object with the same
// children and module.
var fp1, fp2 = stormFingerprint(1, "c", "d"), stormFingerprint(2, "c", "d")

// TestStormFingerprint: each of generation, children and module version
// changes the fingerprint, a boundary between children and version
// included, and none is 0 (no fingerprint).
func TestStormFingerprint(t *testing.T) {
	fps := map[uint64]string{}
	for _, c := range []struct {
		gen     int64
		ch, dig string
	}{{1, "c", "d"}, {2, "c", "d"}, {1, "c2", "d"}, {1, "c", "d2"}, {1, "cd", ""}, {1, "", "cd"}, {0, "", ""}} {
		fp := stormFingerprint(c.gen, c.ch, c.dig)
		if fp == 0 {
			t.Errorf("%v: fingerprint 0", c)
		}
		if prev, dup := fps[fp]; dup {
			t.Errorf("%v has the fingerprint of %s", c, prev)
		}
		fps[fp] = fmt.Sprint(c)
		if again := stormFingerprint(c.gen, c.ch, c.dig); again != fp {
			t.Errorf("%v: not deterministic", c)
		}
	}
}
