package reconciler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/sharding"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

// TestShardAdmitsOnlyItsSlots: with a sharding gate that runs slot 0 only,
// the object placed in slot 1 is dropped at once (its reconcile is seen
// refused, and it gets no status), while the object in slot 0 converges;
// once slot 1 is acquired and the objects requeued (as the coordinator
// does), it converges too.
func TestShardAdmitsOnlyItsSlots(t *testing.T) {
	t.Parallel()
	space, err := shard.NewSpace(2)
	if err != nil {
		t.Fatal(err)
	}
	gate := sharding.NewGate(space)
	gate.Acquire([]int{0})
	slotOf := map[string]int{"w-in": 0, "w-out": 1}
	var refused atomic.Int64
	requeue := make(chan event.GenericEvent)
	h := run(t, "./widget", runOptions{requeue: requeue, rec: reconciler.Options{
		Shard: func(key types.NamespacedName, _ types.UID) (func(), bool) {
			slot := slotOf[key.Name]
			if !gate.Enter(slot) {
				if key.Name == "w-out" {
					refused.Add(1)
				}
				return nil, false
			}
			return func() { gate.Exit(slot) }, true
		},
	}})
	h.create(widgetGVK, "w-out", map[string]any{"size": int64(1), "color": "red"})
	h.create(widgetGVK, "w-in", map[string]any{"size": int64(2), "color": "blue"})
	ready := func(name, summary string) func() error {
		return func() error {
			if got := statusString(h.get(widgetGVK, name), "summary"); got != summary {
				return fmt.Errorf("%s: summary %q", name, got)
			}
			return nil
		}
	}
	testenv.Eventually(t, time.Minute, "w-in to converge", ready("w-in", "2 x blue"))
	testenv.Eventually(t, time.Minute, "w-out's reconcile to be refused", func() error {
		if refused.Load() == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if u := h.get(widgetGVK, "w-out"); u.Object["status"] != nil || h.writes("w-out") != 0 {
		t.Fatalf("w-out, in a slot this replica does not run, got a status: %v (%d writes)", u.Object["status"], h.writes("w-out"))
	}
	gate.Acquire([]int{1})
	if err := h.rec.RequeueAll(context.Background(), requeue); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "w-out to converge once its slot is acquired", ready("w-out", "1 x red"))
}

// TestShardByUID: with ShardByUID, Shard is asked with the uid of the
// object in the cache. A hook that admits only the uids it was given
// keeps both Widgets without a status; once w-in's uid (as the API server
// gave it) is admitted and the objects requeued, w-in converges and
// w-out, whose uid was asked about too, still has no status.
func TestShardByUID(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	admit := map[types.UID]bool{}
	asked := map[string]types.UID{}
	requeue := make(chan event.GenericEvent)
	h := run(t, "./widget", runOptions{requeue: requeue, rec: reconciler.Options{
		ShardByUID: true,
		Shard: func(key types.NamespacedName, uid types.UID) (func(), bool) {
			mu.Lock()
			defer mu.Unlock()
			asked[key.Name] = uid
			return func() {}, admit[uid]
		},
	}})
	h.create(widgetGVK, "w-out", map[string]any{"size": int64(1), "color": "red"})
	h.create(widgetGVK, "w-in", map[string]any{"size": int64(2), "color": "blue"})
	uid := map[string]types.UID{}
	for _, name := range []string{"w-in", "w-out"} {
		uid[name] = h.get(widgetGVK, name).GetUID()
	}
	testenv.Eventually(t, time.Minute, "Shard to be asked about both Widgets with their uids", func() error {
		mu.Lock()
		defer mu.Unlock()
		for name, want := range uid {
			if got := asked[name]; got != want {
				return fmt.Errorf("%s: asked with uid %q, want %q", name, got, want)
			}
		}
		return nil
	})
	mu.Lock()
	admit[uid["w-in"]] = true
	mu.Unlock()
	if err := h.rec.RequeueAll(context.Background(), requeue); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "w-in to converge once its uid is admitted", func() error {
		if got := statusString(h.get(widgetGVK, "w-in"), "summary"); got != "2 x blue" {
			return fmt.Errorf("w-in: summary %q", got)
		}
		return nil
	})
	if u := h.get(widgetGVK, "w-out"); u.Object["status"] != nil || h.writes("w-out") != 0 {
		t.Fatalf("w-out, whose uid is not admitted, got a status: %v (%d writes)", u.Object["status"], h.writes("w-out"))
	}
}

// TestShardByUIDGoneIsNotReadAgain: a reconcile whose object the cache
// did not hold when it was placed (uid "", admitted without a slot) ends
// as gone, even when an object of that name is created meanwhile: the new
// object has a uid of its own, which places it, and here that uid is not
// admitted, so it must get no status. The hook creates the object while
// the reconcile is being placed and waits until the cache holds it; the
// reconcile's exit is the barrier.
func TestShardByUIDGoneIsNotReadAgain(t *testing.T) {
	t.Parallel()
	requeue := make(chan event.GenericEvent)
	done := make(chan error, 1)
	var h *harness
	var once sync.Once
	h = run(t, "./widget", runOptions{requeue: requeue, rec: reconciler.Options{
		ShardByUID: true,
		Shard: func(key types.NamespacedName, uid types.UID) (func(), bool) {
			if key.Name != "w-late" || uid != "" {
				return nil, false // every placed uid is another replica's
			}
			first := false
			once.Do(func() { first = true })
			if !first {
				return func() {}, true
			}
			// Created between its placement and the pipeline's read.
			err := h.k8s.Create(context.Background(), newObject(widgetGVK, h.ns, "w-late", map[string]any{"size": int64(3)}))
			for deadline := time.Now().Add(time.Minute); err == nil; {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(widgetGVK)
				if h.cached.Get(context.Background(), types.NamespacedName{Namespace: h.ns, Name: "w-late"}, u) == nil {
					break
				}
				if time.Now().After(deadline) {
					err = fmt.Errorf("the cache did not get w-late within a minute")
				}
				time.Sleep(10 * time.Millisecond) // polling the cache, not waiting for something not to happen
			}
			return func() { done <- err }, true
		},
	}})
	u := newObject(widgetGVK, h.ns, "w-late", nil)
	requeue <- event.GenericEvent{Object: u}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the reconcile of w-late did not end")
	}
	if got := h.get(widgetGVK, "w-late"); got.Object["status"] != nil || h.writes("w-late") != 0 {
		t.Fatalf("w-late, created after its reconcile was placed as gone, was reconciled: status %v, %d writes", got.Object["status"], h.writes("w-late"))
	}
}
