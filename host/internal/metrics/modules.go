package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// moduleCollector reports, at scrape time, what the running modules are:
// computed from the hosts' own state, so that nothing stale is left behind
// when a module goes away.
type moduleCollector struct {
	info, state, instances, health *prometheus.Desc

	mu    sync.Mutex
	hosts map[string]func() []Module
}

func newModuleCollector() *moduleCollector {
	return &moduleCollector{
		info: prometheus.NewDesc("wasmreconcile_module_info",
			"1 for each running module, with the sha256 digest of the bytes serving it.", []string{"module", "digest"}, nil),
		state: prometheus.NewDesc("wasmreconcile_module_state",
			"1 when the module is in the state: initialized (caches synced), converged (initialized, queue empty, nothing running, no object failing), quiescent (converged and nothing written for a while), loaded (its code is in memory; 0 while unloaded for --idle-module-timeout).", []string{"module", "state"}, nil),
		health: prometheus.NewDesc("wasmreconcile_module_health",
			"1 while the module has the load-health problem: SyncFailed (the cache of its kind has not synced) or CacheStale (no event or list for its kind for a while); whatever the module's source.", []string{"module", "problem"}, nil),
		instances: prometheus.NewDesc("wasmreconcile_instances",
			"Instances of a module's pool, by state (live: existing; idle: ready for the next call).", []string{"module", "state"}, nil),
		hosts: map[string]func() []Module{},
	}
}

func (c *moduleCollector) set(host string, list func() []Module) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if list == nil {
		delete(c.hosts, host)
		return
	}
	c.hosts[host] = list
}

func (c *moduleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.state
	ch <- c.instances
	ch <- c.health
}

func (c *moduleCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	lists := make([]func() []Module, 0, len(c.hosts))
	for _, l := range c.hosts {
		lists = append(lists, l)
	}
	c.mu.Unlock()
	seen := map[string]bool{}
	for _, list := range lists {
		for _, m := range list() {
			if seen[m.Name] {
				continue // two hosts in one process with a module of one name
			}
			seen[m.Name] = true
			ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, m.Name, m.Digest)
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, b2f(m.Initialized), m.Name, "initialized")
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, b2f(m.Converged), m.Name, "converged")
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, b2f(m.Quiescent), m.Name, "quiescent")
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, b2f(m.Loaded), m.Name, "loaded")
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(m.Pool.Live), m.Name, "live")
			ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(m.Pool.Idle), m.Name, "idle")
			ch <- prometheus.MustNewConstMetric(c.health, prometheus.GaugeValue, b2f(m.SyncFailed), m.Name, "SyncFailed")
			ch <- prometheus.MustNewConstMetric(c.health, prometheus.GaugeValue, b2f(m.CacheStale), m.Name, "CacheStale")
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
