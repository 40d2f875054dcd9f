package supervisor

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
)

// rollout decides the candidate part of a module's rollout (candidate.go
// fetches and compiles it): a candidate runs beside the serving version
// on the same requests (its shadow), may serve a share of the objects (a
// canary), and ends in one of the ways of ending. Its methods run under
// the supervisor's lock, on the running module given; what is slow (a
// shadow's workers stopping, a version retiring once its calls finish)
// runs in goroutines counted by goroutines.
type rollout struct {
	metrics    *metrics.Metrics
	goroutines *sync.WaitGroup
	// requeueAll requeues every object of a module into its running
	// controller: a canary's objects change hands at once, not at their
	// next event.
	requeueAll func(r *running)
}

// ending is how a candidate ends.
type ending int

const (
	// dropped: stopped (SetCandidate with no spec, a replacement that
	// failed, Remove). Its version is closed unless the module keeps it;
	// a canary's objects go back to the serving version at once.
	dropped ending = iota
	// closing: the supervisor closes; as dropped, with no requeue.
	closing
	// restarted: the module's controller is replaced; the new one starts
	// without a candidate (its rules may differ) and lists every object.
	// Its version is closed unless it is the one about to serve.
	restarted
	// promoted: its version serves now, and is kept.
	promoted
)

// current reports whether c is r's running candidate already: the same
// bytes, limits and options. Nothing needs to change.
func (ro *rollout) current(r *running, c *candidate) bool {
	prev := r.candidate
	return prev != nil && prev.key == c.key && reflect.DeepEqual(prev.opts, c.opts)
}

// compiled returns r's compiled version of key (digest and limits): one
// it keeps (it served before) or its candidate's (the same bytes under
// other options); nil for none.
func (ro *rollout) compiled(r *running, key string) *versionslot.Version {
	for _, kept := range r.versions {
		if kept.key == key {
			return kept.version
		}
	}
	if c := r.candidate; c != nil && c.key == key {
		return c.version
	}
	return nil
}

// install makes c r's candidate, in place of the one before, if c's
// module is the same module (name, kinds, triggers, finalizer) as
// serving; name labels its metrics. The candidate before ends: its
// version is closed unless c runs on it. A canary's objects, the new
// one's or the one before's, change hands at once.
func (ro *rollout) install(name string, r *running, c *candidate, serving *versionslot.Version) error {
	if err := sameKinds(serving.Module, c.version.Module); err != nil {
		return fmt.Errorf("%w; a candidate must be the same module with the same kinds, triggers and finalizer (change those with a new spec.source instead)", err)
	}
	opts := c.opts
	opts.Observe = func(result string) { ro.metrics.Shadow.WithLabelValues(name, result).Inc() }
	for _, res := range []string{"agree", "differ", "candidate_error", "skipped"} {
		ro.metrics.Shadow.WithLabelValues(name, res)
	}
	c.shadow = shadow.New(c.version.Module, r.rec.Decoder(), opts)
	prev := r.candidate
	r.candidate = c
	r.rec.SetShadow(c.shadow)
	if prev != nil {
		ro.stop(r, prev, prev.version != c.version)
	}
	if c.opts.Canary != nil || (prev != nil && prev.opts.Canary != nil) {
		ro.requeueAll(r)
	}
	return nil
}

// end ends r's candidate, if it has one, as how says; serving is the
// version about to serve (restarted only).
func (ro *rollout) end(r *running, how ending, serving *versionslot.Version) {
	c := r.candidate
	if c == nil {
		return
	}
	r.candidate = nil
	if r.rec != nil && r.rec.Shadow() == c.shadow {
		r.rec.SetShadow(nil)
	}
	switch how {
	case dropped, closing:
		ro.stop(r, c, true)
	case restarted:
		ro.stop(r, c, c.version != serving)
	case promoted:
		ro.stop(r, c, false)
	}
	if how == dropped && c.opts.Canary != nil {
		ro.requeueAll(r)
	}
}

// stop stops c's workers and, when retire is set and r's versions do not
// hold its version (a promotion made it serve), closes the version once
// its calls finish, in the background.
func (ro *rollout) stop(r *running, c *candidate, retire bool) {
	if retire {
		for _, kept := range r.versions {
			if kept.version == c.version {
				retire = false
			}
		}
	}
	ro.goroutines.Add(1)
	go func() {
		defer ro.goroutines.Done()
		c.shadow.Close()
		if retire {
			_ = c.version.Retire(context.Background())
		}
	}()
}

// status describes r's running candidate.
func (ro *rollout) status(r *running) (CandidateStatus, bool) {
	c := r.candidate
	if c == nil {
		return CandidateStatus{}, false
	}
	return CandidateStatus{Digest: c.digest, Since: c.since, Stats: c.shadow.Stats(), Canary: c.opts.Canary.String()}, true
}
