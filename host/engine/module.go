package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/linmem"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
)

// Module is a loaded guest module with its pool of instances. It is safe for
// concurrent use; at most Limits.MaxInstances calls run at once. A module
// that serves no call for Limits.IdleModuleTimeout drops its instances and
// code until its next call loads them back (Loaded, unload.go).
type Module struct {
	fuelSlice uint64
	name      string
	digest    string
	size      int
	limits    Limits
	clamped   []Clamp // limits lowered to the engine's ceilings (ceilings.go)
	manifest  abi.Manifest
	pool      *pool
	budget    *MemoryBudget // Options.MemoryBudget; nil for none

	// The compiled code, dropped while the module is unloaded (unload.go).
	codeMu    sync.Mutex
	code      *code                                // nil while unloaded or closed
	users     int                                  // instances that exist or are being made; they use code
	reload    func(context.Context) (*code, error) // loads the code back; nil: never unloaded
	idleTimer *time.Timer                          // armed while loaded, when reload is set
	closed    bool                                 // Close was called
	lastCall  atomic.Int64                         // UnixNano of the end of the last call, or of the load
	unloaded  func(module string)                  // Options.ModuleUnloaded
	reloaded  func(string, time.Duration, error)   // Options.ModuleReloaded
	unpin     func()                               // lets a bounded cache remove what reload reads; nil when nothing is pinned

	closeOnce sync.Once
	closeErr  error
}

// Name is the module's name from its manifest.
func (m *Module) Name() string { return m.name }

// Digest is "sha256:" followed by the hex SHA-256 of the module bytes.
func (m *Module) Digest() string { return m.digest }

// Size is the size in bytes of the module binary.
func (m *Module) Size() int { return m.size }

// Manifest is the manifest the module declared at load.
func (m *Module) Manifest() abi.Manifest { return m.manifest }

// Limits are the limits in force, with defaults filled in.
func (m *Module) Limits() Limits { return m.limits }

// Result describes one completed or failed call.
type Result struct {
	// Output is the guest's response; nil when the call failed.
	Output []byte
	// Fuel is the fuel the call used. It is deterministic: the same module
	// and the same request use the same fuel, in any instance or process.
	Fuel uint64
	// Duration is the wall-clock time spent in the guest, excluding the wait
	// for a free instance.
	Duration time.Duration
	// LogDropped is the number of guest log lines dropped because the call
	// went over Limits.MaxLogLines or MaxLogBytes.
	LogDropped int
	// MemoryWait is how long the call waited for its instance's memory
	// within the engine's MemoryBudget (zero when it did not wait).
	MemoryWait time.Duration
	// Recycled is why the instance that served the call was closed after
	// it although the call succeeded: RecycledCalls or RecycledMemory
	// (Limits.RecycleAfterCalls, RecycleMemoryPages); "" when it was kept.
	Recycled string
}

// Reasons of Result.Recycled.
const (
	RecycledCalls  = "calls"  // the instance served Limits.RecycleAfterCalls calls
	RecycledMemory = "memory" // its memory grew past Limits.RecycleMemoryPages
	// RecycledIdle is never in a Result: an instance that served no call for
	// Limits.IdleInstanceTimeout is closed between calls and reported to
	// Options.IdleReleased.
	RecycledIdle = "idle"
)

// Reconcile passes request to the guest's reconcile export and returns the
// response bytes. call describes the call in errors and logs, e.g.
// "reconcile default/foo".
//
// The call runs under Limits.Fuel, Limits.Timeout and ctx, whichever ends
// first. It waits for a free instance first; that wait is bounded by ctx only.
// Errors are typed: *ABIError, *FuelExhaustedError, *DeadlineExceededError,
// *CanceledError, *MemoryLimitError, *StackOverflowError or *TrapError. After
// any error the instance used is discarded, because a guest's runtime state is
// undefined after a trap or a stop; the pool replaces it on demand. The
// Result carries the fuel and time used even when the call failed.
func (m *Module) Reconcile(ctx context.Context, call string, request []byte) (Result, error) {
	return m.reconcile(ctx, call, request, false)
}

