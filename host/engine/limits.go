package engine

import (
	"fmt"
	"time"
)

// Limits bound what one module may consume. The zero value of every field
// means "use the default" stated on the field. Fuel, Timeout and
// MemoryLimitPages are also held to the Engine's ceilings (Options.Ceilings,
// see ceilings.go): a value over one is lowered to it.
type Limits struct {
	// Fuel is the budget of one reconcile call, in fuel units; one unit is
	// about one executed wasm instruction (see host/internal/instrument).
	// When it runs out the call stops with a *FuelExhaustedError. The count
	// is deterministic: the same module and input use the same fuel.
	// Defaults to 500,000,000.
	Fuel uint64

	// InitFuel is the budget of loading: each instantiation, which runs the
	// module's _initialize (for a Go guest, the Go runtime and package
	// initialisers), and the call that reads the manifest.
	// Defaults to 500,000,000.
	InitFuel uint64

	// InitTimeout is the wall-clock budget of loading: each instantiation
	// (which runs _initialize) and the call that reads the manifest. It is
	// separate from Timeout because a Go guest's runtime initialisation
	// takes milliseconds, far more than a fast reconcile.
	// Defaults to 30 seconds.
	InitTimeout time.Duration

	// Timeout is the wall-clock budget of one reconcile call. When it passes,
	// the call is stopped and returns a *DeadlineExceededError.
	// Defaults to 5 seconds.
	Timeout time.Duration

	// MemoryLimitPages caps the guest's linear memory, in 64 KiB wasm pages.
	// Growing past it fails inside the guest. A module that declares a larger
	// minimum memory is refused at load.
	// Defaults to 2048 pages (128 MiB).
	MemoryLimitPages uint32

	// MaxRequestBytes caps the encoded request passed to the guest. Larger
	// requests are refused with an *ABIError before the guest runs.
	// Defaults to 4 MiB.
	MaxRequestBytes int

	// MaxResponseBytes caps the encoded response a guest may return. Larger
	// responses are refused with an *ABIError.
	// Defaults to 4 MiB.
	MaxResponseBytes int

	// MaxInstances caps the instances kept for the module, and so the number
	// of concurrent calls into it. Further calls wait for a free instance.
	// Defaults to 4.
	MaxInstances int

	// FreshInstancePerCall, when true, instantiates a new instance for every
	// call and discards it afterwards, so no state survives between calls.
	// It costs an instantiation per call (milliseconds for a Go guest).
	// Defaults to false: healthy instances are reused.
	FreshInstancePerCall bool

	// MaxLogLines caps the lines a guest may log (abi.ImportLog) in one
	// call. Further lines are dropped and counted in Result.LogDropped, and
	// one line at the end of the call says how many.
	// Defaults to 100.
	MaxLogLines int

	// MaxLogBytes caps the bytes a guest may log in one call, counted like
	// MaxLogLines.
	// Defaults to 64 KiB.
	MaxLogBytes int

	// MaxTableElements caps the elements of the guest's tables, all tables
	// together. The instrumenter gives every table a maximum so that their
	// sum fits (docs/metering.md); a module whose tables need more at
	// instantiation is refused at load, and table.grow past it fails inside
	// the guest (returns -1).
	// Defaults to 100,000 (about 800 KB of references).
	MaxTableElements uint32

	// RecycleAfterCalls closes an instance after it has served this many
	// calls, and a fresh one serves the next: whatever a guest's runtime
	// accumulates over a long life (a heap that never shrinks, caches) is
	// bounded. Result.Recycled says so.
	// Defaults to 100,000 (about 20 s of a Go guest's calls at 0.2 ms each).
	RecycleAfterCalls int

	// RecycleMemoryPages closes an instance after a call that left its
	// linear memory larger than this many 64 KiB pages (linear memory
	// never shrinks: one large object keeps its instance large for good).
	// Result.Recycled says so.
	// Defaults to three quarters of MemoryLimitPages.
	RecycleMemoryPages uint32

	// IdleInstanceTimeout closes an instance that has served no call for
	// this long, so that a module with no traffic holds no instance (its
	// linear memory and the Go heap of its runtime); the next call
	// instantiates a fresh one, which for the widget guest takes a few
	// milliseconds (BenchmarkReinstantiate). Each closing is reported to
	// Options.IdleReleased.
	// Defaults to 5 minutes; negative keeps idle instances until they are
	// recycled.
	IdleInstanceTimeout time.Duration

	// IdleSpareTimeout closes, sooner, an idle instance that is not the
	// module's last: a spare, made for a burst of concurrent calls
	// (MaxInstances), is closed once it has served no call for this long,
	// while the warmest instance stays for IdleInstanceTimeout. Memory
	// then follows the load: a module that served 4 calls at once holds
	// one instance, not 4, soon after, and a new burst pays one
	// instantiation per extra instance (BenchmarkReinstantiate: under
	// 10 ms). Reported to Options.IdleReleased like the other idle
	// closings.
	// Defaults to 10 seconds; negative treats spares as any instance
	// (IdleInstanceTimeout).
	IdleSpareTimeout time.Duration

	// IdleModuleTimeout unloads a module that has served no call for this
	// long: its instances are closed, and its compiled code and decoded
	// module are dropped, keeping only its manifest, limits and digest (a
	// few KiB). Its bytes and their metered rewrite stay on disk in the
	// compilation cache directory, so the next call loads it back without
	// instrumenting or compiling (about 150 ms for the 3.2 MB widget; see
	// docs/benchmarks.md), and no call is refused or reordered meanwhile:
	// it waits for the load as it would for a free instance. Each unload
	// and reload is reported to Options.ModuleUnloaded and
	// Options.ModuleReloaded, and Module.Loaded says which state the
	// module is in. A module loaded by an Engine without a compilation
	// cache directory is never unloaded (there would be nothing to load it
	// back from without compiling); an Engine with a compile worker always
	// has one.
	// Defaults to 15 minutes; negative keeps modules loaded.
	IdleModuleTimeout time.Duration

	// MaxCallDepth caps how deep the guest's calls may nest. A call that
	// would go deeper stops with a *StackOverflowError. Without it, wazero
	// grows the call stack to about 100 MB by doubling copies, outside the
	// memory cap and not interruptible by the deadline.
	// Defaults to 50,000.
	MaxCallDepth uint32
}

