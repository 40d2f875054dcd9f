package reconciler

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// EventBudget bounds the Events a module's guest records (Response.events):
// every Event takes a token from its object's bucket and one from the
// module's, and an Event either bucket cannot pay for is dropped and
// counted (wasmreconcile_events_dropped_total). The host's own Warning
// Events (a failed reconcile, a storm) are not budgeted: the workqueue's
// retry backoff already paces them, and a guest that spends its budget must
// not hide its own failures. Zero fields take the stated defaults.
type EventBudget struct {
	// ObjectQPS is the rate at which an object's bucket refills, in Events
	// per second. Defaults to 0.1: one Event per 10 seconds.
	ObjectQPS float64
	// ObjectBurst is the size of an object's bucket: the Events an object
	// that recorded none for a while may record at once. Defaults to 10,
	// the most one response may ask for (protocol.DefaultMaxEvents).
	ObjectBurst int
	// ModuleQPS is the rate at which the module's bucket refills.
	// Defaults to 10 Events per second.
	ModuleQPS float64
	// ModuleBurst is the size of the module's bucket. Defaults to 100.
	ModuleBurst int
	// Disabled records every Event. Defaults to false.
	Disabled bool
}

// Defaults of EventBudget.
const (
	DefaultEventObjectQPS   = 0.1
	DefaultEventObjectBurst = 10
	DefaultEventModuleQPS   = 10
	DefaultEventModuleBurst = 100
)

// maxEventBuckets caps the per-object buckets kept, whatever the budget.
const maxEventBuckets = 100_000

func (b EventBudget) withDefaults() EventBudget {
	if b.ObjectQPS <= 0 {
		b.ObjectQPS = DefaultEventObjectQPS
	}
	if b.ObjectBurst <= 0 {
		b.ObjectBurst = DefaultEventObjectBurst
	}
	if b.ModuleQPS <= 0 {
		b.ModuleQPS = DefaultEventModuleQPS
	}
	if b.ModuleBurst <= 0 {
		b.ModuleBurst = DefaultEventModuleBurst
	}
	return b
}

// Drop reasons, the reason label of wasmreconcile_events_dropped_total.
const (
	dropObject = "object"
	dropModule = "module"
)

// eventLimiter holds a module's Event buckets: golang.org/x/time/rate token
// buckets, one for the module and one per object that recorded an Event
// recently.
//
// The per-object buckets are kept in an LRU whose size is derived from the
// budget so that it never forgets a bucket that is not full: an object's
// bucket is created or drawn from only by an Event the module's bucket paid
// for, so within the time an object's bucket takes to refill from empty
// (ObjectBurst/ObjectQPS, 100 s by default) at most ModuleBurst +
// ModuleQPS x that time objects (1,100 by default) can have touched theirs.
// The least recently used bucket beyond that many was last touched longer
// ago than a refill, so it is full, the same as a new one: evicting it
// loses nothing. An absurd budget is still capped at maxEventBuckets.
type eventLimiter struct {
	budget EventBudget

	mu      sync.Mutex // makes each decision atomic over both buckets
	module  *rate.Limiter
	objects *lru.Cache // types.NamespacedName -> *rate.Limiter
}

func newEventLimiter(b EventBudget) *eventLimiter {
	b = b.withDefaults()
	refill := float64(b.ObjectBurst) / b.ObjectQPS // seconds for an empty object bucket to fill
	size := float64(b.ModuleBurst) + b.ModuleQPS*refill + 1
	return &eventLimiter{
		budget:  b,
		module:  rate.NewLimiter(rate.Limit(b.ModuleQPS), b.ModuleBurst),
		objects: lru.New(int(min(size, maxEventBuckets))),
	}
}

// allow takes a token for one Event on key from the module's bucket and the
// object's, or from neither. It returns "" when the Event may be recorded,
// else the reason it is dropped: dropModule or dropObject (when both are
// empty, the module's bucket is named).
func (l *eventLimiter) allow(key types.NamespacedName, now time.Time) string {
	if l.budget.Disabled {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.module.TokensAt(now) < 1 {
		return dropModule
	}
	var obj *rate.Limiter
	if v, ok := l.objects.Get(key); ok {
		obj = v.(*rate.Limiter)
	} else {
		obj = rate.NewLimiter(rate.Limit(l.budget.ObjectQPS), l.budget.ObjectBurst)
		l.objects.Add(key, obj)
	}
	if !obj.AllowN(now, 1) {
		return dropObject
	}
	l.module.AllowN(now, 1) // cannot fail: checked above under l.mu
	return ""
}

// forget drops key's bucket, for an object that is gone.
func (l *eventLimiter) forget(key types.NamespacedName) { l.objects.Remove(key) }

// buckets is the number of per-object buckets kept.
func (l *eventLimiter) buckets() int { return l.objects.Len() }
