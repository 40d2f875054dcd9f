package reconciler

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ControllerOptions configure the controller that runs a Reconciler.
type ControllerOptions struct {
	// MaxConcurrentReconciles is the number of objects reconciled at once.
	// Defaults to the module's Limits.MaxInstances, so no worker waits for
	// an instance.
	MaxConcurrentReconciles int
	// RateLimiter paces retries of failed objects. Defaults to
	// controller-runtime's default: per-item exponential backoff from 5 ms
	// to 1000 s combined with a 10 qps / 100 burst token bucket.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]
	// Requeue, when set, is a channel whose objects are reconciled again
	// (RequeueAll sends to it). Defaults to nil: none.
	Requeue <-chan event.GenericEvent
}

// NewController returns an unmanaged controller named after the module that
// watches the module's kind, its owned kinds (a change to a child
// reconciles its controller) and opts.Requeue, and calls r. Informers of the
// kinds the module reads are started too, so that a guest's read never
// waits for a cold cache; their events reconcile nothing, except through
// the module's triggers (abi.Trigger), each of which adds a handler that
// maps a related object's event to the objects to reconcile. The caller runs it
// with Start and stops it by cancelling the context, which also removes its
// handlers from the manager's shared informers; several controllers of one
// name may exist one after another.
func (r *Reconciler) NewController(mgr ctrl.Manager, opts ControllerOptions) (crcontroller.Controller, error) {
	workers := opts.MaxConcurrentReconciles
	if workers == 0 {
		if v := r.opts.Slot.Current(); v != nil {
			workers = v.Module.Limits().MaxInstances
		}
		workers = max(workers, 1)
	}
	skip := true // a module's controller is replaced under the same name on reload
	c, err := crcontroller.NewUnmanaged(r.name, crcontroller.Options{
		Reconciler: r, MaxConcurrentReconciles: workers, RateLimiter: opts.RateLimiter, SkipNameValidation: &skip,
		// An unmanaged controller's default logger discards everything:
		// its own lines (a panic it recovers, a failed start) go to the
		// reconciler's logger.
		LogConstructor: func(req *reconcile.Request) logr.Logger {
			l := r.opts.Log.WithValues("controller", r.name)
			if req != nil {
				l = l.WithValues("object", klog.KRef(req.Namespace, req.Name))
			}
			return l
		},
		// controller-runtime's own queue, kept so that Activity can read its
		// length: the workqueue_depth metric is keyed by name, and a
		// replaced controller of the same name would blur it.
		NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			if rl == nil {
				rl = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
			}
			q := workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name})
			r.queue.Store(&q)
			return q
		},
	})
	if err != nil {
		return nil, fmt.Errorf("module[%s]: creating controller for %s: %w", r.name, r.gvk, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if c := mgr.GetCache(); c != nil {
		r.cache.Store(&c)
	}
	// Informer sources, not source.Kind: a stopped controller's handlers
	// must leave the shared informers (see informerSource).
	var own handler.EventHandler = &handler.EnqueueRequestForObject{}
	if r.opts.Admits != nil {
		own = admitting{EventHandler: own, admits: r.opts.Admits, place: placeSelf}
	}
	watches := []source.Source{&informerSource{cache: mgr.GetCache(), obj: obj, handler: own}}
	if opts.Requeue != nil {
		watches = append(watches, source.Channel(opts.Requeue, own))
	}
	for _, gvk := range r.owns {
		if err := IndexChildren(context.Background(), mgr.GetCache(), gvk); err != nil {
			return nil, fmt.Errorf("module[%s]: %w", r.name, err)
		}
		child := &unstructured.Unstructured{}
		child.SetGroupVersionKind(gvk)
		owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), obj, handler.OnlyControllerOwner())
		if r.opts.Admits != nil {
			owner = admitting{EventHandler: owner, admits: r.opts.Admits, place: r.placeOwner}
		}
		watches = append(watches, &informerSource{cache: mgr.GetCache(), obj: child, handler: owner})
	}
	for _, g := range r.manifest.Reads {
		read := &unstructured.Unstructured{}
		read.SetGroupVersionKind(gvkOf(g))
		watches = append(watches, &informerSource{cache: mgr.GetCache(), obj: read, handler: handler.Funcs{}})
	}
	for i, t := range r.manifest.Triggers {
		tr := r.newTrigger(mgr.GetCache(), i, t)
		if err := tr.index(context.Background()); err != nil {
			return nil, fmt.Errorf("module[%s]: triggers[%d]: %w", r.name, i, err)
		}
		related := &unstructured.Unstructured{}
		related.SetGroupVersionKind(gvkOf(t.Kind))
		watches = append(watches, &informerSource{cache: mgr.GetCache(), obj: related, handler: tr.handler()})
	}
	for _, w := range watches {
		if err := c.Watch(w); err != nil {
			return nil, fmt.Errorf("module[%s]: watching for %s: %w", r.name, r.gvk, err)
		}
	}
	return c, nil
}

