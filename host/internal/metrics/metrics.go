// Package metrics defines the host's Prometheus metrics per module. Its
// collectors are built by New on a registerer the caller passes in: the
// operator passes controller-runtime's registry by default, so that one
// /metrics endpoint serves them beside controller_runtime_* and workqueue_*.
// Nothing here is global and nothing is registered in init. Every metric is
// listed in docs/metrics.md.
//
// The metrics are written to, never read back: status, health and
// decisions come from the components' own state (see reconciler.Stats and
// informer.Informers).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/promreg"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Metrics are the per-module collectors of one host.
type Metrics struct {
	// ReconcileTotal counts reconciles by module and result: a
	// protocol.Kind, such as Success or FuelExhausted.
	ReconcileTotal *prometheus.CounterVec
	// GuestDuration observes the time spent in the guest per call.
	GuestDuration *prometheus.HistogramVec
	// FuelUsed observes the fuel used per call.
	FuelUsed *prometheus.HistogramVec
	// Preemptions counts calls stopped by the host, by reason (fuel,
	// deadline).
	Preemptions *prometheus.CounterVec
	// StatusWrites counts status writes; an unchanged status is not written.
	StatusWrites *prometheus.CounterVec
	// ChildOperations counts children applied and pruned.
	ChildOperations *prometheus.CounterVec
	// InstancesRecycled counts instances closed after a successful call, by
	// module and reason (calls, memory), and instances closed for having
	// been idle (reason idle).
	InstancesRecycled *prometheus.CounterVec
	// ApplyFailures counts writes the API server refused, and desired
	// children not written for a conflict, by module, target (child,
	// prune, status, finalizer) and reason (the API server's, or Conflict).
	ApplyFailures *prometheus.CounterVec
	// StormsDetected counts objects found in a reconcile storm.
	StormsDetected *prometheus.CounterVec
	// Damped counts reconciles of quiescent objects answered without a call.
	Damped *prometheus.CounterVec
	// Unchanged counts reconciles answered without a call because the
	// object, its children and the module were as the last successful
	// call left them (policy.Policy.CallUnchanged).
	Unchanged *prometheus.CounterVec
	// Reloads counts module loads by result.
	Reloads *prometheus.CounterVec
	// CompileSeconds observes how long loading new bytes took.
	CompileSeconds *prometheus.HistogramVec
	// GuestLogDropped counts guest log lines dropped over the per-call log
	// budget (engine.Limits.MaxLogLines, MaxLogBytes).
	GuestLogDropped *prometheus.CounterVec
	// EventsDropped counts guest Events dropped over the Event budget, by
	// the bucket that refused them (object, module).
	EventsDropped *prometheus.CounterVec
	// Shadow counts a candidate's comparisons with the serving version, by
	// module and result: agree, differ, candidate_error, skipped.
	Shadow *prometheus.CounterVec
	// MemoryWaits counts calls that waited for their instance's memory
	// within the guest memory budget, by module.
	MemoryWaits *prometheus.CounterVec
	// HostPanics counts panics of the host recovered while reconciling an
	// object, by module.
	HostPanics *prometheus.CounterVec
	// TriggerDamped counts events of related objects coalesced because
	// their source changes too often, by module.
	TriggerDamped *prometheus.CounterVec
	// TriggerFanOutDropped counts objects a related object's event did
	// not reconcile, over the trigger fan-out cap, by module.
	TriggerFanOutDropped *prometheus.CounterVec
	// ModuleUnloads counts a module's unloads for idleness
	// (engine.Limits.IdleModuleTimeout).
	ModuleUnloads *prometheus.CounterVec
	// ModuleWakeSeconds observes how long the first call after an unload
	// waited for the module's code to load back, by module and result (ok,
	// failed).
	ModuleWakeSeconds *prometheus.HistogramVec
	// ShardSlots is how many slots this replica works on, with sharding
	// (issue 27); ShardMembers how many live replicas it sees.
	ShardSlots, ShardMembers prometheus.Gauge
	// ShardMoves counts slots whose owner changed in this replica's
	// assignments.
	ShardMoves prometheus.Counter
	// ShardHandoverSeconds observes, per slot this replica was given, the
	// time from the assignment to the slot's work starting here (the old
	// owner stopping included).
	ShardHandoverSeconds prometheus.Histogram
	// ShardLoad is the objects of the slots this replica works on, as it
	// last counted them for balancing by load; ShardBalanceMoves counts
	// the slots moved by the balancing plans this replica made (as the
	// elected one).
	ShardLoad         prometheus.Gauge
	ShardBalanceMoves prometheus.Counter
	// CompilationCacheBytes is what the files under the compilation cache
	// directory added up to at the last check of its bound.
	CompilationCacheBytes prometheus.Gauge
	// CompilationCacheRemoved counts files removed from the compilation
	// cache directory to keep it under its bound.
	CompilationCacheRemoved prometheus.Counter
	// CompilationCacheOver is 1 while the compilation cache directory is
	// over its bound with nothing it may remove.
	CompilationCacheOver prometheus.Gauge
	// ModuleCacheBytes, ModuleCacheRemoved and ModuleCacheOver are the
	// same for the oci module cache directory (--module-cache-dir).
	ModuleCacheBytes   prometheus.Gauge
	ModuleCacheRemoved prometheus.Counter
	ModuleCacheOver    prometheus.Gauge

	modules *moduleCollector
	budget  *budgetCollector
}

