package reconciler

import (
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// stormState is one object's storm damping, kept in its objectState.
type stormState struct {
	fingerprint uint64      // of generation, observed children (kinds, names, resourceVersions) and module digest; 0 for none
	noops       []time.Time // unchanged reconciles within the window
	quiescent   bool
	lastCall    time.Time
}

// admit decides whether to call the guest now. While quiescent with the same
// fingerprint it returns false and how long to wait; a change ends
// quiescence.
func (st *stormState) admit(opts policy.Storm, fingerprint uint64, now time.Time) (bool, time.Duration) {
	if !st.quiescent {
		return true, 0
	}
	if st.fingerprint != fingerprint {
		st.quiescent, st.noops = false, nil // a real change: resume at once
		return true, 0
	}
	if wait := st.lastCall.Add(opts.Backoff).Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// record notes a guest call's outcome and reports whether it starts a storm.
func (st *stormState) record(opts policy.Storm, fingerprint uint64, changed bool, now time.Time) (storm bool, count int) {
	st.lastCall = now
	if changed || st.fingerprint != fingerprint {
		st.fingerprint, st.noops, st.quiescent = fingerprint, nil, false
		return false, 0
	}
	st.noops = append(st.noops, now)
	for len(st.noops) > 0 && now.Sub(st.noops[0]) > opts.Window {
		st.noops = st.noops[1:]
	}
	if !st.quiescent && len(st.noops) >= opts.Threshold {
		st.quiescent = true
		return true, len(st.noops)
	}
	return false, 0
}

// stormFingerprint hashes what a storm's calls must share: the object's
// generation, its observed children's fingerprint and the module version.
// It is never 0, which stands for none.
func stormFingerprint(generation int64, children, digest string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var gen [8]byte
	binary.LittleEndian.PutUint64(gen[:], uint64(generation))
	_, _ = h.Write(gen[:])
	_, _ = h.WriteString(children)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(digest)
	return h.Sum64() | 1
}