// ReconcileFresh is Reconcile on a new instance, discarded after the call,
// whatever Limits.FreshInstancePerCall says: the call starts from the
// module's initial state, as every offline run does, so the same bytes and
// request give the same answer and the same fuel. A reused instance carries
// its guest's heap from earlier calls, which moves the fuel of a Go guest
// by a few percent from call to call. The flight recorder uses it to
// record what a replay will reproduce.
func (m *Module) ReconcileFresh(ctx context.Context, call string, request []byte) (Result, error) {
	return m.reconcile(ctx, call, request, true)
}

func (m *Module) reconcile(ctx context.Context, call string, request []byte, fresh bool) (Result, error) {
	if len(request) > m.limits.MaxRequestBytes {
		return Result{}, &ABIError{Module: m.name, Call: call, Reason: fmt.Sprintf(
			"request of %d bytes exceeds limits.maxRequestBytes of %d; raise the limit or shrink the object", len(request), m.limits.MaxRequestBytes)}
	}
	return m.call(ctx, call, m.limits.Fuel, m.limits.Timeout, fresh, func(ctx context.Context, inst *instance) ([]byte, error) {
		res, err := inst.alloc.Call(ctx, uint64(len(request)))
		if err != nil {
			return nil, err
		}
		ptr := uint32(res[0])
		if len(request) > 0 && !inst.mod.Memory().Write(ptr, request) {
			return nil, &ABIError{Module: m.name, Call: call, Reason: fmt.Sprintf(
				"%s(%d) returned pointer %d outside guest memory of %d bytes", abi.ExportAlloc, len(request), ptr, inst.mod.Memory().Size())}
		}
		res, err = inst.reconcile.Call(ctx, uint64(ptr), uint64(len(request)))
		if err != nil {
			return nil, err
		}
		return inst.read(abi.PackedBuffer(res[0]), m.limits.MaxResponseBytes)
	})
}

// PoolStats describes a module's instances.
type PoolStats struct {
	Live int // instances that exist: idle plus in use
	Idle int // instances ready for the next call
}

// PoolStats reports the module's instances now.
func (m *Module) PoolStats() PoolStats {
	return PoolStats{Live: int(m.pool.live.Load()), Idle: m.pool.idleCount()}
}

// Close releases the module's instances and compiled code. Calls in flight
// fail with a *TrapError or *CanceledError. The code is shared with the
// Engine's other modules loaded from the same bytes, and freed when the last
// of them closes. Closing twice does nothing.
func (m *Module) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.codeMu.Lock()
		m.closed = true
		c := m.code
		m.code = nil
		if m.idleTimer != nil {
			m.idleTimer.Stop()
			m.idleTimer = nil
		}
		m.codeMu.Unlock()
		if c != nil {
			// Closing the runtime stops the calls in flight.
			m.closeErr = c.runtime.Close(ctx)
		}
		// Idle instances reach the compiled code: drop them, so that it
		// can be freed while the Module itself is still referenced.
		m.pool.close(ctx)
		if c != nil {
			c.close(ctx)
		}
		if m.unpin != nil {
			m.unpin()
		}
	})
	return m.closeErr
}

