package engine

import (
	"context"
	"encoding/binary"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
)

// The fuel that host functions charge for the work they do for a guest. A
// host function charges on entry, before the work, after checking the call's
// context and deadline; a long one (cache_read over a big list) charges and
// checks again as it goes. The units are the instrumenter's: about one wasm
// instruction, see docs/metering.md for the measured time per unit.
const (
	// HostCallCost is charged by every host function call, WASI included:
	// the exit from machine code into Go and back.
	HostCallCost = 1024
	// HostByteCost is charged per byte a host function reads from or writes
	// to guest memory, or hands on (a log line, a random buffer, a write to
	// stderr).
	HostByteCost = 1
	// RandomByteCost is charged per byte of random_get: the source makes
	// each.
	RandomByteCost = 4
	// IovecCost is charged per iovec of fd_read, fd_write, fd_pread and
	// fd_pwrite, and per subscription of poll_oneoff.
	IovecCost = 128
	// CacheReadCost is charged by every cache_read on top of its bytes and
	// objects: it decodes and checks the request.
	CacheReadCost = 4096
	// LogLineCost is charged per guest log line on top of its bytes: the
	// logger formats and writes it.
	LogLineCost = 2048
)

// wasiMeter charges WASI host functions. It is a wazero function listener
// registered only on the WASI host module, so guest functions carry no
// listener and run at full speed.
type wasiMeter struct{}

// NewFunctionListener implements experimental.FunctionListenerFactory.
func (wasiMeter) NewFunctionListener(api.FunctionDefinition) experimental.FunctionListener {
	return wasiMeter{}
}

// Before charges the call before the WASI function runs; a panic here stops
// the guest call like a refuel does.
func (wasiMeter) Before(ctx context.Context, mod api.Module, def api.FunctionDefinition, params []uint64, _ experimental.StackIterator) {
	meter.Charge(ctx, HostCallCost+wasiWork(mod, def.Name(), params))
}

// After implements experimental.FunctionListener.
func (wasiMeter) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

// Abort implements experimental.FunctionListener.
func (wasiMeter) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// wasiWork is the proportional part of a WASI call's charge: the bytes it
// moves and the entries it walks. A bad pointer charges nothing more here;
// the function itself answers EFAULT.
func wasiWork(mod api.Module, name string, params []uint64) uint64 {
	switch name {
	case "fd_write", "fd_read", "fd_pread", "fd_pwrite":
		if len(params) < 3 {
			return 0
		}
		return iovecWork(mod, uint32(params[1]), uint32(params[2]))
	case "random_get":
		if len(params) < 2 {
			return 0
		}
		return uint64(uint32(params[1])) * RandomByteCost
	case "poll_oneoff":
		if len(params) < 3 {
			return 0
		}
		return uint64(uint32(params[2])) * IovecCost
	}
	// The rest move a bounded few bytes: the sandbox has no arguments,
	// environment, preopens or files for args_get, environ_get,
	// fd_prestat_dir_name, fd_readdir or path_readlink to copy out.
	return 0
}

// iovecWork charges an iovec array: IovecCost per entry plus the bytes the
// entries name.
func iovecWork(mod api.Module, iovs, count uint32) uint64 {
	work := uint64(count) * IovecCost
	mem := mod.Memory()
	if mem == nil {
		return work
	}
	if uint64(count)*8 > uint64(mem.Size()) {
		return work // out of range: the function answers EFAULT
	}
	buf, ok := mem.Read(iovs, count*8)
	if !ok {
		return work
	}
	var bytes uint64
	for i := uint32(0); i < count; i++ {
		bytes += uint64(binary.LittleEndian.Uint32(buf[i*8+4:]))
	}
	// No call moves more than the guest's memory; lengths past it fail.
	return work + min(bytes, uint64(mem.Size()))*HostByteCost
}
