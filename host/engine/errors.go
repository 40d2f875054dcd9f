package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The errors below are returned by Engine.Load and Module.Reconcile. Callers
// branch on them with errors.As; protocol.KindOf names each in the host's
// one vocabulary of outcomes. Every message names the module, what happened
// and what to do about it.

// InvalidModuleError reports module bytes that cannot be used: not wasm, a
// missing export, an unknown import, an unknown ABI version or a bad manifest.
type InvalidModuleError struct {
	Module string // name or source of the module; may be a file path before the manifest is read
	Reason string
	Err    error // underlying cause, if any
	// Hint says what to do; defaults to rebuilding against guest-sdk.
	Hint string
}

func (e *InvalidModuleError) Error() string {
	msg := fmt.Sprintf("module[%s] invalid: %s", e.Module, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Hint != "" {
		return msg + "; " + e.Hint
	}
	return msg + "; rebuild it against guest-sdk (see docs/abi.md)"
}

func (e *InvalidModuleError) Unwrap() error { return e.Err }

// DeadlineExceededError reports a call stopped because Limits.Timeout (or the
// caller's context deadline) passed.
type DeadlineExceededError struct {
	Module  string
	Call    string // e.g. "reconcile default/foo"
	Elapsed time.Duration
	Timeout time.Duration
}

func (e *DeadlineExceededError) Error() string {
	return fmt.Sprintf("module[%s] %s: deadline exceeded after %s (timeout %s); raise spec.limits.timeout or make the reconcile faster",
		e.Module, e.Call, e.Elapsed.Round(time.Millisecond), e.Timeout)
}

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (e *DeadlineExceededError) Is(target error) bool { return target == context.DeadlineExceeded }

// CanceledError reports a call stopped because the caller's context was
// canceled, typically because the operator is shutting down.
type CanceledError struct {
	Module string
	Call   string
}

func (e *CanceledError) Error() string {
	return fmt.Sprintf("module[%s] %s: canceled by the host; it will be retried", e.Module, e.Call)
}

// Is makes errors.Is(err, context.Canceled) true.
func (e *CanceledError) Is(target error) bool { return target == context.Canceled }

// TrapError reports a guest that trapped: unreachable, out-of-bounds memory,
// stack overflow, a Go runtime fatal error, or a call to exit.
type TrapError struct {
	Module string
	Call   string
	Reason string // wazero's description, including the wasm stack trace
	Stderr string // tail of the guest's stderr, often a Go panic message
}

func (e *TrapError) Error() string {
	msg := fmt.Sprintf("module[%s] %s: guest trapped: %s", e.Module, e.Call, e.Reason)
	if e.Stderr != "" {
		msg += "\nguest stderr:\n" + e.Stderr
	}
	return msg + "\nfix the guest; the instance was discarded and will be replaced"
}

// ABIError reports a guest that broke the calling convention, or a payload
// over its size limit.
type ABIError struct {
	Module string
	Call   string
	Reason string
}

func (e *ABIError) Error() string {
	return fmt.Sprintf("module[%s] %s: ABI violation: %s", e.Module, e.Call, e.Reason)
}

// IsInvalidModule reports whether err is, or wraps, an *InvalidModuleError.
func IsInvalidModule(err error) bool {
	var t *InvalidModuleError
	return errors.As(err, &t)
}

// FuelExhaustedError reports a call stopped because it used its whole fuel
// budget (Limits.Fuel, or Limits.InitFuel during instantiation).
type FuelExhaustedError struct {
	Module string
	Call   string
	Used   uint64
	Budget uint64
}

func (e *FuelExhaustedError) Error() string {
	return fmt.Sprintf("module[%s] %s: fuel exhausted after %d units (budget %d); raise spec.limits.fuel or fix the loop",
		e.Module, e.Call, e.Used, e.Budget)
}

// MemoryLimitError reports a guest that ran out of memory because growing
// its linear memory past Limits.MemoryLimitPages failed.
type MemoryLimitError struct {
	Module     string
	Call       string
	LimitPages uint32
	Stderr     string
}

func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("module[%s] %s: memory limit of %d pages (%d MiB) reached; raise spec.limits.memoryPages (--memory-limit-pages) or allocate less",
		e.Module, e.Call, e.LimitPages, uint64(e.LimitPages)*64/1024)
}

// StackOverflowError reports a guest whose call stack grew past the engine's
// limit, usually through unbounded recursion.
type StackOverflowError struct {
	Module string
	Call   string
	Reason string
}

func (e *StackOverflowError) Error() string {
	if strings.HasPrefix(e.Reason, "call depth") {
		return fmt.Sprintf("module[%s] %s: stack overflow: %s; look for unbounded recursion in the guest, or raise --max-call-depth", e.Module, e.Call, e.Reason)
	}
	return fmt.Sprintf("module[%s] %s: stack overflow; look for unbounded recursion in the guest", e.Module, e.Call)
}
