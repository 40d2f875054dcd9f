// Package engine runs wasmreconcile guest modules under limits.
//
// An [Engine] compiles module bytes once and hands out [Module]s. A Module owns
// a bounded pool of instances and exposes one operation, [Module.Reconcile],
// which passes a request to the guest's reconcile export and returns its
// response bytes. The engine knows the calling convention of the ABI
// (docs/abi.md) but not the meaning of the JSON documents; package controller
// gives them meaning.
//
// # Isolation
//
// Each Module has its own wazero runtime, so a memory cap or a crash in one
// module cannot affect another. Guests get WASI with no filesystem, no
// network, no environment, no arguments, a fake clock and a deterministic
// random source. Their stdout is discarded; the tail of their stderr is kept
// per instance and attached to trap errors.
//
// # Preemption
//
// Every call runs under Limits.Timeout. In this version the deadline is
// enforced by wazero's WithCloseOnContextDone, which is correct but costly on
// tight loops; see RATIONALE.md and issue "metered wasm engine" for the
// fuel-instrumented replacement.
package engine
