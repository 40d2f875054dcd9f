package reconciler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
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

func (r *fakeRegistration) HasSynced() bool { return r.informer.HasSynced() }

// HasSynced is the informer's: a source waits for its own informer (and
// then its handler), not for the whole cache.
func (f *fakeInformer) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
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

// fakeCache hands out its informer once ready is closed. While missing is
// true, it answers at once that the kind is not served.
type fakeCache struct {
	cache.Cache // nil: a source calls only the methods below
	informer    *fakeInformer
	ready       chan struct{}
	missing     atomic.Bool
	gets        atomic.Int64
}

func (c *fakeCache) GetInformer(ctx context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	c.gets.Add(1)
	if c.missing.Load() {
		gvk := obj.GetObjectKind().GroupVersionKind()
		return nil, &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
	}
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

// TestInformerSourceWaitsForItsKind: a source whose kind is not served (no
// CRD) retries past its controller's sync deadline instead of giving up,
// reports each failed attempt of the episode, numbered, with an error that
// says the kind is not served, and once it gets the informer reports the
// episode's end and syncs.
func TestInformerSourceWaitsForItsKind(t *testing.T) {
	c := newFakeCache(true)
	c.missing.Store(true)
	src := newSource(c)
	src.retry = time.Millisecond
	var mu sync.Mutex
	var states []InformerState
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(states) }
	ctx, cancel := context.WithCancel(WithInformerReport(context.Background(), func(st InformerState) {
		mu.Lock()
		states = append(states, st)
		mu.Unlock()
	}))
	defer cancel()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	syncCtx, cancelSync := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelSync()
	waited := make(chan error, 1)
	go func() { waited <- src.WaitForSync(syncCtx) }()
	<-syncCtx.Done()
	n := count()
	waitUntil(t, "two more attempts past the sync deadline", func() bool { return count() >= n+2 })
	select {
	case err := <-waited:
		t.Fatalf("WaitForSync returned %v while the kind is not served", err)
	default:
	}
	c.missing.Store(false)
	if err := <-waited; err != nil {
		t.Fatalf("WaitForSync once the kind is served: %v", err)
	}
	if registered, _ := c.informer.state(); len(registered) != 1 {
		t.Errorf("%d handlers registered, want 1", len(registered))
	}
	mu.Lock()
	defer mu.Unlock()
	last := states[len(states)-1]
	if last.Err != nil || last.Attempt != len(states) {
		t.Errorf("last report %+v: want the episode's end, attempt %d", last, len(states))
	}
	for i, st := range states[:len(states)-1] {
		if st.Attempt != i+1 || !meta.IsNoMatchError(st.Err) || st.GVK.Kind != "Widget" {
			t.Fatalf("report %d: %+v", i, st)
		}
	}
	msg := UnservedMessage(states[0].GVK, states[0].Err)
	for _, want := range []string{"kind Widget of examples.wasmreconcile.io/v1alpha1 is not served", "install its CRD"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

// TestInformerSourceLogsOncePerEpisode: with no report in its context, a
// source whose kind is not served logs one line when the episode begins,
// whatever the attempts, and one when it ends; a second episode (another
// controller's source) logs again.
func TestInformerSourceLogsOncePerEpisode(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, prefix+" "+args)
		mu.Unlock()
	}, funcr.Options{})
	c := newFakeCache(true)
	for episode := 1; episode <= 2; episode++ {
		c.missing.Store(true)
		src := newSource(c)
		src.retry = time.Millisecond
		ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		before := c.gets.Load()
		if err := src.Start(ctx, q); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "five attempts", func() bool { return c.gets.Load() >= before+5 })
		c.missing.Store(false)
		if err := src.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		q.ShutDown()
		mu.Lock()
		warnings, served := 0, 0
		for _, l := range lines {
			warnings += strings.Count(l, "WARNING: kind Widget of examples.wasmreconcile.io/v1alpha1 is not served by the API server: install its CRD")
			served += strings.Count(l, "is served now")
		}
		got := fmt.Sprintf("%d warnings, %d served lines", warnings, served)
		mu.Unlock()
		if want := fmt.Sprintf("%d warnings, %d served lines", episode, episode); got != want {
			t.Fatalf("after episode %d: %s, want %s: %q", episode, got, want, lines)
		}
	}
}
