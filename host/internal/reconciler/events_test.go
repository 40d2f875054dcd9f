package reconciler

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

func TestEventBudgetPerObject(t *testing.T) {
	l := newEventLimiter(policy.Events{ObjectQPS: 0.1, ObjectBurst: 10, ModuleQPS: 1000, ModuleBurst: 1000})
	a := types.NamespacedName{Namespace: "n", Name: "a"}
	b := types.NamespacedName{Namespace: "n", Name: "b"}
	t0 := time.Unix(1000, 0)
	for i := 0; i < 10; i++ {
		if r := l.allow(a, t0); r != "" {
			t.Fatalf("event %d of a burst of 10 dropped (%s)", i+1, r)
		}
	}
	if r := l.allow(a, t0); r != dropObject {
		t.Fatalf("11th event at once: %q, want dropped by the object's bucket", r)
	}
	if r := l.allow(b, t0); r != "" {
		t.Fatalf("another object is limited by a's bucket (%s)", r)
	}
	if r := l.allow(a, t0.Add(5*time.Second)); r != dropObject {
		t.Fatalf("half a refill later: %q, want dropped", r)
	}
	if r := l.allow(a, t0.Add(10*time.Second)); r != "" {
		t.Fatalf("one refill (10 s) later: dropped (%s)", r)
	}
	// Twelve responses of ten Events one second apart, as a guest with
	// requeueAfterSeconds: 1: the burst, then one per 10 s.
	c := types.NamespacedName{Namespace: "n", Name: "c"}
	recorded := 0
	for s := 0; s < 12; s++ {
		for e := 0; e < 10; e++ {
			if l.allow(c, t0.Add(time.Duration(s)*time.Second)) == "" {
				recorded++
			}
		}
	}
	if recorded != 11 {
		t.Fatalf("120 Events over 11 s: %d recorded, want 11 (a burst of 10, then one per 10 s)", recorded)
	}
}

func TestEventBudgetPerModule(t *testing.T) {
	l := newEventLimiter(policy.Events{ObjectQPS: 1, ObjectBurst: 2, ModuleQPS: 10, ModuleBurst: 5})
	t0 := time.Unix(1000, 0)
	obj := func(i int) types.NamespacedName { return types.NamespacedName{Namespace: "n", Name: fmt.Sprint(i)} }
	for i := 0; i < 5; i++ {
		if r := l.allow(obj(i), t0); r != "" {
			t.Fatalf("object %d: dropped (%s) within the module's burst", i, r)
		}
	}
	if r := l.allow(obj(5), t0); r != dropModule {
		t.Fatalf("6th object at once: %q, want dropped by the module's bucket", r)
	}
	if n := l.buckets(); n != 5 {
		t.Errorf("%d object buckets; an Event the module refused must not make one", n)
	}
	// An object over its own budget does not spend the module's tokens.
	t1 := t0.Add(time.Second) // the module's bucket is full again (10/s); object 0 has 1 token more
	for i := 0; i < 2; i++ {
		if r := l.allow(obj(0), t1); r != "" {
			t.Fatalf("object 0, event %d: dropped (%s)", i, r)
		}
	}
	for i := 0; i < 10; i++ {
		if r := l.allow(obj(0), t1); r != dropObject {
			t.Fatalf("object 0 over its budget: %q", r)
		}
	}
	for i := 1; i <= 3; i++ {
		if r := l.allow(obj(100+i), t1); r != "" {
			t.Fatalf("the module's bucket lost tokens to events its object refused: object %d dropped (%s)", 100+i, r)
		}
	}
	if r := (newEventLimiter(policy.Events{Disabled: true})).allow(obj(0), t0); r != "" {
		t.Errorf("a disabled budget dropped an Event")
	}
}

// TestEventBucketsAreBounded: objects come and go; the per-object buckets
// kept stay within the bound derived from the budget, and every bucket the
// LRU forgets is full, so forgetting it gives no object an early burst.
func TestEventBucketsAreBounded(t *testing.T) {
	b := policy.Events{ObjectQPS: 0.1, ObjectBurst: 10, ModuleQPS: 10, ModuleBurst: 100}
	l := newEventLimiter(b)
	bound := 100 + 10*100 + 1 // ModuleBurst + ModuleQPS x refill (100 s), + 1
	t0 := time.Unix(1000, 0)
	now := t0
	evicted, checking := 0, true
	if err := l.objects.SetEvictionFunc(func(key lru.Key, v any) { // also called by Remove
		if !checking {
			return
		}
		evicted++
		if tokens := v.(*rate.Limiter).TokensAt(now); tokens < float64(b.ObjectBurst) {
			t.Fatalf("%v forgotten with %.2f tokens, not a full bucket", key, tokens)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// 400 s of 30,000 objects, a new one every 10 ms (ten times the
	// module's rate), each asking for 1 to 7 Events, while three heavy
	// objects ask for 10 every 6 s.
	for i := 0; i < 40_000; i++ {
		now = t0.Add(time.Duration(i) * 10 * time.Millisecond)
		key := types.NamespacedName{Namespace: "n", Name: fmt.Sprint(i % 30_000)}
		if i%200 == 0 {
			key = types.NamespacedName{Namespace: "n", Name: fmt.Sprint("heavy-", i%3)}
		}
		n := 1 + i%7
		if i%200 == 0 {
			n = 10
		}
		for e := 0; e < n; e++ {
			l.allow(key, now)
		}
		if n := l.buckets(); n > bound {
			t.Fatalf("after %d objects: %d buckets, bound %d", i+1, n, bound)
		}
	}
	if evicted == 0 {
		t.Fatal("no bucket was forgotten; the test does not reach the bound")
	}
	t.Logf("%d buckets kept (bound %d), %d forgotten, all full", l.buckets(), bound, evicted)
	heavy := types.NamespacedName{Namespace: "n", Name: "heavy-0"}
	now = now.Add(time.Minute) // the module's bucket is full again
	if r := l.allow(heavy, now); r != "" {
		t.Fatalf("dropped (%s)", r)
	}
	checking = false
	l.forget(heavy)
	if _, ok := l.objects.Get(heavy); ok {
		t.Error("forget kept the bucket")
	}
}
