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
	"context"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/experimental"
)

// pageSize is the host page size the memory is faulted in by, and chunk the
// bytes faulted in between two checks of the call's deadline.
const (
	pageSize = 4096
	chunk    = 1 << 20
)

// Memory is one linear memory. It implements experimental.LinearMemory.
type Memory struct {
	mu  sync.Mutex
	buf []byte // the whole reservation (len == the maximum), or the Go slice of the fallback
	max uint64 // the maximum

	mapped   bool   // buf is an mmap reservation, not Go heap
	calls    int    // Enter without Exit
	freed    bool   // Free was called
	released bool   // the reservation was returned
	touched  uint64 // bytes faulted in so far

	// The running call's context and deadline: faulting in stops early
	// when either ends.
	ctx      context.Context
	deadline time.Time
}

// New reserves max bytes. When the platform cannot map memory (or the
// kernel refuses the reservation), it falls back to a Go slice that grows by
// copying, as wazero's own memory does: slower to grow, but it never asks
// for the maximum at once.
func New(max uint64) *Memory {
	if buf, ok := mmap(max); ok {
		return &Memory{buf: buf, max: max, mapped: true}
	}
	return &Memory{max: max}
}

// Reallocate implements experimental.LinearMemory: it returns the first size
// bytes of the reservation, or nil when size is over the maximum (the grow
// then fails inside the guest).
//
// It faults the new pages in before it returns, a chunk at a time, checking
// the running call's context and deadline between chunks. First touch is the
// dear part of memory (on this project's machine, a VM, about 14 µs per
// 4 KiB page taken one fault at a time), and a guest that touches fresh
// memory does so in instructions that cost one unit of fuel each. Faulting
// in at the grow puts that time where it is charged
// (instrument.MemoryGrowPageCost) and where the deadline is checked: the
// instrumenter calls refuel after every successful grow. When the call's
// time is up, the rest is left to fault in on first touch, and the refuel
// after the grow stops the call. Each chunk is faulted in by the kernel in
// one madvise(MADV_POPULATE_WRITE) where Linux offers it (about 0.5 µs per
// page here), else by touching every page. The memory an instance starts
// with is faulted in the same way, at instantiation.
func (m *Memory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released || size > m.max {
		return nil
	}
	if !m.mapped {
		if size > uint64(cap(m.buf)) {
			grown := make([]byte, size, min(max(2*size, 1<<20), m.max))
			copy(grown, m.buf)
			m.buf = grown
		}
		m.buf = m.buf[:size]
		return m.buf
	}
	for m.touched < size {
		if m.ctx != nil && m.ctx.Err() != nil || !m.deadline.IsZero() && !time.Now().Before(m.deadline) {
			break
		}
		end := min(m.touched+chunk, size)
		if !populate(m.buf[m.touched:end]) {
			for off := m.touched; off < end; off += pageSize {
				m.buf[off] = 0
			}
		}
		m.touched = end
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

// Enter marks a call running in the memory until ctx ends or deadline
// passes (zero: none). A nil Memory is ignored.
func (m *Memory) Enter(ctx context.Context, deadline time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.calls++
	m.ctx, m.deadline = ctx, deadline
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
	m.ctx, m.deadline = nil, time.Time{}
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
	// Ctx and Deadline bound the instantiation, as Enter's do a call.
	Ctx      context.Context
	Deadline time.Time
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
	a.Memory.ctx, a.Memory.deadline = a.Ctx, a.Deadline
	return a.Memory
}
