package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// informerSource is a controller's source of one kind's events, read from
// the manager's shared informer of the kind. It is controller-runtime's
// source.Kind with one difference: when the controller's context ends, it
// removes its event handler from the informer. source.Kind never does, so
// every controller a module's reload stops would leave a handler (and its
// two goroutines) on the shared informer, receiving every event of the kind
// for the life of the process. See RATIONALE.md.
type informerSource struct {
	cache   cache.Cache
	obj     client.Object
	handler handler.EventHandler
	retry   time.Duration // between attempts to get the informer; 0: InformerRetry

	ctx    context.Context    // Start's goroutine's; ends when its controller stops or the source gives up
	cancel context.CancelFunc // ends Start's goroutine and removes the handler
	got    chan struct{}      // closed once the informer is had
	synced chan error         // Start's outcome: nil once the handler has synced
	done   chan struct{}      // closed when Start's goroutine has returned, after err is set
	err    error              // Start's outcome, once done is closed
}

// InformerRetry is how often a source tries again to get the informer of a
// kind the API server does not serve (its CRD is not installed yet).
const InformerRetry = 10 * time.Second

// InformerState is what a source reports of its kind's informer: Err is why
// the Attempt-th attempt of an episode to get it failed (an episode begins
// at the first failure; meta.IsNoMatchError(Err) when the kind is not
// served), or nil when the Attempt-th attempt got it (the first, or the one
// that ends an episode).
type InformerState struct {
	GVK     schema.GroupVersionKind
	Err     error
	Attempt int
}

type informerReportKey struct{}

// WithInformerReport returns a context whose controllers' sources (started
// with it) call report at each failed attempt to get their kind's informer,
// and once when they get it, instead of logging. report must not block.
func WithInformerReport(ctx context.Context, report func(InformerState)) context.Context {
	return context.WithValue(ctx, informerReportKey{}, report)
}

// UnservedMessage says why the informer of gvk cannot be had, and what to
// do: for a kind the API server does not serve, to install its CRD.
func UnservedMessage(gvk schema.GroupVersionKind, err error) string {
	if meta.IsNoMatchError(err) {
		return fmt.Sprintf("kind %s of %s is not served by the API server: install its CRD; the module starts once it is (retried every %s)",
			gvk.Kind, gvk.GroupVersion(), InformerRetry)
	}
	return fmt.Sprintf("cannot watch kind %s of %s: %v (retried every %s)", gvk.Kind, gvk.GroupVersion(), err, InformerRetry)
}

var _ source.SyncingSource = (*informerSource)(nil)

func (s *informerSource) String() string {
	return fmt.Sprintf("informer source: %s", s.obj.GetObjectKind().GroupVersionKind())
}

