// Package metrics defines wasmreconcile's Prometheus metrics, registered on
// controller-runtime's registry next to its controller_runtime_* and
// workqueue_* metrics, so one /metrics endpoint serves them all. Every
// metric is listed in docs/metrics.md.
package metrics

import (
	dto "github.com/prometheus/client_model/go"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// Results of a reconcile, the "result" label of ReconcileTotal.
const (
	ResultSuccess          = "success"           // the guest succeeded and its response was applied
	ResultGuestError       = "guest_error"       // the guest reported a retryable error
	ResultTerminalError    = "terminal_error"    // the guest reported a terminal error
	ResultInvalidResponse  = "invalid_response"  // the response could not be applied (bad children, refused status)
	ResultApplyError       = "apply_error"       // writing status, children or finalizer failed
	ResultFuelExhausted    = "fuel_exhausted"    // engine errors, one result per kind
	ResultDeadlineExceeded = "deadline_exceeded" //
	ResultTrap             = "trap"              //
	ResultMemoryLimit      = "memory_limit"      //
	ResultStackOverflow    = "stack_overflow"    //
	ResultABI              = "abi"               //
	ResultCanceled         = "canceled"          //
)

var allResults = []string{ResultSuccess, ResultGuestError, ResultTerminalError, ResultInvalidResponse, ResultApplyError,
	ResultFuelExhausted, ResultDeadlineExceeded, ResultTrap, ResultMemoryLimit, ResultStackOverflow, ResultABI, ResultCanceled}

// ResultOf maps an engine error to its result label.
func ResultOf(err error) string {
	switch engine.KindOf(err) {
	case engine.KindFuelExhausted:
		return ResultFuelExhausted
	case engine.KindDeadlineExceeded:
		return ResultDeadlineExceeded
	case engine.KindMemoryLimit:
		return ResultMemoryLimit
	case engine.KindStackOverflow:
		return ResultStackOverflow
	case engine.KindABI:
		return ResultABI
	case engine.KindCanceled:
		return ResultCanceled
	}
	return ResultTrap
}

var (
	// ReconcileTotal counts reconciles by module and result.
	ReconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_reconcile_total",
		Help: "Reconciles by module and result (success, guest_error, terminal_error, invalid_response, apply_error, or the engine error kind).",
	}, []string{"module", "result"})

	// GuestDuration observes the time spent in the guest per call.
	GuestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmreconcile_guest_duration_seconds",
		Help:    "Wall-clock time spent in the guest per reconcile call, including failed calls.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17), // 0.1 ms .. 6.5 s
	}, []string{"module"})

	// FuelUsed observes the fuel used per call.
	FuelUsed = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmreconcile_fuel_used",
		Help:    "Fuel used per reconcile call (about one unit per executed wasm instruction), including failed calls.",
		Buckets: prometheus.ExponentialBuckets(10_000, 4, 12), // 1e4 .. 4e10
	}, []string{"module"})

	// Preemptions counts calls stopped by the host, by reason.
	Preemptions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_preemptions_total",
		Help: "Guest calls stopped by the host, by module and reason (fuel: budget spent; deadline: timeout passed).",
	}, []string{"module", "reason"})

	// StatusWrites counts status writes (unchanged statuses are not written).
	StatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_status_writes_total",
		Help: "Status writes by module; an unchanged status is not written and not counted.",
	}, []string{"module"})

	// ChildOperations counts children applied and pruned.
	ChildOperations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_child_operations_total",
		Help: "Children written by module and operation (apply, prune); an unchanged child is not applied and not counted.",
	}, []string{"module", "operation"})

	// StormsDetected counts objects found in a reconcile storm.
	StormsDetected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_storms_detected_total",
		Help: "Objects that entered a reconcile storm (many reconciles that changed nothing) and were made quiescent, by module.",
	}, []string{"module"})

	// Damped counts reconciles of quiescent objects answered without calling the guest.
	Damped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_reconciles_damped_total",
		Help: "Reconciles of quiescent objects that were postponed without calling the guest, by module.",
	}, []string{"module"})

	// ModuleState is 1 when a module is in a lifecycle state.
	ModuleState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wasmreconcile_module_state",
		Help: "1 when the module is in the state: initialized (caches synced), converged (initialized, queue empty, nothing running, no object failing), quiescent (converged and nothing written for a while).",
	}, []string{"module", "state"})

	// ModuleInfo is 1 for each loaded module, labelled with its digest.
	ModuleInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wasmreconcile_module_info",
		Help: "1 for each loaded module, with the sha256 digest of its bytes.",
	}, []string{"module", "digest"})

	instances = &poolCollector{
		desc:    prometheus.NewDesc("wasmreconcile_instances", "Instances of a module's pool, by state (live: existing; idle: ready for the next call).", []string{"module", "state"}, nil),
		modules: map[string]*engine.Module{},
	}
)