// call runs fn on a pooled instance under the fuel budget and the module's
// timeout, and turns wazero's errors into typed ones.
//
// With fresh, the call runs on a new instance outside the pool: it takes
// none of the pool's Limits.MaxInstances slots (so it never makes a
// serving call wait) and is closed after the call.
func (m *Module) call(ctx context.Context, call string, budget uint64, timeout time.Duration, fresh bool, fn func(context.Context, *instance) ([]byte, error)) (Result, error) {
	var inst *instance
	var err error
	if fresh {
		inst, err = m.pool.fresh(ctx, call, timeout)
	} else {
		inst, err = m.pool.get(ctx, call, timeout)
	}
	if err != nil {
		return Result{}, m.classify(ctx, call, nil, 0, err)
	}
	waited := inst.memWait
	inst.memWait = 0 // reported once, by the call that made the instance
	start := time.Now()
	fuel := &meter.Meter{Budget: budget, Slice: m.fuelSlice, Deadline: start.Add(timeout)}
	st := m.newCallState()
	callCtx := withCallState(meter.WithMeter(ctx, fuel), st)
	fuel.StartGlobal(inst.fuel)
	inst.mem.Enter(ctx, fuel.Deadline)
	inst.clock.enter(callCtx)
	out, err := fn(callCtx, inst)
	inst.mem.Exit()
	res := Result{Output: out, Fuel: fuel.UsedGlobal(inst.fuel), Duration: time.Since(start), LogDropped: st.droppedLines, MemoryWait: waited}
	inst.clock.exit(res.Fuel)
	st.reportDropped(ctx, m.name, call)
	healthy := err == nil && !m.limits.FreshInstancePerCall && !fresh
	if healthy {
		inst.calls++
		switch {
		case inst.calls >= m.limits.RecycleAfterCalls:
			res.Recycled = RecycledCalls
		case inst.mod.Memory() != nil && uint64(inst.mod.Memory().Size()) > uint64(m.limits.RecycleMemoryPages)*65536:
			res.Recycled = RecycledMemory
		}
		healthy = res.Recycled == ""
	}
	if fresh {
		inst.close(context.Background())
	} else {
		m.pool.put(inst, healthy)
	}
	m.lastCall.Store(start.Add(res.Duration).UnixNano()) // for IdleModuleTimeout (unload.go)
	if err != nil {
		res.Output = nil
		return res, m.classify(ctx, call, inst, res.Duration, err)
	}
	return res, nil
}

func (m *Module) classify(parent context.Context, call string, inst *instance, elapsed time.Duration, err error) error {
	var (
		deadline  *DeadlineExceededError
		canceled  *CanceledError
		trap      *TrapError
		fuelErr   *FuelExhaustedError
		memErr    *MemoryLimitError
		stackErr  *StackOverflowError
		exhausted *meter.ExhaustedError
		stopped   *meter.StoppedError
	)
	var budgetErr *MemoryBudgetError
	var reloadErr *ReloadError
	if errors.As(err, &deadline) || errors.As(err, &canceled) || errors.As(err, &trap) ||
		errors.As(err, &fuelErr) || errors.As(err, &memErr) || errors.As(err, &stackErr) || errors.As(err, &budgetErr) || errors.As(err, &reloadErr) {
		return err // already classified, e.g. by newInstance
	}
	var depth *meter.DepthError
	if errors.As(err, &depth) {
		return &StackOverflowError{Module: m.name, Call: call, Reason: fmt.Sprintf("call depth over limits.maxCallDepth of %d", m.limits.MaxCallDepth)}
	}
	if errors.As(err, &exhausted) {
		return &FuelExhaustedError{Module: m.name, Call: call, Used: exhausted.Used, Budget: exhausted.Budget}
	}
	if errors.As(err, &stopped) {
		if errors.Is(stopped.Err, context.DeadlineExceeded) {
			return &DeadlineExceededError{Module: m.name, Call: call, Elapsed: elapsed, Timeout: m.timeoutFor(call)}
		}
		return &CanceledError{Module: m.name, Call: call}
	}
	var abiErr *ABIError
	if errors.As(err, &abiErr) {
		abiErr.Module, abiErr.Call = m.name, call
		return abiErr
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return &DeadlineExceededError{Module: m.name, Call: call, Elapsed: elapsed, Timeout: m.timeoutFor(call)}
		case sys.ExitCodeContextCanceled:
			return &CanceledError{Module: m.name, Call: call}
		}
	}
	if errors.Is(err, context.Canceled) || (parent.Err() != nil && errors.Is(parent.Err(), context.Canceled)) {
		return &CanceledError{Module: m.name, Call: call}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &DeadlineExceededError{Module: m.name, Call: call, Elapsed: elapsed, Timeout: m.timeoutFor(call)}
	}
	var stderr string
	if inst != nil {
		stderr = inst.stderr.String()
	}
	if strings.Contains(err.Error(), "stack overflow") || strings.Contains(stderr, "stack overflow") {
		return &StackOverflowError{Module: m.name, Call: call, Reason: err.Error()}
	}
	if strings.Contains(stderr, "out of memory") || (inst != nil && inst.mod != nil && m.atMemoryCap(inst.mod)) {
		return &MemoryLimitError{Module: m.name, Call: call, LimitPages: m.limits.MemoryLimitPages, Stderr: stderr}
	}
	return &TrapError{Module: m.name, Call: call, Reason: err.Error(), Stderr: stderr}
}