// Start gets the kind's informer (starting it if needed) and adds the
// handler, in the background, and removes the handler when ctx ends.
func (s *informerSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if s.cache == nil || s.obj == nil || s.handler == nil {
		return errors.New("informer source: cache, object and handler are required")
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	ctx = s.ctx
	s.got = make(chan struct{})
	s.synced = make(chan error, 1) // buffered: the goroutine never waits for WaitForSync
	s.done = make(chan struct{})
	go func() {
		err := s.run(ctx, queue)
		s.err = err
		s.synced <- err
		close(s.done)
	}()
	return nil
}

func (s *informerSource) run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	logger := log.FromContext(ctx).WithValues("source", s.String())
	report, _ := ctx.Value(informerReportKey{}).(func(InformerState))
	gvk := s.obj.GetObjectKind().GroupVersionKind()
	retry := s.retry
	if retry <= 0 {
		retry = InformerRetry
	}
	var informer cache.Informer
	var lastErr error
	attempt := 0 // failed attempts so far
	// As source.Kind: a kind whose CRD is not installed yet is retried, and
	// quietly: one report (or log line) when the episode begins, one when
	// it ends.
	if err := wait.PollUntilContextCancel(ctx, retry, true, func(ctx context.Context) (bool, error) {
		informer, lastErr = s.cache.GetInformer(ctx, s.obj)
		if lastErr != nil {
			if ctx.Err() != nil {
				return false, ctx.Err() // stopped meanwhile
			}
			attempt++
			switch {
			case report != nil:
				report(InformerState{GVK: gvk, Err: lastErr, Attempt: attempt})
			case attempt == 1:
				logger.Info("WARNING: " + UnservedMessage(gvk, lastErr))
			default:
				logger.V(1).Info("getting the informer failed again; retrying", "attempt", attempt, "error", lastErr.Error())
			}
			return false, nil
		}
		return true, nil
	}); err != nil {
		if lastErr != nil {
			return fmt.Errorf("getting the informer for %s: %w", s, lastErr)
		}
		return err
	}
	close(s.got)
	switch {
	case report != nil:
		report(InformerState{GVK: gvk, Attempt: attempt + 1})
	case attempt > 0:
		logger.Info(fmt.Sprintf("kind %s of %s is served now", gvk.Kind, gvk.GroupVersion()))
	}
	reg, err := informer.AddEventHandlerWithOptions(&eventHandler{ctx: ctx, queue: queue, handler: s.handler},
		toolscache.HandlerOptions{Logger: &logger})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() {
		if err := informer.RemoveEventHandler(reg); err != nil {
			logger.Error(err, "removing the event handler of a stopped controller")
		}
	})
	// This kind's informer only: waiting for the whole cache would make
	// every module wait for any other module's kind that cannot sync (a
	// kind the operator may not list).
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return errors.New("cache did not sync")
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return errors.New("handler did not sync")
	}
	return nil
}

// WaitForSync waits until the handler has received the kind's initial
// list. If ctx is cancelled first, the source gives up and removes its
// handler; so it does at ctx's deadline (the controller's
// CacheSyncTimeout), except while the kind is not served: waiting for a
// CRD to be installed is not a sync that takes too long, so the source
// keeps trying until its controller stops, and once it has the informer
// its sync gets the same time again.
func (s *informerSource) WaitForSync(ctx context.Context) error {
	begin := time.Now()
	select {
	case err := <-s.synced:
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			return nil // the source gave up because the controller stopped
		}
		return err
	case <-ctx.Done():
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		s.cancel()
		return nil
	}
	select {
	case <-s.got:
	default:
		timeout := time.Since(begin)
		if deadline, ok := ctx.Deadline(); ok {
			timeout = deadline.Sub(begin)
		}
		select {
		case <-s.got:
		case err := <-s.synced: // the source ended without its informer: its controller stopped
			if err != nil && s.ctx.Err() != nil {
				return nil
			}
			return err
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case err := <-s.synced:
			if err != nil && s.ctx.Err() != nil {
				return nil
			}
			return err
		case <-t.C:
		}
	}
	s.cancel()
	return fmt.Errorf("timed out waiting for %s to sync", s)
}

// eventHandler adapts a handler.EventHandler to the informer's handler, as
// controller-runtime's source.Kind does.
type eventHandler struct {
	ctx     context.Context
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	handler handler.EventHandler
}

func (e *eventHandler) OnAdd(obj any, isInInitialList bool) {
	if o, ok := obj.(client.Object); ok {
		e.handler.Create(e.ctx, event.CreateEvent{Object: o, IsInInitialList: isInInitialList}, e.queue)
	}
}

func (e *eventHandler) OnUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(client.Object)
	n, ok2 := newObj.(client.Object)
	if ok1 && ok2 {
		e.handler.Update(e.ctx, event.UpdateEvent{ObjectOld: o, ObjectNew: n}, e.queue)
	}
}

func (e *eventHandler) OnDelete(obj any) {
	d := event.DeleteEvent{}
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		d.DeleteStateUnknown, obj = true, tombstone.Obj
	}
	if o, ok := obj.(client.Object); ok {
		d.Object = o
		e.handler.Delete(e.ctx, d, e.queue)
	}
}
