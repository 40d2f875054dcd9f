package reconciler

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fakeInformer records the handlers added to it, like a shared informer.
type fakeInformer struct {
	cache.Informer // nil: a source calls only the methods below

	mu       sync.Mutex
	handlers map[*fakeRegistration]toolscache.ResourceEventHandler
	added    int
	synced   bool
}

type fakeRegistration struct {
	toolscache.ResourceEventHandlerRegistration // nil: only HasSynced is called
	informer                                    *fakeInformer
}

func (r *fakeRegistration) HasSynced() bool {
	r.informer.mu.Lock()
	defer r.informer.mu.Unlock()
	return r.informer.synced
}

func (f *fakeInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reg := &fakeRegistration{informer: f}
	f.handlers[reg] = h
	f.added++
	return reg, nil
}

func (f *fakeInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.handlers, reg.(*fakeRegistration))
	return nil
}

// state returns the handlers registered now and how many were ever added.
func (f *fakeInformer) state() (registered []toolscache.ResourceEventHandler, added int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.handlers {
		registered = append(registered, h)
	}
	return registered, f.added
}

// fakeCache hands out its informer once ready is closed.
type fakeCache struct {
	cache.Cache // nil: a source calls only the methods below
	informer    *fakeInformer
	ready       chan struct{}
}

func (c *fakeCache) GetInformer(ctx context.Context, _ client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	select {
	case <-c.ready:
		return c.informer, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fakeCache) WaitForCacheSync(context.Context) bool { return true }

func newFakeCache(synced bool) *fakeCache {
	ready := make(chan struct{})
	close(ready)
	return &fakeCache{informer: &fakeInformer{handlers: map[*fakeRegistration]toolscache.ResourceEventHandler{}, synced: synced}, ready: ready}
}

func newSource(c *fakeCache) *informerSource {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
	obj.SetKind("Widget")
	return &informerSource{cache: c, obj: obj, handler: &handler.EnqueueRequestForObject{}}
}

// waitUntil polls cond: a positive barrier, not a timing assertion.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInformerSourceRemovesItsHandler starts and stops 100 controllers'
// sources on one informer: each adds a handler that enqueues the kind's
// events, and removes it when its controller's context ends, so that the
// informer never holds more than the running controller's.
func TestInformerSourceRemovesItsHandler(t *testing.T) {
	c := newFakeCache(true)
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		src := newSource(c)
		if err := src.Start(ctx, q); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitForSync(ctx); err != nil {
			t.Fatalf("controller %d: WaitForSync: %v", i, err)
		}
		registered, _ := c.informer.state()
		if len(registered) != 1 {
			t.Fatalf("controller %d: %d handlers on the informer while it runs, want 1", i, len(registered))
		}
		w := &unstructured.Unstructured{}
		w.SetNamespace("ns")
		w.SetName("w")
		registered[0].OnAdd(w, false)
		if q.Len() != 1 {
			t.Fatalf("controller %d: an added object was not enqueued", i)
		}
		cancel()
		waitUntil(t, "the stopped controller's handler to be removed", func() bool {
			registered, _ := c.informer.state()
			return len(registered) == 0
		})
		q.ShutDown()
	}
	if _, added := c.informer.state(); added != 100 {
		t.Errorf("%d handlers added, want 100", added)
	}
}

// TestInformerSourceStoppedBeforeItsInformer stops a controller while its
// source still waits for the informer: no handler is left behind.
func TestInformerSourceStoppedBeforeItsInformer(t *testing.T) {
	c := newFakeCache(true)
	c.ready = make(chan struct{}) // the informer never comes
	ctx, cancel := context.WithCancel(context.Background())
	src := newSource(c)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := src.WaitForSync(ctx); err != nil {
		t.Errorf("WaitForSync after the controller stopped: %v, want nil", err)
	}
	// WaitForSync may have taken the outcome from synced itself, so wait
	// for the goroutine through done.
	<-src.done
	if src.err == nil {
		t.Error("a source stopped before its informer reported success")
	}
	if registered, added := c.informer.state(); len(registered) != 0 || added != 0 {
		t.Errorf("%d handlers registered (%d added) by a source stopped before its informer, want none", len(registered), added)
	}
}

// TestInformerSourceGivesUpOnSyncTimeout lets a source's sync time out
// while its controller's context lives on: the source removes its handler
// itself.
func TestInformerSourceGivesUpOnSyncTimeout(t *testing.T) {
	c := newFakeCache(false) // the handler never syncs
	src := newSource(c)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := src.Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the handler to be added", func() bool { _, added := c.informer.state(); return added == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := src.WaitForSync(ctx); err == nil {
		t.Error("WaitForSync past its deadline returned nil")
	}
	waitUntil(t, "the unsynced handler to be removed", func() bool {
		registered, _ := c.informer.state()
		return len(registered) == 0
	})
}
