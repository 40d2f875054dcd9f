// Package engine runs wasmreconcile guest modules under limits.
//
// An [Engine] compiles module bytes once and hands out [Module]s. A Module owns
// a bounded pool of instances and exposes one operation, [Module.Reconcile],
// which passes a request to the guest's reconcile export and returns its
// response bytes. The engine knows the calling convention of the ABI
// (docs/abi.md) but not the meaning of the JSON documents; package protocol
// gives them meaning.
//
// # Isolation
//
// Each Module has its own wazero runtime, so a memory cap or a crash in one
// module cannot affect another. Guests get WASI with no filesystem, no
// network, no environment, no arguments, a fake clock and a deterministic
// random source. Their stdout is discarded; the first and last 4 KiB of
// their stderr are kept per instance and attached to trap errors.
//
// # Preemption
//
// Module bytes are instrumented before compilation (host/internal/instrument):
// a fuel counter is charged at function entries, loop headers and merge
// points, and a host import refills it in slices (host/internal/meter). Each
// refill checks the call's budget (Limits.Fuel), its deadline
// (Limits.Timeout) and the caller's context, and yields to the Go scheduler,
// so a spinning guest cannot pin a P or stall the garbage collector. See
// docs/metering.md.
//
// # Idle modules
//
// A Module that serves no call for Limits.IdleModuleTimeout is unloaded:
// its instances are closed and its compiled code and decoded module
// dropped, so that an idle module costs kilobytes, not megabytes. Its
// metered bytes, its machine code and its input stay in the compilation
// cache directory, and the next call loads it back from there without
// compiling (Module.Loaded, Options.ModuleUnloaded and ModuleReloaded).
package engine
