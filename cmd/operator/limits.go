package main

import (
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// guestLimitFlags are the per-call limits on a guest's logs and tables,
// with the same names and defaults for run, invoke and test. Zero takes
// the engine's default.
type guestLimitFlags struct {
	logLines      int
	logBytes      int
	tableElements uint64
	callDepth     uint64
	recycleCalls  int
	recyclePages  uint
	idleTimeout   time.Duration
	spareTimeout  time.Duration
}

func (g *guestLimitFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&g.logLines, "max-log-lines", engine.DefaultMaxLogLines, "most log lines a guest may write in one call; further lines are dropped, counted (wasmreconcile_guest_log_lines_dropped_total) and reported in one line at the end of the call (0: the default)")
	fs.IntVar(&g.logBytes, "max-log-bytes", engine.DefaultMaxLogBytes, "most log bytes a guest may write in one call, counted like --max-log-lines (0: the default)")
	fs.Uint64Var(&g.callDepth, "max-call-depth", engine.DefaultMaxCallDepth, "most nested calls in a guest; a call that would go deeper stops with StackOverflow (0: the default)")
	fs.IntVar(&g.recycleCalls, "recycle-after-calls", engine.DefaultRecycleAfterCalls, "close a guest instance after it has served this many calls, and serve the next call from a fresh one, so that nothing a guest's runtime accumulates lives forever (counted in wasmreconcile_instances_recycled_total; 0: the default)")
	fs.UintVar(&g.recyclePages, "recycle-memory-pages", 0, "close a guest instance after a call that left its linear memory above this many 64 KiB pages (linear memory never shrinks); 0: three quarters of the memory limit")
	fs.DurationVar(&g.idleTimeout, "idle-instance-timeout", engine.DefaultIdleInstanceTimeout, "close a guest instance that has served no call for this long, so that a module with no traffic holds no instance; the next call instantiates a fresh one (counted in wasmreconcile_instances_recycled_total{reason=\"idle\"}; 0: the default; negative: never)")
	fs.DurationVar(&g.spareTimeout, "idle-spare-timeout", engine.DefaultIdleSpareTimeout, "close sooner an idle guest instance that is not its module's last (a spare, made for concurrent calls), once it has served no call for this long; the warmest instance stays for --idle-instance-timeout (counted as reason=\"idle\"; 0: the default; negative: as --idle-instance-timeout)")
	fs.Uint64Var(&g.tableElements, "max-table-elements", engine.DefaultMaxTableElements, "most elements of a guest's tables, all tables together (about 8 bytes each); a module whose tables need more is refused at load, and table.grow past it fails in the guest (0: the default)")
}

// apply sets the flags' limits in l.
func (g *guestLimitFlags) apply(l *engine.Limits) error {
	if g.logLines < 0 || g.logBytes < 0 {
		return fmt.Errorf("--max-log-lines and --max-log-bytes must not be negative")
	}
	if g.tableElements > math.MaxUint32 {
		return fmt.Errorf("--max-table-elements %d is over %d", g.tableElements, uint64(math.MaxUint32))
	}
	if g.callDepth > math.MaxInt32 {
		return fmt.Errorf("--max-call-depth %d is over %d", g.callDepth, math.MaxInt32)
	}
	if g.recycleCalls < 0 {
		return fmt.Errorf("--recycle-after-calls must not be negative")
	}
	if g.recyclePages > 65536 {
		return fmt.Errorf("--recycle-memory-pages %d is over 65536 (4 GiB)", g.recyclePages)
	}
	l.RecycleAfterCalls, l.RecycleMemoryPages = g.recycleCalls, uint32(g.recyclePages)
	l.IdleInstanceTimeout, l.IdleSpareTimeout = g.idleTimeout, g.spareTimeout
	l.MaxLogLines, l.MaxLogBytes, l.MaxTableElements = g.logLines, g.logBytes, uint32(g.tableElements)
	l.MaxCallDepth = uint32(g.callDepth)
	return nil
}

// registerEventBudget registers the budget of the guests' Events (operator
// run only: offline, nothing is recorded).
func registerEventBudget(fs *flag.FlagSet, b *policy.Events) {
	fs.Float64Var(&b.ObjectQPS, "event-object-qps", policy.DefaultEventObjectQPS, "refill rate, in Events per second, of each object's Event bucket: a guest's Events over it are dropped and counted (wasmreconcile_events_dropped_total{reason=\"object\"})")
	fs.IntVar(&b.ObjectBurst, "event-object-burst", policy.DefaultEventObjectBurst, "size of each object's Event bucket: the Events an object that has recorded none for a while may record at once")
	fs.Float64Var(&b.ModuleQPS, "event-module-qps", policy.DefaultEventModuleQPS, "refill rate, in Events per second, of each module's Event bucket, shared by its objects (reason=\"module\")")
	fs.IntVar(&b.ModuleBurst, "event-module-burst", policy.DefaultEventModuleBurst, "size of each module's Event bucket")
	fs.BoolVar(&b.Disabled, "no-event-budget", false, "record every Event a guest returns")
}

// registerResponseLimits registers the response limits, with the same names
// and defaults for operator run, invoke and test: an operator that raises a
// limit in the cluster raises it in CI too.
func registerResponseLimits(fs *flag.FlagSet, l *protocol.Limits) {
	fs.IntVar(&l.MaxEvents, "max-events", protocol.DefaultMaxEvents, "most Events one response may record; a response with more is refused (InvalidResponse)")
	fs.DurationVar(&l.MaxRequeueAfter, "max-requeue-after", protocol.DefaultMaxRequeueAfter, "longest requeueAfterSeconds a response may ask for")
	fs.IntVar(&l.MaxObjectBytes, "max-object-bytes", protocol.DefaultMaxObjectBytes, "largest child, and reconciled object with its new status, the host writes, encoded (etcd's --max-request-bytes)")
}
