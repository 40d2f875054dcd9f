package supervisor

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// serve is the reload policy: it makes version serve module spec.Name and
// says how. A new module, one whose kinds changed, or one whose controller
// settings (config, concurrency, rate) changed gets a new controller:
// "restarted". Otherwise the version is swapped into the running slot:
// "swapped" for new bytes, "cached" for a version kept compiled, or
// "unchanged". A swap or a resume requeues every object. s.mu is held.
func (s *Supervisor) serve(r *running, spec Spec, version *versionslot.Version, reused bool) (string, error) {
	restart := r == nil || sameKinds(r.slot.Current().Module, version.Module) != nil || !controllerSettingsEqual(r.spec, spec)
	if restart {
		next := &running{stats: &reconciler.Stats{}, requeue: make(chan event.GenericEvent), health: health{since: time.Now()}}
		if r != nil {
			next.stats, next.versions = r.stats, r.versions
			next.health.syncWarned, next.health.staleWarned = r.health.syncWarned, r.health.staleWarned
			next.health.unserved = watchedOnly(r.health.unserved, version.Module.Manifest()) // the same episodes: not reported again
		}
		next.slot = versionslot.NewSlot(version)
		next.paused.Store(spec.Paused)
		ropts := reconciler.Options{
			Slot: next.slot, Client: s.opts.Client, APIReader: s.opts.Manager.GetAPIReader(),
			Recorder: s.opts.Manager.GetEventRecorder("wasmreconcile/" + spec.Name),
			Metrics:  s.opts.Metrics, Stats: next.stats,
			Scopes: protocol.Chain(protocol.MapperScopes(s.opts.Manager.GetRESTMapper()), protocol.Builtin),
			Config: spec.Config, Paused: next.paused.Load, Policy: spec.Policy, FlightRecorder: s.opts.FlightRecorder,
			Shard: s.opts.Shard, ShardByUID: s.opts.ShardByUID, Admits: s.opts.Admits, ReadLive: s.opts.ReadLive,
		}
		if s.statuses != nil {
			ropts.StatusApplier = s.statuses
		}
		if spec.ServiceAccount != "" {
			if err := s.impersonate(&ropts, next, spec, version.Module.Manifest().For); err != nil {
				return "", err
			}
		}
		rec, err := reconciler.New(ropts)
		if err != nil {
			if next.events != nil {
				next.events.Stop()
			}
			return "", err
		}
		next.rec, next.spec = rec, spec
		s.holdKinds(version.Module.Manifest())
		s.drainer.cancelFor(spec.Name, version.Module.Manifest())
		if r != nil {
			// The old controller stops; its running calls finish on the
			// versions they hold. Its slot is closed so that its workers
			// return at once.
			s.releaseIdentity(r)
			stopped := r.stopped
			s.stopController(r)
			r.slot.Close()
			s.rollout.end(r, restarted, version)
			// A finalizer the new version does not declare (for the same
			// kind) is drained from the old kind's objects once the old
			// controller has stopped; the old kinds are released then.
			if m := version.Module.Manifest(); m.Finalizer && r.rec.Kind() == gvkOf(m.For) {
				s.releaseKinds(r.rec.Manifest())
			} else {
				s.drainThenRelease(spec.Name, r.rec, stopped)
			}
		}
		s.modules[spec.Name] = next
		if s.ctx != nil {
			s.startController(next) // its initial list reconciles every object
		}
		return "restarted", nil
	}
	result := "swapped"
	if r.slot.Current() == version {
		result = "unchanged"
	} else {
		if _, err := r.slot.Swap(version); err != nil {
			return "", err
		}
		if reused {
			result = "cached"
		}
	}
	resumed := r.paused.Swap(spec.Paused) && !spec.Paused
	r.spec = spec
	if (resumed || result != "unchanged") && !spec.Paused {
		s.requeueAll(r)
	}
	return result, nil
}

