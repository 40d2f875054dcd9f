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

// health is one module's load health: the episodes of its warnings, each
// reported once when it starts (a Warning) and once when it ends (a Normal
// event), and the kinds its controller cannot watch. The supervisor feeds
// it what the informers report (informer) and what each health check sees
// (observe), under its lock; health decides what to report, and does no
// I/O of its own.
type health struct {
	since       time.Time // when the module's controller last started
	syncWarned  bool
	staleWarned bool
	// unserved are the kinds whose informer the module's controller cannot
	// get (a CRD not installed): the module is not ready while any is.
	unserved map[schema.GroupVersionKind]*UnservedKind
}

// informer records a source's report on getting the informer of a kind
// module watches. The first failed attempt of an episode returns a
// SyncFailed Warning (and stands for the timed one observe would send
// later); later attempts are counted, quietly; a success ends the kind's
// episode (the Synced event follows from observe once the module's kind
// has synced).
func (h *health) informer(module string, st reconciler.InformerState) *HealthEvent {
	u := h.unserved[st.GVK]
	switch {
	case st.Err == nil:
		delete(h.unserved, st.GVK)
	case u == nil:
		if h.unserved == nil {
			h.unserved = map[schema.GroupVersionKind]*UnservedKind{}
		}
		u = &UnservedKind{Message: reconciler.UnservedMessage(st.GVK, st.Err), Attempts: 1}
		h.unserved[st.GVK] = u
		h.syncWarned = true // the timed SyncFailed would only repeat it
		return &HealthEvent{Module: module, Warning: true, Reason: ReasonSyncFailed, Message: u.Message}
	default:
		u.Attempts++
	}
	return nil
}

// observe takes what a health check saw of the cache of module's kind at
// now (synced, or why not; the time of its last watch event or list, zero
// if none yet) and returns the events it starts or ends:
//   - SyncFailed when the cache has not synced syncTimeout after the
//     controller started, once; Synced when it has, and no kind is
//     unserved;
//   - CacheStale when nothing arrived for staleAfter, once; Fresh when
//     events arrive again.
func (h *health) observe(module, kind string, synced bool, why string, lastEvent, now time.Time, syncTimeout, staleAfter time.Duration) []HealthEvent {
	var events []HealthEvent
	switch {
	case !synced && now.Sub(h.since) > syncTimeout && !h.syncWarned:
		h.syncWarned = true
		events = append(events, HealthEvent{Module: module, Warning: true, Reason: ReasonSyncFailed, Message: fmt.Sprintf(
			"the cache for %s has not synced %s after the module loaded: %s; check that the kind's CRD is installed, the operator's RBAC for it, and the API server's health",
			kind, syncTimeout, why)})
	case synced && h.syncWarned && len(h.unserved) == 0:
		h.syncWarned = false
		events = append(events, HealthEvent{Module: module, Reason: ReasonSynced, Message: fmt.Sprintf("the cache for %s has synced", kind)})
	}
	if lastEvent.IsZero() { // no event yet: nothing to be stale against
		return events
	}
	age := now.Sub(lastEvent)
	switch stale := age > staleAfter; {
	case stale && !h.staleWarned:
		h.staleWarned = true
		events = append(events, HealthEvent{Module: module, Warning: true, Reason: ReasonCacheStale, Message: fmt.Sprintf(
			"no watch event or list for %s in %s; watches may be failing (see wasmreconcile_informer_watch_restarts_total)", kind, age.Round(time.Second))})
	case !stale && h.staleWarned:
		h.staleWarned = false
		events = append(events, HealthEvent{Module: module, Reason: ReasonFresh, Message: fmt.Sprintf("events for %s arrive again", kind)})
	}
	return events
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
		warning := r.health.informer(name, st)
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
		s.mu.Lock()
		r := s.modules[c.name]
		if r == nil {
			s.mu.Unlock()
			continue
		}
		events := r.health.observe(c.name, c.gvk.Kind, synced, why, lastEvent, now, s.opts.SyncTimeout, s.opts.StaleAfter)
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
	// Unloaded is true while the serving version's code is out of memory
	// for having served no call for its idle module timeout
	// (engine.Limits.IdleModuleTimeout); the next call loads it back.
	Unloaded bool
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
	if v := r.slot.Current(); v != nil {
		st.Unloaded = !v.Module.Loaded()
	}
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
		m := lifecycleStates(it.r.rec.Activity(), synced, now, s.opts.QuiescentAfter)
		m.Name, m.Digest, m.Pool, m.Loaded = it.name, v.Module.Digest(), v.Module.PoolStats(), v.Module.Loaded()
		m.SyncFailed, m.CacheStale = it.h.syncWarned, it.h.staleWarned
		out = append(out, m)
	}
	return out
}

// lifecycleStates computes a module's lifecycle states from its activity.
func lifecycleStates(a reconciler.Activity, synced bool, now time.Time, quiescentAfter time.Duration) metrics.Module {
	converged := synced && a.Queued == 0 && a.Active == 0 && a.Failing == 0
	return metrics.Module{
		Initialized: synced,
		Converged:   converged,
		Quiescent:   converged && (a.LastChange.IsZero() || now.Sub(a.LastChange) >= quiescentAfter),
	}
}