// Module is what the scrape-time metrics report of one running module:
// wasmreconcile_module_info, wasmreconcile_module_state and
// wasmreconcile_instances.
type Module struct {
	Name   string
	Digest string
	// Pool is the serving version's instance pool.
	Pool engine.PoolStats
	// Initialized, Converged and Quiescent are the module's lifecycle
	// states (docs/metrics.md).
	Initialized, Converged, Quiescent bool
	// SyncFailed and CacheStale are the module's load-health warnings, true
	// while they last.
	SyncFailed, CacheStale bool
	// Loaded is false while the serving version's code is unloaded for
	// idleness (engine.Limits.IdleModuleTimeout).
	Loaded bool
}

// New builds the collectors and registers them on reg. A collector that reg
// holds already (a second host in one process) is reused, so both hosts
// count into it.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ReconcileTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_reconcile_total",
			Help: "Reconciles by module and result: Success, or how it failed (ReconcileFailed, InvalidResponse, ApplyFailed, FuelExhausted, DeadlineExceeded, MemoryLimit, StackOverflow, GuestTrapped, ABIViolation, Canceled).",
		}, []string{"module", "result"}),
		GuestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmreconcile_guest_duration_seconds",
			Help:    "Wall-clock time spent in the guest per reconcile call, including failed calls.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17), // 0.1 ms .. 6.5 s
		}, []string{"module"}),
		FuelUsed: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmreconcile_fuel_used",
			Help:    "Fuel used per reconcile call (about one unit per executed wasm instruction), including failed calls.",
			Buckets: prometheus.ExponentialBuckets(10_000, 4, 12), // 1e4 .. 4e10
		}, []string{"module"}),
		Preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_preemptions_total",
			Help: "Guest calls stopped by the host, by module and reason (fuel: budget spent; deadline: timeout passed).",
		}, []string{"module", "reason"}),
		StatusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_status_writes_total",
			Help: "Status writes by module; an unchanged status is not written and not counted.",
		}, []string{"module"}),
		ChildOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_child_operations_total",
			Help: "Children written by module and operation (apply, prune); an unchanged child is not applied and not counted.",
		}, []string{"module", "operation"}),
		InstancesRecycled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_instances_recycled_total",
			Help: "Guest instances closed and replaced by a fresh one when needed, by module and reason: after a successful call, calls (it served --recycle-after-calls calls) or memory (its linear memory grew past --recycle-memory-pages); between calls, idle (it served no call for --idle-instance-timeout, or for --idle-spare-timeout while another instance remains).",
		}, []string{"module", "reason"}),
		ApplyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_apply_failures_total",
			Help: "Writes of a module the API server refused, and desired children not written because their name is taken by an object the module did not create, by module, target (child, prune, status, finalizer) and reason (the API server's reason such as Invalid or Forbidden, or Conflict).",
		}, []string{"module", "target", "reason"}),
		StormsDetected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_storms_detected_total",
			Help: "Objects that entered a reconcile storm (many reconciles that changed nothing) and were made quiescent, by module.",
		}, []string{"module"}),
		Damped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_reconciles_damped_total",
			Help: "Reconciles of quiescent objects that were postponed without calling the guest, by module.",
		}, []string{"module"}),
		Unchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_reconciles_unchanged_total",
			Help: "Reconciles answered without calling the guest because the object, its children and the module were as the last successful call left them (usually the event of the host's own status write), by module. --call-unchanged turns this off.",
		}, []string{"module"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_module_reloads_total",
			Help: "Module loads, by module and result: restarted (a new controller), swapped (new bytes in the running controller), cached (a version still compiled, swapped in), unchanged, upgraded (compiled code replaced the interpreter), failed.",
		}, []string{"module", "result"}),
		CompileSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmreconcile_module_compile_seconds",
			Help:    "Time to instrument, compile and validate a module's new bytes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}, []string{"module"}),
		GuestLogDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_guest_log_lines_dropped_total",
			Help: "Guest log lines dropped because a call went over its log budget (--max-log-lines, --max-log-bytes), by module.",
		}, []string{"module"}),
		EventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_events_dropped_total",
			Help: "Guest Events dropped over the Event budget, by module and the token bucket that refused them: object (--event-object-qps, --event-object-burst) or module (--event-module-qps, --event-module-burst).",
		}, []string{"module", "reason"}),
		Shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_shadow_comparisons_total",
			Help: "Calls of a ReconcileModule's candidate (spec.candidate) on the serving version's requests, by module and result: agree, differ, candidate_error (the candidate failed where the serving version did not), skipped (the candidate's queue was full).",
		}, []string{"module", "result"}),
		MemoryWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_memory_budget_waits_total",
			Help: "Guest calls that waited for their instance's memory within the operator's guest memory budget (--memory-budget) before they ran, by module; each also records a MemoryBudgetWait Warning Event on its object.",
		}, []string{"module"}),
		HostPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_host_panics_total",
			Help: "Panics of the host recovered while reconciling an object, by module: a bug of wasmreconcile's (the reconcile ends as HostPanic, with an error log line and a Warning Event, and is retried).",
		}, []string{"module"}),
		TriggerDamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_trigger_events_damped_total",
			Help: "Events of related objects coalesced because that one related object changed more than --storm-threshold times within --storm-window: it reaches its owners at most once every --storm-backoff, other changes at once. By module.",
		}, []string{"module"}),
		TriggerFanOutDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_trigger_fanout_dropped_total",
			Help: "Objects a related object's event did not reconcile because it mapped to more than --trigger-max-fanout objects, by module.",
		}, []string{"module"}),
		ModuleUnloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmreconcile_module_unloads_total",
			Help: "Unloads of a module's code for having served no call for --idle-module-timeout, by module; the next call loads it back (wasmreconcile_module_wake_seconds).",
		}, []string{"module"}),
		ModuleWakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmreconcile_module_wake_seconds",
			Help:    "How long the first call after an unload waited for the module's code to load back from the compilation cache, by module and result (ok, failed).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"module", "result"}),
		ShardSlots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_shard_slots",
			Help: "Slots this replica works on, with --sharding; 0 without.",
		}),
		ShardMembers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_shard_members",
			Help: "Live replicas this replica sees in its shard group, itself included, with --sharding; 0 without.",
		}),
		ShardMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmreconcile_shard_slot_moves_total",
			Help: "Slots whose owner changed in this replica's assignments, with --sharding.",
		}),
		ShardHandoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "wasmreconcile_shard_handover_seconds",
			Help:    "Per slot given to this replica: from the assignment to the slot's work starting here, the old owner stopping included, with --sharding.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120},
		}),
		ShardLoad: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_shard_load",
			Help: "Objects of the slots this replica works on (every module's kind), as last counted for balancing by load, with --sharding.",
		}),
		ShardBalanceMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmreconcile_shard_balance_moves_total",
			Help: "Slots moved by the balancing plans this replica made as the elected one, with --sharding.",
		}),
		CompilationCacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_compilation_cache_bytes",
			Help: "What the files under --compilation-cache-dir added up to at the last check of --compilation-cache-max-size.",
		}),
		CompilationCacheRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmreconcile_compilation_cache_removed_files_total",
			Help: "Files removed from --compilation-cache-dir, least recently used first, to keep it under --compilation-cache-max-size.",
		}),
		CompilationCacheOver: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_compilation_cache_over",
			Help: "1 while --compilation-cache-dir is over --compilation-cache-max-size with nothing it may remove (what unloaded modules need, or files used in the last two minutes); raise the size.",
		}),
		ModuleCacheBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_module_cache_bytes",
			Help: "What the files under --module-cache-dir added up to at the last check of --module-cache-max-size.",
		}),
		ModuleCacheRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wasmreconcile_module_cache_removed_files_total",
			Help: "Manifests and modules removed from --module-cache-dir, least recently used first, to keep it under --module-cache-max-size.",
		}),
		ModuleCacheOver: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "wasmreconcile_module_cache_over",
			Help: "1 while --module-cache-dir is over --module-cache-max-size with nothing it may remove (the modules ReconcileModules and --module name, or files used in the last two minutes), or while what is in use cannot be listed; raise the size.",
		}),
		modules: newModuleCollector(),
		budget:  &budgetCollector{},
	}
	var err error
	m.ReconcileTotal = promreg.Register(reg, m.ReconcileTotal, &err)
	m.GuestDuration = promreg.Register(reg, m.GuestDuration, &err)
	m.FuelUsed = promreg.Register(reg, m.FuelUsed, &err)
	m.Preemptions = promreg.Register(reg, m.Preemptions, &err)
	m.StatusWrites = promreg.Register(reg, m.StatusWrites, &err)
	m.ChildOperations = promreg.Register(reg, m.ChildOperations, &err)
	m.ApplyFailures = promreg.Register(reg, m.ApplyFailures, &err)
	m.InstancesRecycled = promreg.Register(reg, m.InstancesRecycled, &err)
	m.StormsDetected = promreg.Register(reg, m.StormsDetected, &err)
	m.Damped = promreg.Register(reg, m.Damped, &err)
	m.Unchanged = promreg.Register(reg, m.Unchanged, &err)
	m.Reloads = promreg.Register(reg, m.Reloads, &err)
	m.CompileSeconds = promreg.Register(reg, m.CompileSeconds, &err)
	m.GuestLogDropped = promreg.Register(reg, m.GuestLogDropped, &err)
	m.EventsDropped = promreg.Register(reg, m.EventsDropped, &err)
	m.Shadow = promreg.Register(reg, m.Shadow, &err)
	m.MemoryWaits = promreg.Register(reg, m.MemoryWaits, &err)
	m.HostPanics = promreg.Register(reg, m.HostPanics, &err)
	m.TriggerDamped = promreg.Register(reg, m.TriggerDamped, &err)
	m.TriggerFanOutDropped = promreg.Register(reg, m.TriggerFanOutDropped, &err)
	m.ModuleUnloads = promreg.Register(reg, m.ModuleUnloads, &err)
	m.ModuleWakeSeconds = promreg.Register(reg, m.ModuleWakeSeconds, &err)
	m.ShardSlots = promreg.Register(reg, m.ShardSlots, &err)
	m.ShardMembers = promreg.Register(reg, m.ShardMembers, &err)
	m.ShardMoves = promreg.Register(reg, m.ShardMoves, &err)
	m.ShardHandoverSeconds = promreg.Register(reg, m.ShardHandoverSeconds, &err)
	m.ShardLoad = promreg.Register(reg, m.ShardLoad, &err)
	m.ShardBalanceMoves = promreg.Register(reg, m.ShardBalanceMoves, &err)
	m.CompilationCacheBytes = promreg.Register(reg, m.CompilationCacheBytes, &err)
	m.CompilationCacheRemoved = promreg.Register(reg, m.CompilationCacheRemoved, &err)
	m.CompilationCacheOver = promreg.Register(reg, m.CompilationCacheOver, &err)
	m.ModuleCacheBytes = promreg.Register(reg, m.ModuleCacheBytes, &err)
	m.ModuleCacheRemoved = promreg.Register(reg, m.ModuleCacheRemoved, &err)
	m.ModuleCacheOver = promreg.Register(reg, m.ModuleCacheOver, &err)
	m.modules = promreg.Register(reg, m.modules, &err)
	m.budget = promreg.Register(reg, m.budget, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Collectors returns the collectors of m, for checks of what dashboards and
// alert rules may reference.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ReconcileTotal, m.GuestDuration, m.FuelUsed, m.Preemptions, m.StatusWrites,
		m.ChildOperations, m.ApplyFailures, m.InstancesRecycled, m.StormsDetected, m.Damped, m.Unchanged, m.Reloads, m.CompileSeconds, m.GuestLogDropped, m.EventsDropped, m.Shadow, m.MemoryWaits, m.HostPanics, m.TriggerDamped, m.TriggerFanOutDropped, m.ModuleUnloads, m.ModuleWakeSeconds,
		m.ShardSlots, m.ShardMembers, m.ShardMoves, m.ShardHandoverSeconds, m.ShardLoad, m.ShardBalanceMoves,
		m.CompilationCacheBytes, m.CompilationCacheRemoved, m.CompilationCacheOver,
		m.ModuleCacheBytes, m.ModuleCacheRemoved, m.ModuleCacheOver, m.modules, m.budget}
}

