package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
)

// health is one module's load health, for warnings once per episode.
type health struct {
	since       time.Time // when the module's controller last started
	syncWarned  bool
	staleWarned bool
	// unserved are the kinds whose informer the module's controller cannot
	// get (a CRD not installed): the module is not ready while any is.
	unserved map[schema.GroupVersionKind]*UnservedKind
}

// UnservedKind is a kind a module's controller watches whose informer it
// cannot get, usually because the kind's CRD is not installed. The
// controller keeps trying (reconciler.InformerRetry).
type UnservedKind struct {
	// Message says what is wrong and what to do.
	Message string
	// Attempts counts the failed attempts so far.
	Attempts int
}

// informerReport returns what the sources of r's controller report to. The
// first failed attempt of an episode to get a kind's informer is logged,
// once, and recorded as one SyncFailed Warning through OnHealth (on a
// ReconcileModule); while any kind is unserved the module is not ready
// (Ready); the attempts after the first are quiet. The episode ends when
// the source gets the informer; the Synced report follows once the
// module's kind has synced (checkHealth).
func (s *Supervisor) informerReport(r *running) func(reconciler.InformerState) {
	name := r.spec.Name
	return func(st reconciler.InformerState) {
		s.mu.Lock()
		if s.modules[name] != r {
			s.mu.Unlock()
			return // a stopped controller's source, late
		}
		h := &r.health
		var warning *HealthEvent
		switch u := h.unserved[st.GVK]; {
		case st.Err == nil:
			delete(h.unserved, st.GVK)
		case u == nil:
			if h.unserved == nil {
				h.unserved = map[schema.GroupVersionKind]*UnservedKind{}
			}
			h.unserved[st.GVK] = &UnservedKind{Message: reconciler.UnservedMessage(st.GVK, st.Err), Attempts: 1}
			h.syncWarned = true // the timed SyncFailed would only repeat it
			warning = &HealthEvent{Module: name, Warning: true, Reason: ReasonSyncFailed, Message: h.unserved[st.GVK].Message}
		default:
			u.Attempts++
		}
		report := r.spec.OnHealth
		s.mu.Unlock()
		if warning != nil {
			s.opts.Log.Info("WARNING: module load health: "+warning.Message, "module", name, "reason", warning.Reason)
			if report != nil {
				report(*warning)
			}
		}
	}
}

// watchedOnly returns the entries of unserved for the kinds a controller
// of m watches, whose sources report them again.
func watchedOnly(unserved map[schema.GroupVersionKind]*UnservedKind, m abi.Manifest) map[schema.GroupVersionKind]*UnservedKind {
	var out map[schema.GroupVersionKind]*UnservedKind
	for _, g := range append(append([]abi.GroupVersionKind{m.For}, m.Owns...), m.Reads...) {
		gvk := schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
		if u, ok := unserved[gvk]; ok {
			if out == nil {
				out = map[schema.GroupVersionKind]*UnservedKind{}
			}
			out[gvk] = u
		}
	}
	return out
}

// Ready returns an error naming each module whose caches have not synced
// for a reason that is not its own; nil when none is. A module whose
// caches cannot sync for a reason of its own (a kind the API server does
// not serve, or refuses the operator to list) is unready by itself
// (Status.SyncProblem, a SyncFailed Warning, wasmreconcile_module_health)
// and does not hold the operator's readiness: the other modules serve. A
// slow or failing API server is everyone's problem, and keeps the
// operator unready.
func (s *Supervisor) Ready(ctx context.Context) error {
	type item struct {
		name string
		gvk  schema.GroupVersionKind
	}
	s.mu.Lock()
	var items []item
	for name, r := range s.modules {
		if len(r.health.unserved) > 0 || r.paused.Load() {
			continue
		}
		f := r.rec.Manifest().For
		items = append(items, item{name, schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: f.Kind}})
	}
	s.mu.Unlock()
	var msgs []string
	for _, it := range items {
		synced, problem, own := s.syncState(ctx, it.gvk)
		switch {
		case synced || own:
		case problem != "":
			msgs = append(msgs, fmt.Sprintf("module %s: the cache for %s has not synced: %s", it.name, it.gvk.Kind, problem))
		default:
			msgs = append(msgs, fmt.Sprintf("module %s: the cache for %s is syncing", it.name, it.gvk.Kind))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return errors.New(strings.Join(msgs, "; "))
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
		if why == "" {
			why = "the informer has not synced"
		}
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
		case synced && h.syncWarned && len(h.unserved) == 0:
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

// synced reports whether the informer of gvk has synced, without waiting,
// and when it has not, the problem it met, if one is known (the API
// server does not serve the kind, or refused to list it).
func (s *Supervisor) synced(ctx context.Context, gvk schema.GroupVersionKind) (bool, string) {
	synced, problem, _ := s.syncState(ctx, gvk)
	return synced, problem
}

// syncState is synced, and whether the problem is the module's own: the
// API server does not serve the kind, or refuses the operator to list it.
// Other problems (a slow or failing API server) are everyone's.
func (s *Supervisor) syncState(ctx context.Context, gvk schema.GroupVersionKind) (synced bool, problem string, own bool) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	inf, err := s.opts.Manager.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		if meta.IsNoMatchError(err) {
			return false, reconciler.UnservedMessage(gvk, err), true
		}
		return false, err.Error(), false
	}
	if inf.HasSynced() {
		return true, "", false
	}
	if s.opts.LastError != nil {
		if err := s.opts.LastError(gvk.GroupKind()); err != nil {
			return false, err.Error(), apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
		}
	}
	return false, "", false
}

// Status is what the supervisor knows of one module.
type Status struct {
	Loaded   Loaded
	Owner    string
	Paused   bool
	Stats    reconciler.StatsSnapshot
	Activity reconciler.Activity
	// Unserved are the kinds the module's controller cannot watch yet.
	Unserved map[schema.GroupVersionKind]UnservedKind
	// Synced is true once the cache of the module's kind has synced.
	Synced bool
	// SyncProblem, while not Synced, says why when the reason is known: a
	// kind not served, a list the API server refused, a sync past the
	// SyncTimeout. "" while the cache syncs normally.
	SyncProblem string
}

// Status returns module name's status, and whether it runs.
func (s *Supervisor) Status(name string) (Status, bool) {
	s.mu.Lock()
	r := s.modules[name]
	if r == nil {
		s.mu.Unlock()
		return Status{}, false
	}
	var unserved map[schema.GroupVersionKind]UnservedKind
	for gvk, u := range r.health.unserved {
		if unserved == nil {
			unserved = map[schema.GroupVersionKind]UnservedKind{}
		}
		unserved[gvk] = *u
	}
	st := Status{Loaded: r.loaded, Owner: r.spec.Owner, Paused: r.paused.Load(), Stats: r.stats.Snapshot(),
		Activity: r.rec.Activity(), Unserved: unserved}
	since, f := r.health.since, r.rec.Manifest().For
	s.mu.Unlock()
	// The cache is read outside s.mu.
	st.Synced, st.SyncProblem = s.synced(context.Background(), schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: f.Kind})
	for _, u := range unserved {
		st.SyncProblem = u.Message
	}
	if !st.Synced && st.SyncProblem == "" && time.Since(since) > s.opts.SyncTimeout {
		st.SyncProblem = fmt.Sprintf("the cache for %s has not synced %s after the module's controller started", f.Kind, s.opts.SyncTimeout)
	}
	return st, true
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