// RequeueEvery requeues the objects keep accepts (by namespace and uid;
// nil: every object) of every running module controller into it, in the
// background: with Options.Shard, after this replica acquired slots, so
// that their objects are reconciled here.
func (s *Supervisor) RequeueEvery(keep func(namespace string, uid types.UID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.modules {
		s.requeueWhere(r, keep)
	}
}

// EachStored calls fn with the namespace and uid of every object of
// every running module controller's kind in the cache (Reconciler's
// EachStored), and reports whether it reached every one's store.
func (s *Supervisor) EachStored(ctx context.Context, fn func(namespace string, uid types.UID)) bool {
	s.mu.Lock()
	var recs []*reconciler.Reconciler
	for _, r := range s.modules {
		if r.cancel != nil {
			recs = append(recs, r.rec)
		}
	}
	s.mu.Unlock()
	all := true
	for _, rec := range recs {
		if !rec.EachStored(ctx, fn) {
			all = false
		}
	}
	return all
}

// requeueAll requeues every object of r into its running controller, in
// the background; nothing when the controller does not run (a standby: a
// new leader's controllers list every object anyway). s.mu is held.
func (s *Supervisor) requeueAll(r *running) { s.requeueWhere(r, nil) }

// requeueWhere is requeueAll for the objects keep accepts. s.mu is held.
func (s *Supervisor) requeueWhere(r *running, keep func(namespace string, uid types.UID) bool) {
	if r.cancel == nil {
		return
	}
	ctx, rec, ch, stopped := s.ctx, r.rec, r.requeue, r.stopped
	ctx, cancel := context.WithCancel(ctx)
	s.goroutines.Add(2)
	go func() { // the controller stopping ends the requeue
		defer s.goroutines.Done()
		select {
		case <-stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer s.goroutines.Done()
		defer cancel()
		if err := rec.RequeueWhere(ctx, ch, keep); err != nil && ctx.Err() == nil {
			s.opts.Log.Info("requeue after reload failed; objects are reconciled on their next event", "module", rec.Name(), "error", err.Error())
		}
	}()
}

// startController starts r's controller under s.ctx (lifecycle.go), with
// its informers reporting to r's health. s.mu is held.
func (s *Supervisor) startController(r *running) {
	report := s.informerReport(r)
	ctx := reconciler.WithInformerReport(s.ctx, report)
	since := time.Now() // the sync timeout runs from here: a standby's modules loaded long before it leads
	cancel, stopped := s.lifecycle.start(ctx, controllerRun{
		module: r.spec.Name,
		build: func() (starter, error) {
			c, err := r.rec.NewController(s.opts.Manager, reconciler.ControllerOptions{
				MaxConcurrentReconciles: r.spec.Policy.MaxConcurrentReconciles, RateLimiter: ratelimit.New(r.spec.Policy.RateLimit), Requeue: r.requeue,
			})
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		// A kind the controller indexes (an owned kind, the reconciled
		// kind of a field trigger) is not served: its CRD is not
		// installed. Report the module's unserved kinds as its sources
		// would; the controller is built again until they are served.
		unserved: func(err error, attempt int) { s.reportUnserved(r.rec.Manifest(), err, attempt, report) },
	})
	if cancel == nil {
		return
	}
	r.health.since = since
	r.cancel, r.stopped = cancel, stopped
}

// reportUnserved reports to report the kinds of m the API server does not
// serve, found with the RESTMapper, after building a controller of m
// failed with err, a "no match" error; err itself for the reconciled kind
// when the mapper finds none.
func (s *Supervisor) reportUnserved(m abi.Manifest, err error, attempt int, report func(reconciler.InformerState)) {
	found := false
	for _, g := range append(append([]abi.GroupVersionKind{m.For}, m.Owns...), m.Reads...) {
		gvk := gvkOf(g)
		if _, merr := s.opts.Manager.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(merr) {
			report(reconciler.InformerState{GVK: gvk, Err: merr, Attempt: attempt})
			found = true
		}
	}
	if !found {
		report(reconciler.InformerState{GVK: gvkOf(m.For), Err: err, Attempt: attempt})
	}
}

// stopController stops r's controller, if running. s.mu is held.
func (s *Supervisor) stopController(r *running) {
	if r.cancel != nil {
		r.cancel()
		r.cancel, r.stopped = nil, nil
	}
}

// sameKinds reports whether b can replace a in a running controller: the
// same name, kind, owned and read kinds, triggers and finalizer.
func sameKinds(a, b *engine.Module) error {
	ma, mb := a.Manifest(), b.Manifest()
	switch {
	case a.Name() != b.Name():
		return fmt.Errorf("module name changed from %s to %s", a.Name(), b.Name())
	case ma.For != mb.For:
		return fmt.Errorf("module[%s]: reconciled kind changed from %v to %v", a.Name(), ma.For, mb.For)
	case !reflect.DeepEqual(ma.Owns, mb.Owns) || !reflect.DeepEqual(ma.Reads, mb.Reads):
		return fmt.Errorf("module[%s]: owned or read kinds changed", a.Name())
	case !reflect.DeepEqual(ma.Triggers, mb.Triggers):
		return fmt.Errorf("module[%s]: triggers changed", a.Name())
	case ma.Finalizer != mb.Finalizer:
		return fmt.Errorf("module[%s]: finalizer declaration changed", a.Name())
	}
	return nil
}

// controllerSettingsEqual reports whether a and b need the same controller:
// the same config, identity and policy but for its Limits (the bytes and
// the limits may differ: they make another version, swapped in).
func controllerSettingsEqual(a, b Spec) bool {
	pa, pb := a.Policy, b.Policy
	pa.Limits, pb.Limits = engine.Limits{}, engine.Limits{}
	return reflect.DeepEqual(a.Config, b.Config) && a.ServiceAccount == b.ServiceAccount && reflect.DeepEqual(pa, pb)
}
