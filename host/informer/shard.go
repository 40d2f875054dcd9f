package informer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/pager"

	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

// Sharding makes the informers of some kinds list and watch only a share
// of their objects: the API server's shardSelector (ListOptions
// .ShardSelector, KEP-5866, feature gate ShardedListAndWatch). Sharded
// decides, once per informer when it is built, whether its kind is
// sharded; the selector is set and changed by Informers.Shard.
//
// A sharded informer lists with the selector current when its list
// starts, and watches with that same selector. When the selector changes,
// its open watch lists the new share itself and hands the reflector the
// difference as watch events: ADDED or MODIFIED for each object listed
// that the informer does not hold at the listed resourceVersion (one it
// holds unchanged sends nothing, so its handlers see no update and queue
// nothing), DELETED for each object it held that the list lacks (a stub
// with the object's namespace and name), and a BOOKMARK at the list's
// resourceVersion; then it watches on from there with the new selector
// (restart reason "resharded"). The reflector never restarts, so a move
// costs no reflector backoff. If that list or watch fails, the watch ends
// as expired and the reflector lists again itself. A watch about to be
// opened for a list made with an older selector is refused as expired, so
// a watch never carries a selector its list did not use.
type Sharding struct {
	// Sharded reports whether gk's informers list and watch with the
	// selector. Call it for kinds the API server serves; an error leaves
	// the kind unsharded (cached whole), which is always correct.
	Sharded func(gk schema.GroupKind) (bool, error)
}

// errResharded ends a watch whose selector is no longer the current one.
var errResharded = errors.New("the shard selection changed")

// reshardedError is what the reflector receives for a watch of an old
// selection: an expired error, on which it lists again.
func reshardedError() error {
	return apierrors.NewResourceExpired(errResharded.Error() + "; listing again with the new selector")
}

// SetSharding turns sharding on for informers built from now on; with it,
// every such informer of a sharded kind lists nothing until the first call
// to Shard. Call it once, before the cache starts.
func (i *Informers) SetSharding(s Sharding) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.sharding = &s
	if i.selection.gen == 0 {
		i.selection = selection{selector: NothingSelector, changed: make(chan struct{})}
	}
}

