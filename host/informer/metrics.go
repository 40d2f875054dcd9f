package informer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/internal/promreg"
)

// Metrics are the informer metrics, labelled by kind ("Kind.group", see
// Label); see docs/metrics.md.
type Metrics struct {
	ListPages, ListObjects, ListExpired, EmptyListVerifications, EventsReceived, WatchRestarts *prometheus.CounterVec
	ListDuration                                                                               *prometheus.HistogramVec
	LastEvent, Objects                                                                         *prometheus.GaugeVec
}

// NewMetrics builds the informer metrics and registers them on reg; a
// collector reg holds already (a second cache in one process) is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{}
	m.ListPages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_pages_total",
		Help: "LIST pages received by informers, by kind.",
	}, []string{"kind"})
	m.ListObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_objects_total",
		Help: "Objects received in LIST pages by informers, by kind.",
	}, []string{"kind"})
	m.ListDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmreconcile_informer_list_duration_seconds",
		Help:    "Duration of a whole paginated list (all pages), by kind.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. 41 s
	}, []string{"kind"})
	m.ListExpired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_expired_total",
		Help: "Expired continue tokens during a paginated list (each is followed by a full list), by kind.",
	}, []string{"kind"})
	m.EmptyListVerifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_empty_list_verifications_total",
		Help: "Empty lists of a kind that had objects, re-listed before the cache acted on them, by kind and outcome (confirmed: still empty; refuted: objects came back).",
	}, []string{"kind", "outcome"})
	m.EventsReceived = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_events_total",
		Help: "Watch events received by informers, by kind and type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).",
	}, []string{"kind", "type"})
	m.WatchRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_watch_restarts_total",
		Help: "Watches reopened by informers, by kind and the reason the previous one ended (eof, timeout, gone, resharded, error).",
	}, []string{"kind", "reason"})
	m.LastEvent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wasmreconcile_informer_last_event_timestamp_seconds",
		Help: "Unix time of the last watch event (bookmarks included) or completed list per kind; time() minus it is the cache's staleness.",
	}, []string{"kind"})
	m.Objects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wasmreconcile_informer_objects",
		Help: "Objects the informers of a kind hold: the last list's count plus the watch's adds minus its deletes. With sharding, this replica's share.",
	}, []string{"kind"})
	var err error
	m.ListPages = promreg.Register(reg, m.ListPages, &err)
	m.ListObjects = promreg.Register(reg, m.ListObjects, &err)
	m.ListDuration = promreg.Register(reg, m.ListDuration, &err)
	m.ListExpired = promreg.Register(reg, m.ListExpired, &err)
	m.EmptyListVerifications = promreg.Register(reg, m.EmptyListVerifications, &err)
	m.EventsReceived = promreg.Register(reg, m.EventsReceived, &err)
	m.WatchRestarts = promreg.Register(reg, m.WatchRestarts, &err)
	m.LastEvent = promreg.Register(reg, m.LastEvent, &err)
	m.Objects = promreg.Register(reg, m.Objects, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Collectors returns m's collectors, for checks of what dashboards and
// alert rules may reference.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ListPages, m.ListObjects, m.ListDuration, m.ListExpired, m.EmptyListVerifications, m.EventsReceived, m.WatchRestarts, m.LastEvent, m.Objects}
}