func init() {
	crmetrics.Registry.MustRegister(ReconcileTotal, GuestDuration, FuelUsed, Preemptions, StatusWrites, ChildOperations, StormsDetected, Damped, ModuleState, ModuleInfo, instances)
}

// Track starts reporting m: it sets its info metric, pre-initialises its
// label sets at zero, and adds its pool to wasmreconcile_instances.
func Track(m *engine.Module) {
	name := m.Name()
	ModuleInfo.DeletePartialMatch(prometheus.Labels{"module": name}) // one digest per module: the one serving
	ModuleInfo.WithLabelValues(name, m.Digest()).Set(1)
	for _, r := range allResults {
		ReconcileTotal.WithLabelValues(name, r)
	}
	Preemptions.WithLabelValues(name, "fuel")
	Preemptions.WithLabelValues(name, "deadline")
	StatusWrites.WithLabelValues(name)
	ChildOperations.WithLabelValues(name, "apply")
	ChildOperations.WithLabelValues(name, "prune")
	GuestDuration.WithLabelValues(name)
	StormsDetected.WithLabelValues(name)
	Damped.WithLabelValues(name)
	FuelUsed.WithLabelValues(name)
	instances.mu.Lock()
	instances.modules[name] = m
	instances.mu.Unlock()
}

// Untrack removes a module that no longer runs from wasmreconcile_module_info,
// wasmreconcile_module_state and wasmreconcile_instances; its counters stay,
// as Prometheus expects.
func Untrack(name string) {
	ModuleInfo.DeletePartialMatch(prometheus.Labels{"module": name})
	ModuleState.DeletePartialMatch(prometheus.Labels{"module": name})
	instances.mu.Lock()
	delete(instances.modules, name)
	instances.mu.Unlock()
}

// ObserveCall records one guest call's fuel, duration and preemption.
func ObserveCall(module string, res engine.Result, err error) {
	FuelUsed.WithLabelValues(module).Observe(float64(res.Fuel))
	GuestDuration.WithLabelValues(module).Observe(res.Duration.Seconds())
	switch engine.KindOf(err) {
	case engine.KindFuelExhausted:
		Preemptions.WithLabelValues(module, "fuel").Inc()
	case engine.KindDeadlineExceeded:
		Preemptions.WithLabelValues(module, "deadline").Inc()
	}
}

// poolCollector reports PoolStats of tracked modules when scraped.
type poolCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	modules map[string]*engine.Module
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, m := range c.modules {
		s := m.PoolStats()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Live), name, "live")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Idle), name, "idle")
	}
}

// Collectors returns the collectors of this package, for checks of what
// dashboards and alert rules may reference.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{ReconcileTotal, GuestDuration, FuelUsed, Preemptions, StatusWrites, ChildOperations, StormsDetected, Damped, ModuleState, ModuleInfo, instances}
}

// Stats summarises one module's calls since the process started, for the
// ReconcileModule status.
type Stats struct {
	Reconciles          int64
	Errors              int64 // every result but success
	MeanFuel            int64
	MeanDurationSeconds float64
}

// StatsFor reads module's Stats from the metrics.
func StatsFor(module string) Stats {
	var s Stats
	for _, r := range allResults {
		var m dto.Metric
		if err := ReconcileTotal.WithLabelValues(module, r).Write(&m); err == nil {
			n := int64(m.GetCounter().GetValue())
			s.Reconciles += n
			if r != ResultSuccess {
				s.Errors += n
			}
		}
	}
	var fuel, dur dto.Metric
	if err := FuelUsed.WithLabelValues(module).(prometheus.Histogram).Write(&fuel); err == nil && fuel.GetHistogram().GetSampleCount() > 0 {
		s.MeanFuel = int64(fuel.GetHistogram().GetSampleSum() / float64(fuel.GetHistogram().GetSampleCount()))
	}
	if err := GuestDuration.WithLabelValues(module).(prometheus.Histogram).Write(&dur); err == nil && dur.GetHistogram().GetSampleCount() > 0 {
		s.MeanDurationSeconds = dur.GetHistogram().GetSampleSum() / float64(dur.GetHistogram().GetSampleCount())
	}
	return s
}