// ObserveCachePrune records a check of the compilation cache directory's
// bound (engine.Options.CompilationCachePruned).
func (m *Metrics) ObserveCachePrune(p engine.CachePrune) {
	observePrune(m.CompilationCacheBytes, m.CompilationCacheRemoved, m.CompilationCacheOver, p.Bytes-p.Freed, p.Removed, p.Over)
}

// ObserveModuleCachePrune records a check of the oci module cache
// directory's bound (source.BlobCacheOptions.Pruned).
func (m *Metrics) ObserveModuleCachePrune(p source.BlobCachePrune) {
	observePrune(m.ModuleCacheBytes, m.ModuleCacheRemoved, m.ModuleCacheOver, p.Bytes-p.Freed, p.Removed, p.Over)
}

func observePrune(bytes prometheus.Gauge, removed prometheus.Counter, over prometheus.Gauge, left int64, n int, isOver bool) {
	bytes.Set(float64(left))
	removed.Add(float64(n))
	o := 0.0
	if isOver {
		o = 1
	}
	over.Set(o)
}

// Init pre-initialises module's label sets at zero, so that rate() and
// alerts see every series from the start.
func (m *Metrics) Init(module string) {
	for _, k := range protocol.Kinds {
		if k != protocol.InvalidModule {
			m.ReconcileTotal.WithLabelValues(module, string(k))
		}
	}
	m.Preemptions.WithLabelValues(module, "fuel")
	m.Preemptions.WithLabelValues(module, "deadline")
	m.StatusWrites.WithLabelValues(module)
	m.ChildOperations.WithLabelValues(module, "apply")
	m.ChildOperations.WithLabelValues(module, "prune")
	m.InstancesRecycled.WithLabelValues(module, "calls")
	m.InstancesRecycled.WithLabelValues(module, "memory")
	m.InstancesRecycled.WithLabelValues(module, engine.RecycledIdle)
	m.GuestDuration.WithLabelValues(module)
	m.FuelUsed.WithLabelValues(module)
	m.StormsDetected.WithLabelValues(module)
	m.Damped.WithLabelValues(module)
	m.Unchanged.WithLabelValues(module)
	m.GuestLogDropped.WithLabelValues(module)
	m.EventsDropped.WithLabelValues(module, "object")
	m.EventsDropped.WithLabelValues(module, "module")
	m.MemoryWaits.WithLabelValues(module)
	m.HostPanics.WithLabelValues(module)
	m.TriggerDamped.WithLabelValues(module)
	m.TriggerFanOutDropped.WithLabelValues(module)
	m.ModuleUnloads.WithLabelValues(module)
}

