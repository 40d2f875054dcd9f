//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// spareTape is the last call's tape, reused by the next: a request's values
// are dead once its handler returns, and a module runs one call at a time
// (the host never enters an instance twice), so one slot does what a
// sync.Pool would, without linking package sync.
var spareTape *jsontree.Tape

func getTape() *jsontree.Tape {
	t := spareTape
	spareTape = nil
	if t == nil {
		t = &jsontree.Tape{}
	}
	return t
}

func putTape(t *jsontree.Tape) { spareTape = t }

//go:wasmimport wasmreconcile log
func wasmLog(level int32, ptr unsafe.Pointer, length uint32)

func hostLog(level abi.LogLevel, msg string) {
	if len(msg) == 0 {
		return
	}
	wasmLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

// input is the buffer the host last allocated; output is the last result. Both
// are package variables so the Go GC keeps them alive while the host reads or
// writes them.
var input, output []byte

//go:wasmexport wr_abi_v1
func wrABIv1() {}

//go:wasmexport wr_alloc
func wrAlloc(size uint32) uint32 {
	if size == 0 {
		input = input[:0]
		return 0
	}
	// The last request's buffer serves again when it fits and is not much
	// larger: a request is dead once its call returns (handlers must not
	// retain it), and a fresh buffer per call would be garbage to collect.
	if n := cap(input); int(size) <= n && n <= 4*int(size)+4096 {
		input = input[:size]
	} else {
		input = make([]byte, size)
	}
	return uint32(uintptr(unsafe.Pointer(&input[0])))
}

//go:wasmexport wr_manifest
func wrManifest() uint64 {
	return uint64(publish(manifestJSON()))
}

//go:wasmexport wr_reconcile
func wrReconcile(ptr unsafe.Pointer, length uint32) uint64 {
	var req []byte
	if length > 0 {
		req = unsafe.Slice((*byte)(ptr), length)
	}
	// The last response's buffer serves again: the host copied it out
	// when the previous call returned.
	if cap(output) > maxKeptOutput {
		output = nil
	}
	return uint64(publish(dispatchInto(output[:0], req)))
}

// maxKeptOutput bounds the response buffer kept for the next call.
const maxKeptOutput = 1 << 20

func publish(b []byte) abi.PackedBuffer {
	output = b
	if len(b) == 0 {
		return 0
	}
	return abi.Pack(uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b)))
}

// TakeLogs returns nil in wasm builds, where log lines go to the host. In
// native builds (unit tests) it returns and clears the lines logged so far.
func TakeLogs() []LogLine { return nil }

//go:wasmimport wasmreconcile cache_read
func wasmCacheRead(reqPtr unsafe.Pointer, reqLen uint32, buf unsafe.Pointer, bufLimit uint32) uint64

// cacheBuf is reused across reads; it grows to the largest result seen.
var cacheBuf = make([]byte, 64<<10)

func cacheRead(req abi.CacheRequest) (abi.CacheStatus, []byte) {
	b := appendCacheRequest(nil, &req)
	for {
		packed := abi.PackedBuffer(wasmCacheRead(unsafe.Pointer(&b[0]), uint32(len(b)), unsafe.Pointer(&cacheBuf[0]), uint32(len(cacheBuf))))
		status, n := abi.CacheStatus(packed.Ptr()), int(packed.Len())
		if n <= len(cacheBuf) {
			return status, append([]byte(nil), cacheBuf[:n]...)
		}
		cacheBuf = make([]byte, n) // too small: grow and ask again
	}
}
