package informer

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Informer metrics, by kind; see docs/metrics.md.
var (
	ListPages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_pages_total",
		Help: "LIST pages received by informers, by kind.",
	}, []string{"kind"})
	ListObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_objects_total",
		Help: "Objects received in LIST pages by informers, by kind.",
	}, []string{"kind"})
	ListDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmreconcile_informer_list_duration_seconds",
		Help:    "Duration of a whole paginated list (all pages), by kind.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. 41 s
	}, []string{"kind"})
	ListExpired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_list_expired_total",
		Help: "Expired continue tokens during a paginated list (each is followed by a full list), by kind.",
	}, []string{"kind"})
	EmptyListVerifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_empty_list_verifications_total",
		Help: "Empty lists of a kind that had objects, re-listed before the cache acted on them, by kind and outcome (confirmed: still empty; refuted: objects came back).",
	}, []string{"kind", "outcome"})
	EventsReceived = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_events_total",
		Help: "Watch events received by informers, by kind and type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).",
	}, []string{"kind", "type"})
	WatchRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_informer_watch_restarts_total",
		Help: "Watches reopened by informers, by kind and the reason the previous one ended (eof, timeout, gone, error).",
	}, []string{"kind", "reason"})
	LastEvent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "wasmreconcile_informer_last_event_timestamp_seconds",
		Help: "Unix time of the last watch event (bookmarks included) or completed list per kind; time() minus it is the cache's staleness.",
	}, []string{"kind"})
)

func init() {
	crmetrics.Registry.MustRegister(ListPages, ListObjects, ListDuration, ListExpired, EmptyListVerifications, EventsReceived, WatchRestarts, LastEvent)
}

// Collectors returns the collectors of this package, for checks of what
// dashboards and alert rules may reference.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{ListPages, ListObjects, ListDuration, ListExpired, EmptyListVerifications, EventsReceived, WatchRestarts, LastEvent}
}
