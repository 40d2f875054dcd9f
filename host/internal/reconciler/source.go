package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

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

	cancel context.CancelFunc // ends Start's goroutine and removes the handler
	synced chan error         // Start's outcome: nil once the handler has synced
	done   chan struct{}      // closed when Start's goroutine has returned, after err is set
	err    error              // Start's outcome, once done is closed
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
	ctx, s.cancel = context.WithCancel(ctx)
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
	var informer cache.Informer
	var lastErr error
	// As source.Kind: a kind whose CRD is not installed yet is retried.
	if err := wait.PollUntilContextCancel(ctx, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		informer, lastErr = s.cache.GetInformer(ctx, s.obj)
		if lastErr != nil {
			if ctx.Err() != nil {
				return false, ctx.Err() // stopped meanwhile
			}
			logger.Error(lastErr, "getting the informer; retrying")
			return false, nil
		}
		return true, nil
	}); err != nil {
		if lastErr != nil {
			return fmt.Errorf("getting the informer for %s: %w", s, lastErr)
		}
		return err
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
	if !s.cache.WaitForCacheSync(ctx) {
		return errors.New("cache did not sync")
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return errors.New("handler did not sync")
	}
	return nil
}

// WaitForSync waits until the handler has received the kind's initial
// list. If ctx ends first, the source gives up and removes its handler.
func (s *informerSource) WaitForSync(ctx context.Context) error {
	select {
	case err := <-s.synced:
		if err != nil && errors.Is(ctx.Err(), context.Canceled) {
			return nil // the source gave up because the controller stopped
		}
		return err
	case <-ctx.Done():
		s.cancel()
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return fmt.Errorf("timed out waiting for %s to sync", s)
	}
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
