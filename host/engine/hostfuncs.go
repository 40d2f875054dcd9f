package engine

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
)

// maxLogLine caps one guest log line; longer lines are truncated.
const maxLogLine = 4096

// maxCacheResult caps one cache_read result.
const maxCacheResult = 16 << 20

// CacheReader serves a guest's cache reads (abi.ImportCacheRead); package
// cacheread implements it.
type CacheReader interface {
	Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte)
}

type cacheReaderKey struct{}

// WithCacheReader returns a context whose calls into a module serve cache
// reads from r. Without one, cache reads answer abi.CacheUnavailable.
func WithCacheReader(ctx context.Context, r CacheReader) context.Context {
	return context.WithValue(ctx, cacheReaderKey{}, r)
}

// instantiateHostModule provides the functions of abi.ImportModule.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(guestLog), []api.ValueType{i32, i32, i32}, nil).
		WithParameterNames("level", "ptr", "len").
		Export(abi.ImportLog).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(cacheRead), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{api.ValueTypeI64}).
		WithParameterNames("req_ptr", "req_len", "buf", "buf_limit").
		Export(abi.ImportCacheRead).
		Instantiate(ctx)
	return err
}

// cacheRead implements abi.ImportCacheRead. A request or buffer outside
// guest memory is an ABI violation and stops the call.
func cacheRead(ctx context.Context, mod api.Module, stack []uint64) {
	reqPtr, reqLen, buf, limit := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	meter.Charge(ctx, CacheReadCost+uint64(reqLen)*HostByteCost)
	req, ok := mod.Memory().Read(reqPtr, reqLen)
	if !ok {
		panic(&ABIError{Reason: fmt.Sprintf("cache_read request at %d+%d is outside guest memory", reqPtr, reqLen)})
	}
	status, out := abi.CacheUnavailable, []byte("this host provides no cache to the call")
	if r, ok := ctx.Value(cacheReaderKey{}).(CacheReader); ok {
		status, out = r.Read(ctx, append([]byte(nil), req...))
	}
	if len(out) > maxCacheResult {
		status, out = abi.CacheError, []byte(fmt.Sprintf("result of %d bytes is over the %d-byte limit of one read; narrow the list with a namespace or label selector", len(out), maxCacheResult))
	}
	if uint32(len(out)) <= limit && len(out) > 0 {
		meter.Charge(ctx, uint64(len(out))*HostByteCost)
		if !mod.Memory().Write(buf, out) {
			panic(&ABIError{Reason: fmt.Sprintf("cache_read buffer at %d+%d is outside guest memory", buf, limit)})
		}
	}
	stack[0] = uint64(status)<<32 | uint64(len(out))
}

// guestLog writes a guest's log line to the logr.Logger in the call's context
// (see logr.NewContext), named "guest". Debug lines go to V(1). Lines over
// the call's log budget (Limits.MaxLogLines, MaxLogBytes) are dropped and
// counted.
func guestLog(ctx context.Context, mod api.Module, stack []uint64) {
	level, ptr, n := abi.LogLevel(int32(stack[0])), uint32(stack[1]), uint32(stack[2])
	truncated := false
	if n > maxLogLine {
		n, truncated = maxLogLine, true
	}
	meter.Charge(ctx, HostCallCost+LogLineCost+uint64(n)*HostByteCost)
	if st := callStateFrom(ctx); st != nil && !st.admitLog(int(n)) {
		return
	}
	buf, ok := mod.Memory().Read(ptr, n)
	log := logr.FromContextOrDiscard(ctx).WithName("guest")
	if !ok {
		log.Info("guest passed an out-of-range log buffer", "ptr", ptr, "len", n)
		return
	}
	msg := string(buf)
	if truncated {
		msg += "…(truncated)"
	}
	switch level {
	case abi.LogLevelDebug:
		log.V(1).Info(msg)
	case abi.LogLevelWarn:
		log.Info(msg, "guestLevel", "warn")
	case abi.LogLevelError:
		log.Error(nil, msg)
	default:
		log.Info(msg)
	}
}

// callState is what the host functions of one call share: its log budget.
// A call runs on one goroutine, so it needs no lock.
type callState struct {
	maxLines, maxBytes    int
	lines, bytes          int
	droppedLines, dropped int // lines and bytes over the budget
}

type callStateKey struct{}

func withCallState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, callStateKey{}, st)
}

func callStateFrom(ctx context.Context) *callState {
	st, _ := ctx.Value(callStateKey{}).(*callState)
	return st
}

// admitLog counts a line of n bytes and reports whether it fits the budget.
func (st *callState) admitLog(n int) bool {
	if st.lines+1 > st.maxLines || st.bytes+n > st.maxBytes {
		st.droppedLines++
		st.dropped += n
		return false
	}
	st.lines++
	st.bytes += n
	return true
}

// reportDropped logs, once at the end of a call, how much of the guest's log
// the budget dropped.
func (st *callState) reportDropped(ctx context.Context, module, call string) {
	if st.droppedLines == 0 {
		return
	}
	logr.FromContextOrDiscard(ctx).WithName("guest").Info(fmt.Sprintf(
		"module[%s] %s: dropped %d log lines (%d bytes) over the per-call budget of %d lines and %d bytes; log less, or raise --max-log-lines and --max-log-bytes",
		module, call, st.droppedLines, st.dropped, st.maxLines, st.maxBytes))
}