// atMemoryCap reports whether mod's memory cannot grow by another 64 KiB page
// chunk of 16, i.e. a trap there is most likely a failed allocation.
func (m *Module) atMemoryCap(mod api.Module) bool {
	mem := mod.Memory()
	if mem == nil {
		return false
	}
	return mem.Size()/65536+16 > m.limits.MemoryLimitPages
}

func (m *Module) newCallState() *callState {
	return &callState{maxLines: m.limits.MaxLogLines, maxBytes: m.limits.MaxLogBytes}
}

// timeoutFor is the timeout that applied to a call, for error messages.
func (m *Module) timeoutFor(call string) time.Duration {
	if call == "load" || call == "_initialize" {
		return m.limits.InitTimeout
	}
	return m.limits.Timeout
}

// instance is one instantiation of the module. It is not safe for concurrent
// use; the pool hands it to one caller at a time.
type instance struct {
	mem                        *linmem.Memory // nil if the module has no memory
	mod                        api.Module
	fuel                       api.MutableGlobal
	alloc, manifest, reconcile api.Function
	stderr                     *tailBuffer
	clock                      *fuelClock
	calls                      int           // calls served
	idleSince                  time.Time     // when it was last put back idle
	res                        *reservation  // its memory cap, held from the MemoryBudget; nil for none
	memWait                    time.Duration // how long making it waited for res, until a call reports it
	done                       func()        // Module.doneWithCode, called once when it closes
}

// newInstance makes an instance for a call or a load. With a MemoryBudget
// it first reserves the instance's memory cap, waiting at most wait.
func (m *Module) newInstance(ctx context.Context, call string, wait time.Duration) (*instance, error) {
	var res *reservation
	var waited time.Duration
	if m.budget != nil {
		need := int64(m.limits.MemoryLimitPages) * pageBytes
		wctx, cancel := context.WithTimeout(ctx, wait)
		var err error
		res, waited, err = m.budget.acquire(wctx, need, m.name)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, &CanceledError{Module: m.name, Call: call}
			}
			e := &MemoryBudgetError{Module: m.name, Call: call, Need: need, Limit: m.budget.Limit(), Waited: waited}
			var b *budgetExceededError
			if errors.As(err, &b) {
				e.Reserved, e.Never = b.reserved, b.never
			}
			return nil, e
		}
	}
	c, err := m.useCode(ctx, call)
	if err != nil {
		res.Release()
		return nil, err
	}
	inst, err := m.instantiate(ctx, c)
	if err != nil {
		m.doneWithCode()
		res.Release()
		return nil, err
	}
	inst.res, inst.memWait, inst.done = res, waited, m.doneWithCode
	return inst, nil
}

