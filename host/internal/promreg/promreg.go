// Package promreg registers Prometheus collectors on a registerer that may
// hold them already: a second host, or a second cache, in one process
// counts into the collectors the first one registered.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or the collector reg holds
// already under c's descriptors; any other error is joined into *err.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C, err *error) C {
	e := reg.Register(c)
	if e == nil {
		return c
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(e, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	*err = errors.Join(*err, e)
	return c
}
