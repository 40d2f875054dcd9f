package reconciler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// objectState is everything the reconciler keeps about one object between
// its reconciles. It lives in objects, behind objects' one lock, so that
// the stages of a reconcile never see half of an update.
type objectState struct {
	attempts  int                // consecutive failed reconciles (Request.attempt)
	failures  []abi.ChildFailure // children the last sync could not write (Request.childFailures)
	warned    string             // the last terminal failure's Warning: generation, kind and note
	memo      memo               // the last call that needs no repeat (unchanged.go); valid when hasMemo
	hasMemo   bool               //
	storm     stormState         // storm damping (storm.go)
	triggered bool               // a trigger enqueued the object; its next call takes the mark
}

// idle reports whether the state holds nothing, so that its entry can go.
func (s *objectState) idle() bool {
	return s.attempts == 0 && len(s.failures) == 0 && s.warned == "" && !s.hasMemo &&
		s.storm.fingerprint == 0 && !s.triggered
}

// objects holds the objectState of every object the reconciler has seen
// and not forgotten (a deleted object is forgotten).
type objects struct {
	storm   policy.Storm // with defaults
	mu      sync.Mutex
	m       map[types.NamespacedName]*objectState
	failing int // objects whose attempts > 0
}

func newObjects(storm policy.Storm) *objects {
	return &objects{storm: storm.WithDefaults(), m: map[types.NamespacedName]*objectState{}}
}

// update runs f on key's state, creating it, and drops the state again if
// f leaves it idle.
func (s *objects) update(key types.NamespacedName, f func(st *objectState)) {
	s.change(key, true, f)
}

// clear runs f on key's state when there is one: for changes that only
// clear, so that an object with no state (most, on the hot path) costs a
// lookup and no allocation.
func (s *objects) clear(key types.NamespacedName, f func(st *objectState)) {
	s.change(key, false, f)
}

// change runs f on key's state, creating it if create, keeps the count of
// failing objects, and drops the state if f leaves it idle.
func (s *objects) change(key types.NamespacedName, create bool, f func(st *objectState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[key]
	if st == nil {
		if !create {
			return
		}
		st = &objectState{}
		s.m[key] = st
	}
	before := st.attempts > 0
	f(st)
	switch after := st.attempts > 0; {
	case before && !after:
		s.failing--
	case !before && after:
		s.failing++
	}
	if st.idle() {
		delete(s.m, key)
	}
}

// read runs f on key's state (the zero state when there is none).
func (s *objects) read(key types.NamespacedName, f func(st *objectState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[key]; st != nil {
		f(st)
		return
	}
	f(&objectState{})
}

// attempt is the number of consecutive failed reconciles of key.
func (s *objects) attempt(key types.NamespacedName) (n int) {
	s.read(key, func(st *objectState) { n = st.attempts })
	return n
}

// failed counts a failed reconcile of key.
func (s *objects) failed(key types.NamespacedName) {
	s.update(key, func(st *objectState) { st.attempts++ })
}

// succeeded resets key's attempts and its last Warning.
func (s *objects) succeeded(key types.NamespacedName) {
	s.clear(key, func(st *objectState) { st.attempts, st.warned = 0, "" })
}

// failuresOf are the child failures the guest is told of next.
func (s *objects) failuresOf(key types.NamespacedName) (f []abi.ChildFailure) {
	s.read(key, func(st *objectState) { f = st.failures })
	return f
}

func (s *objects) setFailures(key types.NamespacedName, f []abi.ChildFailure) {
	s.update(key, func(st *objectState) { st.failures = f })
}

// memoOf is key's memo, if any.
func (s *objects) memoOf(key types.NamespacedName) (m memo, ok bool) {
	s.read(key, func(st *objectState) { m, ok = st.memo, st.hasMemo })
	return m, ok
}

func (s *objects) setMemo(key types.NamespacedName, m memo) {
	s.update(key, func(st *objectState) { st.memo, st.hasMemo = m, true })
}

func (s *objects) forgetMemo(key types.NamespacedName) {
	s.clear(key, func(st *objectState) { st.memo, st.hasMemo = memo{}, false })
}

// markTriggered notes that a trigger enqueued key, and drops its memo: a
// related object changed, which the memo does not see.
func (s *objects) markTriggered(key types.NamespacedName) {
	s.update(key, func(st *objectState) { st.memo, st.hasMemo, st.triggered = memo{}, false, true })
}

// takeTriggered reports whether a trigger enqueued key since its last
// call, and clears the mark.
func (s *objects) takeTriggered(key types.NamespacedName) (ok bool) {
	s.clear(key, func(st *objectState) { ok, st.triggered = st.triggered, false })
	return ok
}

// newWarning reports whether a failure of signature sig (generation, kind
// and note) deserves a Warning Event: a terminal one that repeats the last
// terminal failure does not. A non-terminal failure forgets the last.
func (s *objects) newWarning(key types.NamespacedName, terminal bool, sig string) (warn bool) {
	s.update(key, func(st *objectState) {
		switch {
		case !terminal:
			st.warned, warn = "", true
		case st.warned == sig:
			warn = false
		default:
			st.warned, warn = sig, true
		}
	})
	return warn
}

// forget drops everything about key: the object is deleted.
func (s *objects) forget(key types.NamespacedName) {
	s.clear(key, func(st *objectState) { *st = objectState{} })
}

// notOurs drops what a reconcile of key would build on: the object is
// being deleted, and no finalizer of ours holds it.
func (s *objects) notOurs(key types.NamespacedName) {
	s.clear(key, func(st *objectState) { st.attempts, st.warned, st.memo, st.hasMemo = 0, "", memo{}, false })
}

// failingCount is the number of objects whose last reconcile failed.
func (s *objects) failingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing
}

// admitStorm decides whether to call the guest now. While quiescent with
// the same fingerprint it returns false and how long to wait; a change
// ends quiescence.
func (s *objects) admitStorm(key types.NamespacedName, fingerprint uint64, now time.Time) (ok bool, wait time.Duration) {
	if s.storm.Disabled {
		return true, 0
	}
	ok = true // an object with no state is not quiescent
	s.clear(key, func(st *objectState) { ok, wait = st.storm.admit(s.storm, fingerprint, now) })
	return ok, wait
}

// recordStorm notes a guest call's outcome and reports whether it starts a
// storm.
func (s *objects) recordStorm(key types.NamespacedName, fingerprint uint64, changed bool, now time.Time) (storm bool, count int) {
	if s.storm.Disabled {
		return false, 0
	}
	s.update(key, func(st *objectState) { storm, count = st.storm.record(s.storm, fingerprint, changed, now) })
	return storm, count
}
