package supervisor

import (
	"context"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

// Drain timing: a pass is bounded by drainPassTimeout; failed passes are
// retried with exponential backoff from drainBackoff to drainMaxBackoff; a
// pass that released objects is confirmed by another after drainConfirm,
// so that a finalizer the informer cache had not seen yet is not missed.
var (
	drainPassTimeout = time.Minute
	drainBackoff     = 500 * time.Millisecond
	drainMaxBackoff  = 30 * time.Second
	drainConfirm     = time.Second
)

// drain removes a removed (or replaced) module's finalizer from the
// objects of its kind, in the background.
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
func (s *Supervisor) Draining(name string) (DrainStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.drains[name]
	if len(ds) == 0 {
		return DrainStatus{}, false
	}
	d := ds[len(ds)-1]
	return DrainStatus{Finalizer: d.finalizer, Kind: d.kind, Remaining: int(d.remaining.Load()), Released: int(d.released.Load()), Done: d.done}, true
}

// drainAfter drains the finalizer of old, a module's reconciler whose
// controller stops (stopped is closed when it has; nil when it did not
// run), and then calls release (with s.mu held; nil: nothing to call),
// which ends old's use of its kinds' informers: they are kept meanwhile,
// so that the informer cache the drain lists from stays. A module without
// a finalizer calls release at once. A drain of the same name and kind
// still pending is superseded. s.mu is held.
func (s *Supervisor) drainAfter(name string, old *reconciler.Reconciler, stopped <-chan struct{}, release func()) {
	if release == nil {
		release = func() {}
	}
	if old.Finalizer() == "" {
		release()
		return
	}
	s.cancelDrains(name, old.Kind())
	ctx, cancel := context.WithCancel(s.closing)
	d := &drain{finalizer: old.Finalizer(), kind: old.Kind(), cancel: cancel, done: make(chan struct{})}
	d.remaining.Store(-1)
	if s.drains == nil {
		s.drains = map[string][]*drain{}
	}
	s.drains[name] = append(s.drains[name], d)
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		defer close(d.done)
		defer cancel()
		s.runDrain(ctx, name, old, d, stopped)
		s.mu.Lock()
		defer s.mu.Unlock()
		ds := s.drains[name]
		for i, x := range ds {
			if x == d {
				ds = append(ds[:i:i], ds[i+1:]...)
				break
			}
		}
		if len(ds) == 0 {
			delete(s.drains, name)
		} else {
			s.drains[name] = ds
		}
		if !s.closed {
			release()
		}
	}()
}

// cancelDrains ends the pending drains of module name's finalizer on
// objects of kind: a version of the module that declares it again serves
// them. s.mu is held.
func (s *Supervisor) cancelDrains(name string, kind schema.GroupVersionKind) {
	for _, d := range s.drains[name] {
		if d.kind == kind {
			d.cancel()
		}
	}
}

// cancelDrainsFor ends the pending drains a new version of module name
// makes moot: the version declares the same finalizer for the same kind.
// s.mu is held.
func (s *Supervisor) cancelDrainsFor(name string, m abi.Manifest) {
	if !m.Finalizer {
		return
	}
	s.cancelDrains(name, gvkOf(m.For))
}

func gvkOf(g abi.GroupVersionKind) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// leading reports whether the supervisor runs in the elected replica.
func (s *Supervisor) leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx != nil && s.ctx.Err() == nil
}

// runDrain removes d's finalizer from every object of its kind with old's
// clients, in the leader, once old's controller has stopped: passes until
// one finds nothing left to release, failed passes retried with backoff,
// until done or ctx ends.
func (s *Supervisor) runDrain(ctx context.Context, name string, old *reconciler.Reconciler, d *drain, stopped <-chan struct{}) {
	log := s.opts.Log.WithValues("module", name, "finalizer", d.finalizer, "kind", d.kind.String())
	if stopped != nil {
		select {
		case <-stopped: // nothing adds the finalizer any more
		case <-ctx.Done():
			return
		}
	}
	log.Info("draining finalizer: removing it from every object of the module's kind")
	backoff := drainBackoff
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
		if !s.leading() { // only the leader writes; a new leader drains
			if !wait(drainConfirm) {
				return
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, drainPassTimeout)
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
			backoff = min(2*backoff, drainMaxBackoff)
		case released > 0:
			log.Info("finalizer drain progress", "released", released, "remaining", remaining)
			if !wait(drainConfirm) {
				return
			}
		default:
			log.Info("finalizer drained", "released", d.released.Load(), "remaining", 0)
			return
		}
	}
}
