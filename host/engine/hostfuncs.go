package engine

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// maxLogLine caps one guest log line; longer lines are truncated.
const maxLogLine = 4096

// instantiateHostModule provides the functions of abi.ImportModule.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(guestLog), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).
		WithParameterNames("level", "ptr", "len").
		Export(abi.ImportLog).
		Instantiate(ctx)
	return err
}

// guestLog writes a guest's log line to the logr.Logger in the call's context
// (see logr.NewContext), named "guest". Debug lines go to V(1).
func guestLog(ctx context.Context, mod api.Module, stack []uint64) {
	level, ptr, n := abi.LogLevel(int32(stack[0])), uint32(stack[1]), uint32(stack[2])
	truncated := false
	if n > maxLogLine {
		n, truncated = maxLogLine, true
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
		log.Info(msg, "level", "warn")
	case abi.LogLevelError:
		log.Error(nil, msg)
	default:
		log.Info(msg)
	}
}
