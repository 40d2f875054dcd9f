// Package ratelimit builds the workqueue rate limiter of a module's
// controller from client-go's own limiters: per-item exponential backoff
// for failures, combined (the slower wins) with an overall token bucket.
package ratelimit

import (
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// New returns max(per-item exponential backoff, token bucket), paced by
// rl; zero fields take policy's defaults, which are controller-runtime's.
func New(rl policy.RateLimit) workqueue.TypedRateLimiter[reconcile.Request] {
	o := rl.WithDefaults()
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](o.BaseDelay, o.MaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(o.QPS), o.Burst)},
	)
}