// Defaults for Limits.
const (
	DefaultFuel              = 500_000_000
	DefaultInitFuel          = 500_000_000
	DefaultTimeout           = 5 * time.Second
	DefaultInitTimeout       = 30 * time.Second
	DefaultMemoryLimitPages  = 2048
	DefaultMaxRequestBytes   = 4 << 20
	DefaultMaxResponseBytes  = 4 << 20
	DefaultMaxInstances      = 4
	DefaultMaxLogLines       = 100
	DefaultMaxLogBytes       = 64 << 10
	DefaultMaxTableElements  = 100_000
	DefaultMaxCallDepth      = 50_000
	DefaultRecycleAfterCalls = 100_000

	DefaultIdleInstanceTimeout = 5 * time.Minute
	// DefaultIdleSpareTimeout is Limits.IdleSpareTimeout's default.
	DefaultIdleSpareTimeout  = 10 * time.Second
	DefaultIdleModuleTimeout = 15 * time.Minute
)

// withDefaults returns l with zero fields replaced by their defaults, or an
// error naming the first invalid field.
func (l Limits) withDefaults() (Limits, error) {
	if l.MaxCallDepth > 1<<31-1 {
		return l, fmt.Errorf("limits.maxCallDepth %d is over %d", l.MaxCallDepth, 1<<31-1)
	}
	if l.Timeout < 0 || l.InitTimeout < 0 || l.MaxRequestBytes < 0 || l.MaxResponseBytes < 0 || l.MaxInstances < 0 || l.MaxLogLines < 0 || l.MaxLogBytes < 0 || l.RecycleAfterCalls < 0 {
		return l, fmt.Errorf("limits must not be negative: %+v", l)
	}
	if l.MemoryLimitPages > 65536 {
		return l, fmt.Errorf("limits.memoryLimitPages %d exceeds the wasm32 maximum of 65536 pages (4 GiB)", l.MemoryLimitPages)
	}
	if l.Fuel == 0 {
		l.Fuel = DefaultFuel
	}
	if l.InitFuel == 0 {
		l.InitFuel = DefaultInitFuel
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.InitTimeout == 0 {
		l.InitTimeout = DefaultInitTimeout
	}
	if l.MemoryLimitPages == 0 {
		l.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if l.MaxRequestBytes == 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.MaxResponseBytes == 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if l.MaxInstances == 0 {
		l.MaxInstances = DefaultMaxInstances
	}
	if l.MaxLogLines == 0 {
		l.MaxLogLines = DefaultMaxLogLines
	}
	if l.MaxLogBytes == 0 {
		l.MaxLogBytes = DefaultMaxLogBytes
	}
	if l.MaxTableElements == 0 {
		l.MaxTableElements = DefaultMaxTableElements
	}
	if l.MaxCallDepth == 0 {
		l.MaxCallDepth = DefaultMaxCallDepth
	}
	if l.RecycleAfterCalls == 0 {
		l.RecycleAfterCalls = DefaultRecycleAfterCalls
	}
	if l.IdleInstanceTimeout == 0 {
		l.IdleInstanceTimeout = DefaultIdleInstanceTimeout
	}
	if l.IdleSpareTimeout == 0 {
		l.IdleSpareTimeout = DefaultIdleSpareTimeout
	}
	if l.IdleModuleTimeout == 0 {
		l.IdleModuleTimeout = DefaultIdleModuleTimeout
	}
	if l.RecycleMemoryPages == 0 || l.RecycleMemoryPages > l.MemoryLimitPages {
		l.RecycleMemoryPages = max(l.MemoryLimitPages/4*3, 1)
	}
	return l, nil
}
