package reconciler

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// maxEventBuckets caps the per-object buckets kept, whatever the budget.
const maxEventBuckets = 100_000

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
	budget policy.Events

	mu      sync.Mutex // makes each decision atomic over both buckets
	module  *rate.Limiter
	objects *lru.Cache // types.NamespacedName -> *rate.Limiter
}

func newEventLimiter(b policy.Events) *eventLimiter {
	b = b.WithDefaults()
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
