package protocol

import (
	"errors"
	"fmt"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// Kind names how a reconcile ended. It is the one vocabulary of the host:
// the reason of the Warning Event on the object, the "result" label of
// wasmreconcile_reconcile_total, the "kind" of `operator invoke`'s error
// and the error.kind a case file of `operator test` matches.
type Kind string

// Kinds of outcome. KindOf maps an error to one of them.
const (
	// Success: the guest answered and its response was applied.
	Success Kind = "Success"
	// ReconcileFailed: the guest reported an error in its response
	// (retried with backoff unless terminal).
	ReconcileFailed Kind = "ReconcileFailed"
	// InvalidResponse: the response breaks a rule of the protocol, or the
	// API server refused what it asked for as invalid. Not retried until
	// the object changes: the same input gives the same response.
	InvalidResponse Kind = "InvalidResponse"
	// ApplyFailed: writing the status, a child, an Event or the finalizer
	// failed for another reason (a conflict, RBAC, the API server's
	// health). Retried with backoff.
	ApplyFailed Kind = "ApplyFailed"
	// ChildConflict: a desired child's name is taken by an object the
	// module did not create; the host did not write it (it never adopts,
	// overwrites or deletes such an object). Retried with backoff: the
	// object may be removed, or the guest may rename the child.
	ChildConflict Kind = "ChildConflict"
	// FuelExhausted: the call used its whole fuel budget.
	FuelExhausted Kind = "FuelExhausted"
	// DeadlineExceeded: the call ran past its timeout.
	DeadlineExceeded Kind = "DeadlineExceeded"
	// MemoryLimit: the guest's memory reached its cap.
	MemoryLimit Kind = "MemoryLimit"
	// StackOverflow: the guest's call stack overflowed.
	StackOverflow Kind = "StackOverflow"
	// GuestTrapped: the guest trapped, panicked or exited.
	GuestTrapped Kind = "GuestTrapped"
	// ABIViolation: the guest broke the calling convention, its response
	// is not JSON, or a payload is over its size limit.
	ABIViolation Kind = "ABIViolation"
	// Canceled: the host canceled the call (shutdown); retried.
	Canceled Kind = "Canceled"
	// InvalidModule: the module's bytes cannot be loaded.
	InvalidModule Kind = "InvalidModule"
	// MemoryBudgetExceeded: the call waited its whole timeout for its
	// instance's memory within the operator's guest memory budget
	// (engine.MemoryBudget), held by other instances and compiles. The
	// guest did not run; retried with backoff.
	MemoryBudgetExceeded Kind = "MemoryBudgetExceeded"
	// HostPanic: the host panicked while reconciling the object (a bug of
	// the host's, recovered); retried with backoff.
	HostPanic Kind = "HostPanic"
	// ModuleUnavailable: the module, unloaded for having served no call
	// for its idle module timeout, could not be loaded back (its files in
	// the compilation cache directory are gone or damaged). The guest did
	// not run; retried with backoff.
	ModuleUnavailable Kind = "ModuleUnavailable"
)

// Kinds lists every Kind, Success first.
var Kinds = []Kind{Success, ReconcileFailed, InvalidResponse, ApplyFailed, ChildConflict, FuelExhausted, DeadlineExceeded,
	MemoryLimit, StackOverflow, GuestTrapped, ABIViolation, Canceled, InvalidModule, MemoryBudgetExceeded, HostPanic, ModuleUnavailable}

// PanicError is a panic of the host's recovered while reconciling an
// object: its value and the stack where it happened.
type PanicError struct {
	Module, Call string
	Value        any
	Stack        string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("module[%s] %s: the host panicked (a bug of wasmreconcile's, not of the module; please report it with the operator's log): %v", e.Module, e.Call, e.Value)
}

// Preempted reports whether k is a call the host stopped for running too
// long: fuel or deadline.
func (k Kind) Preempted() bool { return k == FuelExhausted || k == DeadlineExceeded }

// KindOf names how a reconcile that returned err ended: Success for nil,
// the kind of a typed error of this package or of package engine, and
// GuestTrapped for any other error (the engine reports every trap with its
// own type; an unknown error is treated as the guest's failure).
func KindOf(err error) Kind {
	if err == nil {
		return Success
	}
	var (
		children *ChildrenError
		guest    *GuestError
		invalid  *InvalidResponseError
		apply    *ApplyError
		module   *engine.InvalidModuleError
		fuel     *engine.FuelExhaustedError
		deadline *engine.DeadlineExceededError
		canceled *engine.CanceledError
		mem      *engine.MemoryLimitError
		stack    *engine.StackOverflowError
		abiErr   *engine.ABIError
		budget   *engine.MemoryBudgetError
		reload   *engine.ReloadError
		panicked *PanicError
	)
	switch {
	case errors.As(err, &panicked):
		return HostPanic
	case errors.As(err, &budget):
		return MemoryBudgetExceeded
	case errors.As(err, &reload):
		return ModuleUnavailable
	case errors.As(err, &children):
		return children.Kind()
	case errors.As(err, &guest):
		return ReconcileFailed
	case errors.As(err, &invalid):
		return InvalidResponse
	case errors.As(err, &apply):
		return ApplyFailed
	case errors.As(err, &module):
		return InvalidModule
	case errors.As(err, &fuel):
		return FuelExhausted
	case errors.As(err, &deadline):
		return DeadlineExceeded
	case errors.As(err, &canceled):
		return Canceled
	case errors.As(err, &mem):
		return MemoryLimit
	case errors.As(err, &stack):
		return StackOverflow
	case errors.As(err, &abiErr):
		return ABIViolation
	}
	return GuestTrapped
}

// Terminal reports whether a reconcile that ended with err must not be
// retried until its object changes: a terminal error the guest reported,
// or a response that is invalid (the same input gives the same response).
func Terminal(err error) bool {
	var guest *GuestError
	if errors.As(err, &guest) {
		return guest.Terminal
	}
	return KindOf(err) == InvalidResponse
}
