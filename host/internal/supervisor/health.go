package supervisor

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

// health is one module's load health, for warnings once per episode.
type health struct {
	since       time.Time // when the module's controller was (re)built
	syncWarned  bool
	staleWarned bool
}

// healthLoop checks every module's caches each HealthInterval until ctx is
// done.
func (s *Supervisor) healthLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.HealthInterval)
	defer t.Stop()
	for {
		s.checkHealth(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkHealth reports SyncFailed and CacheStale, once per episode: a
// Warning when the problem starts, nothing while it lasts, and a Normal
// event when it ends. The cache state is read outside s.mu.
func (s *Supervisor) checkHealth(ctx context.Context, now time.Time) {
	type check struct {
		name string
		gvk  schema.GroupVersionKind
	}
	s.mu.Lock()
	var checks []check
	for name, r := range s.modules {
		if !r.paused.Load() {
			f := r.rec.Manifest().For
			checks = append(checks, check{name, schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: f.Kind}})
		}
	}
	s.mu.Unlock()
	for _, c := range checks {
		synced, why := s.synced(ctx, c.gvk)
		var lastEvent time.Time
		if s.opts.LastEvent != nil {
			lastEvent = s.opts.LastEvent(c.gvk.GroupKind())
		}
		var events []HealthEvent
		s.mu.Lock()
		r := s.modules[c.name]
		if r == nil {
			s.mu.Unlock()
			continue
		}
		h := &r.health
		switch {
		case !synced && now.Sub(h.since) > s.opts.SyncTimeout && !h.syncWarned:
			h.syncWarned = true
			events = append(events, HealthEvent{Module: c.name, Warning: true, Reason: ReasonSyncFailed, Message: fmt.Sprintf(
				"the cache for %s has not synced %s after the module loaded: %s; check that the kind's CRD is installed, the operator's RBAC for it, and the API server's health",
				c.gvk.Kind, s.opts.SyncTimeout, why)})
		case synced && h.syncWarned:
			h.syncWarned = false
			events = append(events, HealthEvent{Module: c.name, Reason: ReasonSynced, Message: fmt.Sprintf("the cache for %s has synced", c.gvk.Kind)})
		}
		if !lastEvent.IsZero() { // no event yet: nothing to be stale against
			age := now.Sub(lastEvent)
			switch stale := age > s.opts.StaleAfter; {
			case stale && !h.staleWarned:
				h.staleWarned = true
				events = append(events, HealthEvent{Module: c.name, Warning: true, Reason: ReasonCacheStale, Message: fmt.Sprintf(
					"no watch event or list for %s in %s; watches may be failing (see wasmreconcile_informer_watch_restarts_total)", c.gvk.Kind, age.Round(time.Second))})
			case !stale && h.staleWarned:
				h.staleWarned = false
				events = append(events, HealthEvent{Module: c.name, Reason: ReasonFresh, Message: fmt.Sprintf("events for %s arrive again", c.gvk.Kind)})
			}
		}
		report := r.spec.OnHealth
		s.mu.Unlock()
		for _, e := range events {
			if report != nil {
				report(e)
				continue
			}
			if e.Warning {
				s.opts.Log.Info("WARNING: module load health: "+e.Message, "module", e.Module, "reason", e.Reason)
			} else {
				s.opts.Log.Info("module load health: "+e.Message, "module", e.Module, "reason", e.Reason)
			}
		}
	}
}

// synced reports whether the informer of gvk has synced, without waiting.
func (s *Supervisor) synced(ctx context.Context, gvk schema.GroupVersionKind) (bool, string) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	inf, err := s.opts.Manager.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return false, err.Error()
	}
	if !inf.HasSynced() {
		return false, "the informer has not synced"
	}
	return true, ""
}

// Status is what the supervisor knows of one module.
type Status struct {
	Loaded   Loaded
	Owner    string
	Paused   bool
	Stats    reconciler.StatsSnapshot
	Activity reconciler.Activity
}

// Status returns module name's status, and whether it runs.
func (s *Supervisor) Status(name string) (Status, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[name]
	if r == nil {
		return Status{}, false
	}
	return Status{Loaded: r.loaded, Owner: r.spec.Owner, Paused: r.paused.Load(), Stats: r.stats.Snapshot(),
		Activity: r.rec.Activity()}, true
}

// Names lists the modules that run, sorted.
func (s *Supervisor) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.modules))
	for n := range s.modules {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Metrics reports what the scrape-time metrics need of every module: the
// serving digest, its instance pool, its load health (from the last health
// check, in the leader) and its lifecycle states (now, in every replica):
//   - initialized: the cache of the module's kind has synced;
//   - converged: initialized, the workqueue is empty, no reconcile runs,
//     and no object's last reconcile failed;
//   - quiescent: converged, and nothing was written for QuiescentAfter.
func (s *Supervisor) Metrics(ctx context.Context) []metrics.Module {
	s.mu.Lock()
	type item struct {
		name string
		r    *running
		h    health
	}
	var items []item
	for n, r := range s.modules {
		items = append(items, item{n, r, r.health})
	}
	s.mu.Unlock()
	now := time.Now()
	out := make([]metrics.Module, 0, len(items))
	for _, it := range items {
		v := it.r.slot.Current()
		if v == nil {
			continue // removed meanwhile
		}
		f := it.r.rec.Manifest().For
		synced, _ := s.synced(ctx, schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: f.Kind})
		m := lifecycle(it.r.rec.Activity(), synced, now, s.opts.QuiescentAfter)
		m.Name, m.Digest, m.Pool = it.name, v.Module.Digest(), v.Module.PoolStats()
		m.SyncFailed, m.CacheStale = it.h.syncWarned, it.h.staleWarned
		out = append(out, m)
	}
	return out
}

// lifecycle computes a module's lifecycle states from its activity.
func lifecycle(a reconciler.Activity, synced bool, now time.Time, quiescentAfter time.Duration) metrics.Module {
	converged := synced && a.Queued == 0 && a.Active == 0 && a.Failing == 0
	return metrics.Module{
		Initialized: synced,
		Converged:   converged,
		Quiescent:   converged && (a.LastChange.IsZero() || now.Sub(a.LastChange) >= quiescentAfter),
	}
}
