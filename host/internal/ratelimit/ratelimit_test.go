package ratelimit

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

func TestExponentialPerItemAndBucket(t *testing.T) {
	rl := New(policy.RateLimit{BaseDelay: 10 * time.Millisecond, MaxDelay: 80 * time.Millisecond, QPS: 1000, Burst: 1000})
	a := reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}}
	b := reconcile.Request{NamespacedName: types.NamespacedName{Name: "b"}}
	for i, want := range []time.Duration{10, 20, 40, 80, 80} {
		if got := rl.When(a); got != want*time.Millisecond {
			t.Errorf("failure %d of a: delay %s, want %s", i+1, got, want*time.Millisecond)
		}
	}
	if got := rl.When(b); got != 10*time.Millisecond {
		t.Errorf("b is delayed by a's failures: %s", got)
	}
	rl.Forget(a)
	if got := rl.When(a); got != 10*time.Millisecond {
		t.Errorf("after Forget: %s", got)
	}

	// A bucket of 2 at 1 qps: the third immediate request waits about a second.
	slow := New(policy.RateLimit{BaseDelay: time.Nanosecond, QPS: 1, Burst: 2})
	c := func(n string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Name: n}}
	}
	slow.When(c("1"))
	slow.When(c("2"))
	if got := slow.When(c("3")); got < 500*time.Millisecond {
		t.Errorf("bucket did not limit: third delay %s", got)
	}
}

func TestDefaultsAreControllerRuntimes(t *testing.T) {
	if o := (policy.RateLimit{}).WithDefaults(); o.BaseDelay != 5*time.Millisecond || o.MaxDelay != 1000*time.Second || o.QPS != 10 || o.Burst != 100 {
		t.Errorf("defaults %+v", o)
	}
}
