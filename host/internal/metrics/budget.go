package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// budgetCollector reports the guest memory budget at scrape time.
type budgetCollector struct {
	mu    sync.Mutex
	stats func() engine.MemoryBudgetStats
}

var (
	budgetBytes = prometheus.NewDesc("wasmreconcile_memory_budget_bytes",
		"The guest memory budget (--memory-budget), by state: limit, and reserved (the memory caps of the instances alive and the memory limits of the compile workers running).", []string{"state"}, nil)
	budgetWaiting = prometheus.NewDesc("wasmreconcile_memory_budget_waiting",
		"Instances and compiles waiting now for room in the guest memory budget.", nil, nil)
	budgetEvents = prometheus.NewDesc("wasmreconcile_memory_budget_events_total",
		"Guest memory budget events, by event: wait (a reservation waited), eviction (an idle instance was closed to make room), refusal (a call gave up waiting, MemoryBudgetExceeded).", []string{"event"}, nil)
)

func (c *budgetCollector) set(stats func() engine.MemoryBudgetStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats = stats
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetBytes
	ch <- budgetWaiting
	ch <- budgetEvents
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	stats := c.stats
	c.mu.Unlock()
	if stats == nil {
		return
	}
	st := stats()
	ch <- prometheus.MustNewConstMetric(budgetBytes, prometheus.GaugeValue, float64(st.Limit), "limit")
	ch <- prometheus.MustNewConstMetric(budgetBytes, prometheus.GaugeValue, float64(st.Reserved), "reserved")
	ch <- prometheus.MustNewConstMetric(budgetWaiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(budgetEvents, prometheus.CounterValue, float64(st.Waits), "wait")
	ch <- prometheus.MustNewConstMetric(budgetEvents, prometheus.CounterValue, float64(st.Evicted), "eviction")
	ch <- prometheus.MustNewConstMetric(budgetEvents, prometheus.CounterValue, float64(st.Refused), "refusal")
}
