// Package linmem backs guest linear memories with address space reserved up
// front, so that memory.grow never copies and the host's resident memory
// follows the pages a guest touches, not the history of its grows.
//
// wazero's default grows a memory by appending to a Go slice: every grow
// past the slice's capacity copies the whole memory and leaves the old copy
// to the garbage collector, so a guest growing to its cap costs up to three
// times the cap in resident memory. A Memory instead maps the memory's
// maximum (the engine's cap) once, with MAP_NORESERVE: pages cost nothing
// until touched, a grow only moves the length, and Free returns everything
// to the kernel at once.
//
// A Memory may be freed while a call still runs in it (wazero frees an
// instance's memory when its module is closed, and Module.Close may race a
// call). Unmapping under a running guest would crash the process, so the
// engine brackets every call with Enter and Exit, and a Free during a call is
// carried out by the Exit that ends it.
package linmem

import (
	"sync"

	"github.com/tetratelabs/wazero/experimental"
)

// Memory is one linear memory. It implements experimental.LinearMemory.
type Memory struct {
	mu       sync.Mutex
	buf      []byte // the whole reservation: len == the maximum
	mapped   bool   // buf is an mmap reservation, not Go heap
	calls    int    // Enter without Exit
	freed    bool   // Free was called
	released bool   // the reservation was returned
}

// New reserves max bytes. When the platform cannot map memory, or max is
// zero, it falls back to a Go slice with capacity max, which the Go runtime
// also backs lazily for large sizes.
func New(max uint64) *Memory {
	if buf, ok := mmap(max); ok {
		return &Memory{buf: buf, mapped: true}
	}
	return &Memory{buf: make([]byte, max)}
}

// Reallocate implements experimental.LinearMemory: it returns the first size
// bytes of the reservation, or nil when size is over the maximum (the grow
// then fails inside the guest).
func (m *Memory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released || size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size:size]
}

// Free implements experimental.LinearMemory. During a call it only marks the
// memory; the call's Exit releases it.
func (m *Memory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.freed = true
	if m.calls == 0 {
		m.release()
	}
}

// Enter marks a call running in the memory. A nil Memory is ignored.
func (m *Memory) Enter() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
}

// Exit ends a call that Enter started, and releases the memory if it was
// freed meanwhile.
func (m *Memory) Exit() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls--
	if m.calls == 0 && m.freed {
		m.release()
	}
}

func (m *Memory) release() {
	if m.released {
		return
	}
	m.released = true
	if m.mapped {
		munmap(m.buf)
	}
	m.buf = nil
}

// Allocator records the Memory it allocates, for the engine to bracket the
// calls into that instance. Use one per instantiation.
type Allocator struct {
	// Memory is the memory allocated, or nil if the module has none.
	Memory *Memory
}

// Allocate implements experimental.MemoryAllocator. cap is ignored: the
// whole maximum is reserved at once. The instantiation that allocates counts
// as a call, because it runs the module's start function: the engine calls
// Exit when instantiation returns.
func (a *Allocator) Allocate(_, max uint64) experimental.LinearMemory {
	a.Memory = New(max)
	a.Memory.calls = 1
	return a.Memory
}