// ObserveUnload records module's code unloaded for idleness
// (engine.Options.ModuleUnloaded).
func (m *Metrics) ObserveUnload(module string) {
	m.ModuleUnloads.WithLabelValues(module).Inc()
}

// ObserveWake records how long loading module's code back took, and
// whether it failed (engine.Options.ModuleReloaded).
func (m *Metrics) ObserveWake(module string, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.ModuleWakeSeconds.WithLabelValues(module, result).Observe(took.Seconds())
}

// ObserveIdleRelease records one of module's instances closed for having
// served no call for its idle time (engine.Options.IdleReleased).
func (m *Metrics) ObserveIdleRelease(module string) {
	m.InstancesRecycled.WithLabelValues(module, engine.RecycledIdle).Inc()
}

// ObserveCall records one guest call's fuel, duration, preemption and
// dropped log lines.
func (m *Metrics) ObserveCall(module string, res engine.Result, kind protocol.Kind) {
	m.FuelUsed.WithLabelValues(module).Observe(float64(res.Fuel))
	m.GuestDuration.WithLabelValues(module).Observe(res.Duration.Seconds())
	if res.LogDropped > 0 {
		m.GuestLogDropped.WithLabelValues(module).Add(float64(res.LogDropped))
	}
	if res.Recycled != "" {
		m.InstancesRecycled.WithLabelValues(module, res.Recycled).Inc()
	}
	if res.MemoryWait > 0 {
		m.MemoryWaits.WithLabelValues(module).Inc()
	}
	switch kind {
	case protocol.FuelExhausted:
		m.Preemptions.WithLabelValues(module, "fuel").Inc()
	case protocol.DeadlineExceeded:
		m.Preemptions.WithLabelValues(module, "deadline").Inc()
	}
}

// ReportModules makes every scrape report the modules that list returns
// (module info, lifecycle states and instance pools). A host that reports
// its modules replaces the previous reporter under the same name; remove
// it with StopReporting.
func (m *Metrics) ReportModules(host string, list func() []Module) { m.modules.set(host, list) }

// StopReporting stops reporting host's modules.
func (m *Metrics) StopReporting(host string) { m.modules.set(host, nil) }

// ReportBudget makes every scrape report the guest memory budget that
// stats describes (wasmreconcile_memory_budget_*); nil stops it.
func (m *Metrics) ReportBudget(stats func() engine.MemoryBudgetStats) { m.budget.set(stats) }
