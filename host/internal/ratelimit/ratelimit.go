// Package ratelimit builds the workqueue rate limiter of a module's
// controller from client-go's own limiters: per-item exponential backoff
// for failures, combined (the slower wins) with an overall token bucket.
package ratelimit

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options configure the limiter. Zero fields take the stated defaults,
// which are controller-runtime's own.
type Options struct {
	// BaseDelay is the first retry delay of a failing object; it doubles on
	// every failure. Defaults to 5 ms.
	BaseDelay time.Duration
	// MaxDelay caps the per-object delay. Defaults to 1000 s.
	MaxDelay time.Duration
	// QPS is the overall rate of the bucket. Defaults to 10.
	QPS float64
	// Burst is the bucket size. Defaults to 100.
	Burst int
}

// Defaults of Options.
const (
	DefaultBaseDelay = 5 * time.Millisecond
	DefaultMaxDelay  = 1000 * time.Second
	DefaultQPS       = 10
	DefaultBurst     = 100
)

func (o Options) withDefaults() Options {
	if o.BaseDelay <= 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.QPS <= 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	return o
}

// New returns max(per-item exponential backoff, token bucket).
func New(opts Options) workqueue.TypedRateLimiter[reconcile.Request] {
	o := opts.withDefaults()
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](o.BaseDelay, o.MaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(o.QPS), o.Burst)},
	)
}