// Shard sets the selector of sharded kinds and returns its generation, for
// Resharded. An empty selector means every object; nothing (a replica
// that owns no share) means none: the informers then list with a selector
// that matches no namespaced object (the empty namespace's hash) and so
// cache nothing. Setting the current selection again changes nothing and
// returns the current generation.
func (i *Informers) Shard(selector string, nothing bool) uint64 {
	if nothing {
		selector = NothingSelector
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sharding == nil {
		panic("informer: Shard before SetSharding")
	}
	if i.selection.selector == selector {
		return i.selection.gen
	}
	close(i.selection.changed)
	i.selection = selection{selector: selector, gen: i.selection.gen + 1, changed: make(chan struct{})}
	i.notifyLocked()
	return i.selection.gen
}

// NothingSelector matches no namespaced object: a one-point range of the
// empty namespace's hash (FNV-1a of "" is the FNV offset basis), the
// namespace only cluster-scoped objects have.
const NothingSelector = "shardRange(object.metadata.namespace, '0xcbf29ce484222325', '0xcbf29ce484222326')"

// Resharded returns once every running informer of a sharded kind has
// listed with the selection of generation gen, or a later one, and opened
// its watch: the reflector opens the watch only after it put the list in
// the informer's queue, so the cache holds the share within moments.
// Informers not started yet list with the current selection when they
// start; stopped ones are not waited for. It returns ctx's error if ctx
// ends first, naming the kinds still listing.
func (i *Informers) Resharded(ctx context.Context, gen uint64) error {
	for {
		// Take the wake-up channel before looking, so that a watch opened
		// meanwhile wakes this loop.
		i.mu.Lock()
		wake := i.notify
		lws := make([]*listWatcher, 0, len(i.lws))
		for w := range i.lws {
			lws = append(lws, w)
		}
		i.mu.Unlock()
		var waiting []string
		for _, w := range lws {
			w.mu.Lock()
			started := w.runCtx != nil
			stopped := started && w.runCtx.Err() != nil
			watched := w.watchedGen
			w.mu.Unlock()
			switch {
			case stopped:
				i.mu.Lock()
				delete(i.lws, w) // its informer was stopped: forget it
				i.mu.Unlock()
			case started && w.isSharded() && watched < gen:
				// (isSharded was decided at its first list: no lookup here.)
				waiting = append(waiting, w.kind)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("informers of %v have not listed with shard selection %d yet: %w", waiting, gen, ctx.Err())
		case <-wake:
		}
	}
}

// notifyLocked wakes Resharded's waiters; i.mu is held.
func (i *Informers) notifyLocked() {
	close(i.notify)
	i.notify = make(chan struct{})
}

// selection is the current shard selector and its generation.
type selection struct {
	selector string
	gen      uint64
	changed  chan struct{} // closed when the selection is replaced
}

// currentSelection returns the selection for a list, or ok false when
// sharding is off.
func (i *Informers) currentSelection() (selection, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sharding == nil {
		return selection{}, false
	}
	return i.selection, true
}

// isSharded decides once whether w's kind is sharded, by the Sharding
// its informer was built under (the decision may ask the API server's
// discovery, so no lock is held around it).
func (w *listWatcher) isSharded() bool {
	w.shardOnce.Do(func() {
		s := w.sharding
		if s == nil || s.Sharded == nil {
			return
		}
		if ok, err := s.Sharded(w.gk); err == nil {
			w.sharded = ok
		}
	})
	return w.sharded
}

// selectForList sets opts.ShardSelector for a list of w's sharded kind and
// records the selection the list used; it reports whether the selection
// differs from the previous list's.
func (w *listWatcher) selectForList(ctx context.Context, opts *metav1.ListOptions) (changed bool) {
	w.mu.Lock()
	w.runCtx = ctx
	w.mu.Unlock()
	if !w.isSharded() {
		return false
	}
	sel, _ := w.informers.currentSelection()
	opts.ShardSelector = sel.selector
	w.mu.Lock()
	changed = w.listed.gen != sel.gen
	w.listed = sel
	w.mu.Unlock()
	return changed
}

// selectForWatch sets opts.ShardSelector for a watch to the selector of
// the list it follows. It returns the channel closed when that selection
// is replaced, or an expired error if it already was.
func (w *listWatcher) selectForWatch(ctx context.Context, opts *metav1.ListOptions) (<-chan struct{}, error) {
	w.mu.Lock()
	w.runCtx = ctx
	w.mu.Unlock()
	if !w.isSharded() {
		return nil, nil
	}
	cur, _ := w.informers.currentSelection()
	w.mu.Lock()
	listed := w.listed
	w.mu.Unlock()
	if listed.gen != cur.gen {
		return nil, reshardedError()
	}
	opts.ShardSelector = listed.selector
	return listed.changed, nil
}

// watchOpened records that w watches with the selection of generation gen
// (its list is in the informer's queue).
func (w *listWatcher) watchOpened() {
	if !w.isSharded() {
		return
	}
	w.mu.Lock()
	w.watchedGen = w.listed.gen
	w.mu.Unlock()
	i := w.informers
	i.mu.Lock()
	i.notifyLocked()
	i.mu.Unlock()
}

// errStopped: the watch was stopped while it resharded.
var errStopped = errors.New("watch stopped")

// reshard stops c's inner watch, lists w's share under the current
// selection and sends the reflector the difference from what the informer
// holds (see Sharding), then opens the next watch at the list's
// resourceVersion. It returns that watch and the channel closed when the
// selection changes again.
func (c *countingWatch) reshard(ctx context.Context, w *listWatcher, opts metav1.ListOptions) (watch.Interface, <-chan struct{}, error) {
	c.mu.Lock()
	c.inner.Stop()
	c.mu.Unlock()
	sel, _ := w.informers.currentSelection()
	lo := metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, ShardSelector: sel.selector}
	w.mu.Lock()
	held := w.keys
	w.mu.Unlock()
	send := func(ev watch.Event) error {
		select {
		case c.out <- ev:
			return nil
		case <-c.stop:
			return errStopped
		}
	}
	// Page by page: the objects held unchanged are dropped with their
	// page, so the share is never decoded whole at once (a replica
	// holding 10,000 objects kept ~20 MiB more resident after each
	// reshard when it was).
	now := map[string]string{}
	var rvMu sync.Mutex
	var rv string // of the list: its first page's (the pager may start over)
	p := pager.New(func(ctx context.Context, po metav1.ListOptions) (runtime.Object, error) {
		list, err := w.page(ctx, po)
		if err == nil && po.Continue == "" {
			v, err := listResourceVersion(list)
			if err != nil {
				return nil, err
			}
			rvMu.Lock()
			rv = v
			rvMu.Unlock()
		}
		return list, err
	})
	// No list in full when a continue token expires: the events of the
	// pages sent would mix with those of a second list. The reshard
	// fails instead, and the reflector lists again itself.
	p.PageSize, p.PageBufferSize, p.FullListIfExpired = w.opts.PageSize, 0, false
	start := time.Now()
	err := p.EachListItemWithAlloc(ctx, lo, func(obj runtime.Object) error {
		k, v, err := objectKey(obj)
		if err != nil {
			return err
		}
		now[k] = v
		typ := watch.Added
		if had, ok := held[k]; ok {
			if had == v {
				return nil // held unchanged
			}
			typ = watch.Modified
		}
		return send(watch.Event{Type: typ, Object: obj})
	})
	w.m.ListDuration.WithLabelValues(w.kind).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, nil, err
	}
	rvMu.Lock()
	defer rvMu.Unlock()
	for k := range held {
		if _, ok := now[k]; !ok {
			ns, name, _ := strings.Cut(k, "/")
			if err := send(watch.Event{Type: watch.Deleted, Object: w.stub(ns, name, rv)}); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := send(watch.Event{Type: watch.Bookmark, Object: w.stub("", "", rv)}); err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	w.keys = now
	prev := w.lastCount
	w.lastCount = len(now)
	w.listed = sel
	w.mu.Unlock()
	w.m.Objects.WithLabelValues(w.kind).Add(float64(len(now) - prev))
	w.m.WatchRestarts.WithLabelValues(w.kind, "resharded").Inc()
	w.informers.sawEvent(w.gk, w.kind)
	next := opts
	next.ResourceVersion, next.ResourceVersionMatch, next.ShardSelector = rv, "", sel.selector
	next.AllowWatchBookmarks = true
	inner, err := w.watch(ctx, next)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.inner = inner
	c.mu.Unlock()
	select {
	case <-c.stop:
		inner.Stop()
		return nil, nil, errStopped
	default:
	}
	w.watchOpened()
	return inner, sel.changed, nil
}

// track keeps, for a sharded kind, the keys of the objects the informer
// holds, from a watch event.
func (w *listWatcher) track(ev watch.Event) {
	if !w.isSharded() || (ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted) {
		return
	}
	k, v, err := objectKey(ev.Object)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[string]string{}
	}
	if ev.Type == watch.Deleted {
		delete(w.keys, k)
	} else {
		w.keys[k] = v
	}
}

// stub is an object of w's kind with only a namespace, a name and a
// resourceVersion: a DELETED event's object, or a BOOKMARK's.
func (w *listWatcher) stub(namespace, name, rv string) runtime.Object {
	if !w.packed.Empty() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(w.packed)
		u.SetNamespace(namespace)
		u.SetName(name)
		u.SetResourceVersion(rv)
		if o, err := packed.Pack(u); err == nil {
			return o
		}
	}
	o := w.example.DeepCopyObject()
	if a, err := meta.Accessor(o); err == nil {
		a.SetNamespace(namespace)
		a.SetName(name)
		a.SetResourceVersion(rv)
	}
	return o
}

// listKeys are the keys of a list's objects, with their
// resourceVersions.
func listKeys(list runtime.Object) (map[string]string, error) {
	keys := map[string]string{}
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		k, v, err := objectKey(obj)
		keys[k] = v
		return err
	})
	return keys, err
}

// objectKey is "namespace/name", and the object's resourceVersion.
func objectKey(obj runtime.Object) (key, resourceVersion string, err error) {
	a, err := meta.Accessor(obj)
	if err != nil {
		return "", "", err
	}
	return a.GetNamespace() + "/" + a.GetName(), a.GetResourceVersion(), nil
}

// listResourceVersion is a list's resourceVersion.
func listResourceVersion(list runtime.Object) (string, error) {
	a, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return a.GetResourceVersion(), nil
}