func (m *Module) instantiate(ctx context.Context, c *code) (*instance, error) {
	stderr := &tailBuffer{max: 8192}
	clock := &fuelClock{}
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: many instances may coexist
		WithStartFunctions(abi.ExportInitialize).
		WithStderr(stderr).
		WithNanotime(clock.nanotime, 1).
		WithWalltime(clock.walltime, 1)
	// No WithFS, WithEnv, WithArgs or WithRandSource: the guest sees no
	// files, no environment and a deterministic random source; its clock
	// advances with the fuel it uses (fuelClock), never with real time.
	// The fuel global starts at 0, so _initialize refuels from this meter at
	// its first charge.
	start := time.Now()
	st := m.newCallState()
	ctx = withCallState(meter.WithMeter(ctx, &meter.Meter{Budget: m.limits.InitFuel, Slice: m.fuelSlice, Deadline: start.Add(m.limits.InitTimeout)}), st)
	alloc := &linmem.Allocator{Ctx: ctx, Deadline: start.Add(m.limits.InitTimeout)}
	clock.enter(ctx)
	mod, err := c.runtime.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), c.compiled, cfg)
	if init := meter.FromContext(ctx); init != nil {
		clock.exit(init.Consumed())
	}
	alloc.Memory.Exit() // the instantiation's call (see linmem.Allocator)
	st.reportDropped(ctx, m.name, "_initialize")
	if err != nil {
		return nil, m.classify(ctx, "_initialize", &instance{stderr: stderr}, time.Since(start), err)
	}
	fuel, ok := meter.Global(mod)
	if !ok {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("module[%s]: instance has no fuel global; this is a host bug", m.name)
	}
	return &instance{
		mem:       alloc.Memory,
		mod:       mod,
		fuel:      fuel,
		alloc:     mod.ExportedFunction(abi.ExportAlloc),
		manifest:  mod.ExportedFunction(abi.ExportManifest),
		reconcile: mod.ExportedFunction(abi.ExportReconcile),
		stderr:    stderr,
		clock:     clock,
	}, nil
}

// read copies a packed buffer out of guest memory. A packed 0 is an
// *ABIError: wr_manifest and wr_reconcile must return a document
// (docs/abi.md, "Calling convention").
func (i *instance) read(b abi.PackedBuffer, limit int) ([]byte, error) {
	if b == 0 {
		return nil, &ABIError{Reason: "returned packed 0 (no response); return a JSON document, at least {}"}
	}
	if int(b.Len()) > limit {
		return nil, &ABIError{Reason: fmt.Sprintf("response of %d bytes exceeds limits.maxResponseBytes of %d; raise the limit or return less", b.Len(), limit)}
	}
	buf, ok := i.mod.Memory().Read(b.Ptr(), b.Len())
	if !ok {
		return nil, &ABIError{Reason: fmt.Sprintf("response at %d+%d is outside guest memory of %d bytes", b.Ptr(), b.Len(), i.mod.Memory().Size())}
	}
	return append([]byte(nil), buf...), nil
}

func (i *instance) close(ctx context.Context) {
	if i.mod != nil {
		_ = i.mod.Close(ctx)
	}
	i.res.Release()
	if i.done != nil {
		i.done()
		i.done = nil
	}
}

// pool bounds the instances of a module. Healthy instances are reused;
// instances that hit any error are closed and replaced lazily. The fast path
// is one uncontended mutex; callers wait on a channel only when every
// instance is busy.
//
// Once reaping is on (startReaping), an instance idle for idleTimeout is
// closed by a timer, and a spare (an idle instance while another instance
// remains) idle for spareTimeout: idle is ordered by idleSince, because put
// appends and get takes the last (the warmest), so the expired ones are a
// prefix, and one timer, armed for the oldest, serves them all. An instance is either
// in idle, where only a holder of mu can take it, or held by one caller:
// the timer and get never both have it.
type pool struct {
	mu          sync.Mutex
	max         int
	busy        int         // calls holding an instance or creating one
	idle        []*instance // warm instances, the longest idle first
	closed      bool        // the module is closed: instances put back are closed
	idleTimeout time.Duration
	spareTime   time.Duration // spareTimeout: a spare's idle time before it is closed; <= 0: idleTimeout
	timer       *time.Timer   // armed while reaping is on and an instance is idle
	timerAt     time.Time     // when the timer fires
	reaped      func(n int)   // told how many idle instances the timer closed
	live        atomic.Int64
	freed       chan struct{} // a slot may be free; capacity 1
	// fresh makes an instance for call, waiting at most wait for its
	// memory (newInstance).
	fresh func(ctx context.Context, call string, wait time.Duration) (*instance, error)
	// budget, when set, may close the pool's idle instances to make room
	// for others (oldestIdle, evictOldest).
	budget *MemoryBudget
}

