package reconciler

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// Damping per trigger source. A trigger-caused call is charged to the
// related object that caused it, never to its owner: one related object
// that changes without end (a churning ServiceAccount under an `all`
// trigger) is damped by itself, at most one fan-out per Storm.Backoff once
// it has fanned out more than Storm.Threshold times within Storm.Window,
// while every other source (the owner's own changes, other related
// objects) still reaches the owner at once. A triggered call also never
// counts toward its owner's storm, and is not held by it: the owner's
// quiescence is for reconciles that carry no change, and a related
// object's change is one.

// sourceDamper keeps the fan-out history of each trigger source.
type sourceDamper struct {
	opts policy.Storm
	mu   sync.Mutex
	srcs map[string]*sourceState
}

type sourceState struct {
	fanouts   []time.Time // fan-outs within the window
	quiescent bool
	last      time.Time       // the last fan-out
	pending   bool            // a deferred fan-out is scheduled
	latest    []client.Object // the objects of the last event damped: the deferred fan-out maps them
}

func newSourceDamper(opts policy.Storm) *sourceDamper {
	return &sourceDamper{opts: opts.WithDefaults(), srcs: map[string]*sourceState{}}
}

// admit decides what to do with an event of source at now: fan out now;
// or, for a quiescent source, defer the fan-out by the returned delay
// (schedule is true when no deferred fan-out is scheduled yet, so the
// caller schedules one; false when one is, and this event rides on it).
// started is true when this event made the source quiescent.
func (d *sourceDamper) admit(source string, now time.Time, objs []client.Object) (fanOut bool, delay time.Duration, schedule, started bool) {
	if d.opts.Disabled {
		return true, 0, false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.srcs[source]
	if st == nil {
		st = &sourceState{}
		d.srcs[source] = st
	}
	for len(st.fanouts) > 0 && now.Sub(st.fanouts[0]) > d.opts.Window {
		st.fanouts = st.fanouts[1:]
	}
	if st.quiescent && len(st.fanouts) == 0 && now.Sub(st.last) > d.opts.Backoff && !st.pending {
		st.quiescent = false // quiet for a whole window and backoff: a fresh start
	}
	if !st.quiescent && len(st.fanouts) >= d.opts.Threshold {
		st.quiescent, started = true, true
	}
	if !st.quiescent {
		st.fanouts = append(st.fanouts, now)
		st.last = now
		return true, 0, false, started
	}
	if wait := st.last.Add(d.opts.Backoff).Sub(now); wait > 0 {
		st.latest = objs
		if st.pending {
			return false, 0, false, started
		}
		st.pending = true
		return false, wait, true, started
	}
	st.fanouts = append(st.fanouts, now)
	st.last = now
	return true, 0, false, started
}

// fired records the deferred fan-out of source at now, and returns the
// objects of the last event it stands for.
func (d *sourceDamper) fired(source string, now time.Time) []client.Object {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.srcs[source]
	if st == nil {
		return nil
	}
	st.pending = false
	st.last = now
	st.fanouts = append(st.fanouts, now)
	objs := st.latest
	st.latest = nil
	return objs
}

// forget drops source's history: its object was deleted.
func (d *sourceDamper) forget(source string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if st := d.srcs[source]; st != nil && !st.pending {
		delete(d.srcs, source)
	}
}
