// Package versionslot holds the version of a module that serves a
// controller's reconciles, and swaps it between reconciles.
//
// A Slot has at most one current Version. A reconcile Acquires the current
// version, calls it, and Releases it. Swap makes another version current for
// every reconcile that starts after it; calls already running finish on the
// version they acquired. Retire waits until a version's calls have all
// released it, then closes its module: a swap never cuts a call short, and a
// module is never closed under a running call. Close empties the slot: from
// then on Acquire reports false at once, so the workers of a removed module
// return instead of waiting for a version that will never come.
package versionslot

import (
	"context"
	"errors"
	"sync"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// Version is one loaded version of a module.
type Version struct {
	Module *engine.Module

	closeModule func(context.Context) error // Module.Close; tests replace it
	mu          sync.Mutex
	calls       int           // acquired and not yet released
	retiring    bool          // Retire was called: no more acquisitions
	idle        chan struct{} // closed when retiring and calls reach 0
	closeOnce   sync.Once
	closed      bool
	closeErr    error
}

// New wraps a loaded module.
func New(m *engine.Module) *Version {
	return &Version{Module: m, closeModule: m.Close, idle: make(chan struct{})}
}

// Release ends a call that Acquire started.
func (v *Version) Release() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls--
	if v.calls < 0 {
		panic("versionslot: Release without Acquire")
	}
	if v.retiring && v.calls == 0 {
		close(v.idle)
	}
}

// Hold keeps v from closing, as a call Acquired on it does, until the
// returned func is called (once; more calls do nothing). It reports false
// once v is retiring. Work that outlives the call it comes from (a flight
// recorder's replay) holds the version it runs on.
func (v *Version) Hold() (release func(), ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.retiring {
		return nil, false
	}
	v.calls++
	var once sync.Once
	return func() { once.Do(v.Release) }, true
}

// Retiring reports whether Retire was called.
func (v *Version) Retiring() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.retiring
}

// Closed reports whether v's module is closed.
func (v *Version) Closed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed
}

// Calls reports how many calls hold v now.
func (v *Version) Calls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls
}

// Retire stops new calls on v, waits for the running ones to release it,
// and closes its module. It returns ctx's error if ctx ends first (the
// module is then closed later, when the last call releases it). The caller
// must have swapped v out of every slot first: a slot never hands out a
// retired version. Retiring twice is harmless.
func (v *Version) Retire(ctx context.Context) error {
	v.mu.Lock()
	if !v.retiring {
		v.retiring = true
		if v.calls == 0 {
			close(v.idle)
		}
	}
	v.mu.Unlock()
	select {
	case <-v.idle:
	case <-ctx.Done():
		go func() { <-v.idle; v.close() }()
		return ctx.Err()
	}
	return v.close()
}

func (v *Version) close() error {
	v.closeOnce.Do(func() {
		err := v.closeModule(context.Background())
		v.mu.Lock()
		v.closed, v.closeErr = true, err
		v.mu.Unlock()
	})
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closeErr
}

// Slot holds the current version of one module's controller. It is safe
// for concurrent use.
type Slot struct {
	mu      sync.Mutex
	current *Version
	closed  bool
}

// NewSlot returns a slot serving v.
func NewSlot(v *Version) *Slot { return &Slot{current: v} }

// ErrClosed is returned by Swap on a closed slot.
var ErrClosed = errors.New("versionslot: the slot is closed")

// Acquire returns the current version for one call; the caller calls
// Release on it when the call ends. It reports false, at once, when the
// slot is closed.
func (s *Slot) Acquire() (*Version, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.current == nil {
		return nil, false
	}
	v := s.current
	v.mu.Lock()
	if v.retiring {
		// The caller retired the current version without swapping it out:
		// a bug, but never hand out a version that is being closed.
		v.mu.Unlock()
		return nil, false
	}
	v.calls++
	v.mu.Unlock()
	return v, true
}

// Current is the version that serves new calls, or nil once closed.
func (s *Slot) Current() *Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.current
}

// Swap makes v serve every call that starts from now on and returns the
// version it replaces; calls running on that one finish on it.
func (s *Slot) Swap(v *Version) (*Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	old := s.current
	s.current = v
	return old, nil
}

// Close empties the slot: Acquire reports false from now on. It returns the
// version that was current, for the caller to retire or keep.
func (s *Slot) Close() *Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	v := s.current
	s.current = nil
	return v
}
