package informer

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Sharding makes the informers of some kinds list and watch only a share
// of their objects: the API server's shardSelector (ListOptions
// .ShardSelector, KEP-5866, feature gate ShardedListAndWatch). Sharded
// decides, once per informer when it is built, whether its kind is
// sharded; the selector is set and changed by Informers.Shard.
//
// A sharded informer lists with the selector current when its list
// starts, and watches with that same selector. When the selector changes,
// its open watch ends as expired (restart reason "resharded") and the
// reflector lists again with the new one: client-go's reflector replaces
// the cache's contents with that list, so objects that left the share are
// deleted from the cache and those that joined it are added. A watch about
// to be opened for a list made with an older selector is refused the same
// way, so a watch never carries a selector its list did not use.
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
		i.selection = selection{selector: NothingSelector, nothing: true, changed: make(chan struct{})}
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
	i.selection = selection{selector: selector, gen: i.selection.gen + 1, nothing: nothing, changed: make(chan struct{})}
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
		i.mu.Lock()
		var waiting []string
		for w := range i.lws {
			if !w.isSharded() {
				continue
			}
			w.mu.Lock()
			alive := w.runCtx != nil && w.runCtx.Err() == nil
			watched := w.watchedGen
			w.mu.Unlock()
			if alive && watched < gen {
				waiting = append(waiting, w.kind)
			}
		}
		wake := i.notify
		i.mu.Unlock()
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
	nothing  bool
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

// isSharded decides once whether w's kind is sharded.
func (w *listWatcher) isSharded() bool {
	w.shardOnce.Do(func() {
		i := w.informers
		i.mu.Lock()
		s := i.sharding
		i.mu.Unlock()
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