func newPool(max int, fresh func(context.Context, string, time.Duration) (*instance, error), budget *MemoryBudget) *pool {
	p := &pool{max: max, freed: make(chan struct{}, 1), fresh: fresh, budget: budget}
	if budget != nil {
		budget.addPool(p)
	}
	return p
}

// oldestIdle is when the longest idle instance was last put back.
func (p *pool) oldestIdle() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		return time.Time{}, false
	}
	return p.idle[0].idleSince, true
}

// evictOldest closes the longest idle instance, for the budget, and
// returns the bytes its reservation held (0 when there was none).
func (p *pool) evictOldest() int64 {
	p.mu.Lock()
	if len(p.idle) == 0 {
		p.mu.Unlock()
		return 0
	}
	taken := p.takeOldestLocked(1)
	p.mu.Unlock()
	var n int64
	if res := taken[0].res; res != nil {
		n = res.n
	}
	p.closeTaken(context.Background(), taken, nil)
	return n
}

// startReaping closes, from now on, every instance idle for timeout (none
// if timeout <= 0) and every spare idle for spare (as timeout if spare <=
// 0), and calls reaped with how many each time.
func (p *pool) startReaping(timeout, spare time.Duration, reaped func(n int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idleTimeout, p.spareTime, p.reaped = timeout, spare, reaped
	p.armLocked()
}

// expiryLocked is when idle[i] is to be closed, once the ones before it
// are: sooner for a spare, an instance that leaves another behind (a later
// idle one, or one a call holds). ok is false when it is never.
func (p *pool) expiryLocked(i int) (at time.Time, ok bool) {
	timeout := p.idleTimeout
	if spare := i < len(p.idle)-1 || p.busy > 0; spare && p.spareTime > 0 && (timeout <= 0 || p.spareTime < timeout) {
		timeout = p.spareTime
	}
	if timeout <= 0 {
		return time.Time{}, false
	}
	return p.idle[i].idleSince.Add(timeout), true
}

// armLocked starts the timer for the longest idle instance, or moves it
// sooner when that instance became a spare.
func (p *pool) armLocked() {
	if p.closed || len(p.idle) == 0 {
		return
	}
	at, ok := p.expiryLocked(0)
	if !ok || (p.timer != nil && !at.Before(p.timerAt)) {
		return
	}
	p.stopTimerLocked()
	p.timer, p.timerAt = time.AfterFunc(time.Until(at), func() { p.reap(time.Now()) }), at
}

// reap closes the instances idle for idleTimeout at now, and the spares
// idle for spareTimeout, and arms the timer for the next. It returns how
// many it closed. The timer calls it; a test may call it with a time of
// its own.
func (p *pool) reap(now time.Time) int {
	p.mu.Lock()
	p.stopTimerLocked() // a no-op when the timer is what called
	n := 0
	for n < len(p.idle) {
		at, ok := p.expiryLocked(n)
		if !ok || now.Before(at) {
			break
		}
		n++
	}
	expired := p.takeOldestLocked(n)
	p.armLocked()
	reaped := p.reaped
	p.mu.Unlock()
	p.closeTaken(context.Background(), expired, reaped)
	return n
}

// closeIdle closes every idle instance, unless a call holds or is making
// one; it reports whether the pool is left with no instance. The module's
// unloading calls it (unload.go); the closings count as the reaper's.
func (p *pool) closeIdle() bool {
	p.mu.Lock()
	if p.busy > 0 {
		p.mu.Unlock()
		return false
	}
	idle := p.takeOldestLocked(len(p.idle))
	p.stopTimerLocked()
	reaped := p.reaped
	p.mu.Unlock()
	p.closeTaken(context.Background(), idle, reaped)
	return true
}

// takeOldestLocked removes the n longest idle instances from the idle
// list and returns them. p.mu is held.
func (p *pool) takeOldestLocked(n int) []*instance {
	taken := append([]*instance(nil), p.idle[:n]...)
	rest := copy(p.idle, p.idle[n:])
	clear(p.idle[rest:]) // no stale references to closed instances
	p.idle = p.idle[:rest]
	return taken
}

// stopTimerLocked stops the reaper's timer. p.mu is held.
func (p *pool) stopTimerLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// closeTaken closes instances taken from the idle list, and tells reaped
// (nil: no one) how many.
func (p *pool) closeTaken(ctx context.Context, insts []*instance, reaped func(n int)) {
	for _, inst := range insts {
		inst.close(ctx)
		p.live.Add(-1)
	}
	if len(insts) > 0 && reaped != nil {
		reaped(len(insts))
	}
}

func (p *pool) get(ctx context.Context, call string, wait time.Duration) (*instance, error) {
	for {
		p.mu.Lock()
		if p.busy < p.max {
			p.busy++
			var inst *instance
			if n := len(p.idle); n > 0 {
				inst = p.idle[n-1]
				p.idle[n-1] = nil
				p.idle = p.idle[:n-1]
			}
			more := p.busy < p.max
			p.mu.Unlock()
			if more {
				p.signal() // pass the wake-up on to another waiter
			}
			if inst != nil {
				return inst, nil
			}
			inst, err := p.fresh(ctx, call, wait)
			if err != nil {
				p.release()
				return nil, err
			}
			p.live.Add(1)
			return inst, nil
		}
		p.mu.Unlock()
		select {
		case <-p.freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *pool) put(inst *instance, healthy bool) {
	p.mu.Lock()
	if !healthy || p.closed {
		p.mu.Unlock()
		inst.close(context.Background())
		p.live.Add(-1)
		p.release()
		return
	}
	inst.idleSince = time.Now()
	p.idle = append(p.idle, inst)
	p.busy--
	p.armLocked()
	p.mu.Unlock()
	p.signal()
}

// close closes the idle instances, and makes put close the busy ones when
// their calls end.
func (p *pool) close(ctx context.Context) {
	if p.budget != nil {
		p.budget.removePool(p)
	}
	p.mu.Lock()
	p.closed = true
	idle := p.takeOldestLocked(len(p.idle))
	p.stopTimerLocked()
	p.mu.Unlock()
	p.closeTaken(ctx, idle, nil) // the module's closing, not idleness
}

func (p *pool) release() {
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
	p.signal()
}

func (p *pool) signal() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// tailBuffer keeps the first and the last max/2 bytes written to it: a Go
// guest's fatal error names its cause in the first lines and the failing
// frames in the last.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	head    []byte
	tail    []byte
	dropped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := t.max/2 - len(t.head); room > 0 {
		k := min(room, len(p))
		t.head = append(t.head, p[:k]...)
		p = p[k:]
	}
	t.tail = append(t.tail, p...)
	if over := len(t.tail) - t.max/2; over > 0 {
		t.tail = append(t.tail[:0], t.tail[over:]...)
		t.dropped = true
	}
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped {
		return string(t.head) + "\n…\n" + string(t.tail)
	}
	return string(t.head) + string(t.tail)
}