// RequeueAll sends every object of the module's kind in the cache to
// requeue, for example after a new version of the module is swapped in. It
// returns once they are handed over, or when ctx is done.
//
// It sends the objects of the kind's informer store as they are, when it
// can reach the store: the objects are the cache's own (packed), which
// the controller's handlers only read the key and placement of. Listing
// through the client would decode every object into a new map: for
// 30,000 Widgets, seconds of CPU and hundreds of MB of garbage per
// requeue, which sharding does on each acquisition of slots and a reload
// on each new version.
func (r *Reconciler) RequeueAll(ctx context.Context, requeue chan<- event.GenericEvent) error {
	return r.RequeueWhere(ctx, requeue, nil)
}

// RequeueWhere is RequeueAll for the objects whose namespace and uid keep
// accepts (nil: every object); with sharding, those of the slots a
// replica just acquired, whose other objects are queued already.
func (r *Reconciler) RequeueWhere(ctx context.Context, requeue chan<- event.GenericEvent, keep func(namespace string, uid types.UID) bool) error {
	err := r.eachObject(ctx, func(obj client.Object) error {
		if keep != nil && !keep(obj.GetNamespace(), obj.GetUID()) {
			return nil
		}
		select {
		case requeue <- event.GenericEvent{Object: obj}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("module[%s]: listing %s to requeue: %w", r.name, r.gvk.Kind, err)
	}
	return err
}

// EachStored calls fn with the namespace and uid of every object of the
// module's kind in the cache (this replica's share, with server-side
// sharding), and reports whether it could list them: false when the
// informer has not synced by ctx's end. It reads the informer's store
// without a copy when it can reach it, and lists through the client
// (decoding a copy of each object) when it cannot (a cache over several
// namespaces).
func (r *Reconciler) EachStored(ctx context.Context, fn func(namespace string, uid types.UID)) bool {
	return r.eachObject(ctx, func(obj client.Object) error {
		fn(obj.GetNamespace(), obj.GetUID())
		return nil
	}) == nil
}

// eachObject calls fn with every object of the module's kind in the
// cache until fn fails: the informer store's own objects when it can
// reach the store (stored), else a list through the client. It returns
// fn's error or the list's.
func (r *Reconciler) eachObject(ctx context.Context, fn func(client.Object) error) error {
	if objs, ok := r.stored(ctx); ok {
		for _, o := range objs {
			if obj, ok := o.(client.Object); ok {
				if err := fn(obj); err != nil {
					return err
				}
			}
		}
		return nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.opts.Client.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		if err := fn(&list.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// admitting queues only the events whose object place places where admits
// accepts (Options.Admits); deletes always pass. An update passes when
// either its old or its new object is admitted, as the handler it wraps
// may queue for either.
type admitting struct {
	handler.EventHandler
	admits func(namespace string, uid types.UID) bool
	place  func(client.Object) (namespace string, uid types.UID, ok bool)
}

// placeSelf places an object of the reconciled kind by itself.
func placeSelf(o client.Object) (string, types.UID, bool) {
	return o.GetNamespace(), o.GetUID(), true
}

// placeOwner places an owned child by its controller owner of the
// reconciled kind, as EnqueueRequestForOwner with OnlyControllerOwner
// finds it (group and kind, any version), and as Shard places the
// owner's reconcile: in the child's namespace, or in none for a
// cluster-scoped kind, with the uid of the owner reference. A child
// with no such owner is not placed: that handler queues nothing for it.
func (r *Reconciler) placeOwner(o client.Object) (string, types.UID, bool) {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != r.gvk.Kind {
		return "", "", false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != r.gvk.Group {
		return "", "", false
	}
	ns := ""
	if namespaced(r.opts.Scopes, r.gvk.GroupKind()) {
		ns = o.GetNamespace()
	}
	return ns, ref.UID, true
}

func (a admitting) admitted(o client.Object) bool {
	if o == nil {
		return false
	}
	ns, uid, ok := a.place(o)
	return ok && a.admits(ns, uid)
}

func (a admitting) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if a.admitted(e.Object) {
		a.EventHandler.Create(ctx, e, q)
	}
}

func (a admitting) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if a.admitted(e.ObjectNew) || a.admitted(e.ObjectOld) {
		a.EventHandler.Update(ctx, e, q)
	}
}

func (a admitting) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if a.admitted(e.Object) {
		a.EventHandler.Generic(ctx, e, q)
	}
}

// stored returns the objects of the kind's informer store, without a
// copy, or ok false when the cache's informer does not expose its store
// (a cache over several namespaces, or another implementation).
func (r *Reconciler) stored(ctx context.Context) (objs []any, ok bool) {
	c := r.cache.Load()
	if c == nil {
		return nil, false
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	inf, err := (*c).GetInformer(ctx, obj) // until synced, as the client's List waits
	if err != nil {
		return nil, false
	}
	s, ok := inf.(interface{ GetStore() toolscache.Store })
	if !ok {
		return nil, false
	}
	return s.GetStore().List(), true
}
