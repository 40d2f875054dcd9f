package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

// drainTiming paces a drain: a pass is bounded by pass; failed passes are
// retried with exponential backoff from backoff to maxBackoff; a pass that
// released objects is confirmed by another after confirm, so that a
// finalizer the informer cache had not seen yet is not missed. A replica
// that does not lead checks again every confirm.
type drainTiming struct {
	pass, backoff, maxBackoff, confirm time.Duration
}

var defaultDrainTiming = drainTiming{pass: time.Minute, backoff: 500 * time.Millisecond, maxBackoff: 30 * time.Second, confirm: time.Second}

// finalizerHolder is what a drain needs of the reconciler of a module that
// left: its finalizer, its kind, and one pass that removes the finalizer
// from every object of the kind (reconciler.Reconciler.DrainFinalizer).
type finalizerHolder interface {
	Finalizer() string
	Kind() schema.GroupVersionKind
	DrainFinalizer(ctx context.Context) (released, remaining int, err error)
}

// drainer removes the finalizers of modules that left (removed, or replaced
// by a version that does not declare the finalizer for the same kind) from
// the objects of their kinds, in the background, so that no deletion waits
// for a module that is gone. Only the leader writes; a drain in another
// replica waits until it leads. It has a lock of its own, and calls nothing
// of the supervisor's but leading and the release each drain is given.
type drainer struct {
	log        logr.Logger
	leading    func() bool     // whether this replica writes
	closing    context.Context // ends every drain
	goroutines *sync.WaitGroup // counts each drain's goroutine
	timing     drainTiming

	mu     sync.Mutex
	drains map[string][]*drain // by module name, oldest first
}

// drain is one finalizer being removed.
type drain struct {
	finalizer string
	kind      schema.GroupVersionKind
	remaining atomic.Int64 // objects still holding the finalizer after the last pass; -1 before the first
	released  atomic.Int64 // objects released so far
	cancel    context.CancelFunc
	done      chan struct{}
}

// DrainStatus is a module's finalizer being drained: removed from every
// object of its kind after the module was removed, or replaced by a
// version that declares no finalizer (or reconciles another kind).
type DrainStatus struct {
	Finalizer string
	Kind      schema.GroupVersionKind
	// Remaining is how many objects still held the finalizer after the
	// last pass (those whose patch failed, retried with backoff); -1
	// before the first pass ends.
	Remaining int
	// Released is how many objects the drain has released so far.
	Released int
	// Done is closed when the drain ends: every object released, or the
	// supervisor closed.
	Done <-chan struct{}
}

// Draining reports the pending drain of module name's finalizer, if any
// (the latest, when the module left several).
func (s *Supervisor) Draining(name string) (DrainStatus, bool) { return s.drainer.status(name) }

// status reports the latest pending drain of module name.
func (dr *drainer) status(name string) (DrainStatus, bool) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	ds := dr.drains[name]
	if len(ds) == 0 {
		return DrainStatus{}, false
	}
	d := ds[len(ds)-1]
	return DrainStatus{Finalizer: d.finalizer, Kind: d.kind, Remaining: int(d.remaining.Load()), Released: int(d.released.Load()), Done: d.done}, true
}

// after drains the finalizer of old, a module's reconciler whose controller
// stops (stopped is closed when it has; nil when it did not run), and then
// calls release on the drain's goroutine, which ends old's use of its
// kinds' informers: they are kept meanwhile, so that the informer cache the
// drain lists from stays. A drain of the same name and kind still pending
// is superseded. For a module without a finalizer it does nothing, does not
// call release, and returns false.
func (dr *drainer) after(name string, old finalizerHolder, stopped <-chan struct{}, release func()) (draining bool) {
	if old.Finalizer() == "" {
		return false
	}
	dr.cancel(name, old.Kind())
	ctx, cancel := context.WithCancel(dr.closing)
	d := &drain{finalizer: old.Finalizer(), kind: old.Kind(), cancel: cancel, done: make(chan struct{})}
	d.remaining.Store(-1)
	dr.mu.Lock()
	if dr.drains == nil {
		dr.drains = map[string][]*drain{}
	}
	dr.drains[name] = append(dr.drains[name], d)
	dr.mu.Unlock()
	dr.goroutines.Add(1)
	go func() {
		defer dr.goroutines.Done()
		defer close(d.done)
		defer cancel()
		dr.run(ctx, name, old, d, stopped)
		dr.mu.Lock()
		ds := dr.drains[name]
		for i, x := range ds {
			if x == d {
				ds = append(ds[:i:i], ds[i+1:]...)
				break
			}
		}
		if len(ds) == 0 {
			delete(dr.drains, name)
		} else {
			dr.drains[name] = ds
		}
		dr.mu.Unlock()
		release()
	}()
	return true
}

// cancel ends the pending drains of module name's finalizer on objects of
// kind: a version of the module that declares it again serves them.
func (dr *drainer) cancel(name string, kind schema.GroupVersionKind) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	for _, d := range dr.drains[name] {
		if d.kind == kind {
			d.cancel()
		}
	}
}

// cancelFor ends the pending drains a new version of module name makes
// moot: the version declares the same finalizer for the same kind.
func (dr *drainer) cancelFor(name string, m abi.Manifest) {
	if !m.Finalizer {
		return
	}
	dr.cancel(name, gvkOf(m.For))
}

func gvkOf(g abi.GroupVersionKind) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// leading reports whether the supervisor runs in the elected replica.
func (s *Supervisor) leading() bool {
	if s.opts.Leading != nil && !s.opts.Leading() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx != nil && s.ctx.Err() == nil
}

// run removes d's finalizer from every object of its kind with old's
// clients, in the leader, once old's controller has stopped: passes until
// one finds nothing left to release, failed passes retried with backoff,
// until done or ctx ends.
func (dr *drainer) run(ctx context.Context, name string, old finalizerHolder, d *drain, stopped <-chan struct{}) {
	t := dr.timing
	log := dr.log.WithValues("module", name, "finalizer", d.finalizer, "kind", d.kind.String())
	if stopped != nil {
		select {
		case <-stopped: // nothing adds the finalizer any more
		case <-ctx.Done():
			return
		}
	}
	log.Info("draining finalizer: removing it from every object of the module's kind")
	backoff := t.backoff
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		if !dr.leading() { // only the leader writes; a new leader drains
			if !wait(t.confirm) {
				return
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, t.pass)
		released, remaining, err := old.DrainFinalizer(pctx)
		cancel()
		if ctx.Err() != nil {
			log.Info("finalizer drain stopped before it ended", "released", d.released.Load(), "reason", context.Cause(ctx))
			return
		}
		d.released.Add(int64(released))
		d.remaining.Store(int64(remaining))
		switch {
		case err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)):
			// The kind is gone (its CRD deleted): no object holds anything.
			d.remaining.Store(0)
			log.Info("finalizer drained: the kind no longer exists", "released", d.released.Load())
			return
		case err != nil:
			log.Info("finalizer drain pass failed; retrying", "released", released, "remaining", remaining, "retryIn", backoff.String(), "error", err.Error())
			if !wait(backoff) {
				return
			}
			backoff = min(2*backoff, t.maxBackoff)
		case released > 0:
			log.Info("finalizer drain progress", "released", released, "remaining", remaining)
			if !wait(t.confirm) {
				return
			}
		default:
			log.Info("finalizer drained", "released", d.released.Load(), "remaining", 0)
			return
		}
	}
}
