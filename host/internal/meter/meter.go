// Package meter is the runtime half of fuel metering: it provides the
// refuel host import that instrumented modules call (see package instrument)
// and keeps the fuel account of one call.
//
// A call's fuel is handed out in slices. The host sets the module's fuel
// global to the first slice before the call; when the guest's counter goes
// negative it calls refuel, which:
//
//  1. stops the call if its context is canceled or past its deadline, or
//     past Meter.Deadline;
//  2. stops the call if the budget is spent (*ExhaustedError);
//  3. otherwise grants the next slice from the remaining budget.
//
// Every refuel is a return from machine code into Go, so it is also where the
// Go scheduler can preempt the goroutine and where a stop-the-world GC can
// proceed. The slice size bounds how long a guest runs between those points.
package meter

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
)

// DefaultSlice is the fuel granted per refuel when a Meter's Slice is 0.
// See docs/benchmarks.md for the measurement behind it.
const DefaultSlice = 1 << 20

// Meter is the fuel account of one call. It is not safe for concurrent use:
// a call runs on one goroutine.
type Meter struct {
	// Budget is the total fuel the call may use.
	Budget uint64
	// Slice is the fuel granted per refuel. Defaults to DefaultSlice.
	Slice uint64
	// Deadline, when set, stops the call at the first refuel after it, like
	// a context deadline but without a timer per call.
	Deadline time.Time

	granted uint64 // fuel handed to the guest so far
	ctx     context.Context
	global  api.MutableGlobal // the metered instance's fuel global, once known
}

// ExhaustedError reports a call stopped because it used its whole budget.
type ExhaustedError struct {
	Used, Budget uint64
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("fuel exhausted after %d units (budget %d)", e.Used, e.Budget)
}

// StoppedError reports a call stopped at a refuel because its context ended.
// Err is context.Canceled or context.DeadlineExceeded.
type StoppedError struct{ Err error }

func (e *StoppedError) Error() string { return "stopped: " + e.Err.Error() }
func (e *StoppedError) Unwrap() error { return e.Err }

// DepthError reports a call stopped because it went deeper than the
// instrumenter's MaxCallDepth.
type DepthError struct{}

func (e *DepthError) Error() string { return "call depth limit exceeded" }

type ctxKey struct{}

// WithMeter returns a context that carries m; calls into instrumented
// modules made with it are metered by m, and stopped when it ends.
func WithMeter(ctx context.Context, m *Meter) context.Context {
	m.ctx = ctx
	return context.WithValue(ctx, ctxKey{}, m)
}

// FromContext returns the Meter carried by ctx, or nil.
func FromContext(ctx context.Context) *Meter {
	m, _ := ctx.Value(ctxKey{}).(*Meter)
	return m
}

func (m *Meter) slice() uint64 {
	if m.Slice == 0 {
		return DefaultSlice
	}
	return m.Slice
}

// grant hands out the next slice and returns it, or 0 when the budget is spent.
func (m *Meter) grant() uint64 {
	if m.granted >= m.Budget {
		return 0
	}
	g := min(m.slice(), m.Budget-m.granted)
	m.granted += g
	return g
}

// Start prepares mod for a call metered by m: it grants the first slice by
// writing the module's fuel global. It returns false if mod is not
// instrumented.
func (m *Meter) Start(mod api.Module) bool {
	g, ok := Global(mod)
	if !ok {
		return false
	}
	m.StartGlobal(g)
	return true
}

// StartGlobal is Start for a fuel global already looked up with Global.
func (m *Meter) StartGlobal(g api.MutableGlobal) {
	m.global = g
	g.Set(m.grant())
}

// Used is the fuel consumed so far by calls into mod metered by m: what was
// granted minus what is left in the module's fuel global (which is negative
// when the call overran its last slice).
func (m *Meter) Used(mod api.Module) uint64 {
	g, ok := Global(mod)
	if !ok {
		return 0
	}
	return m.UsedGlobal(g)
}

// Consumed is the fuel used so far by the call this meter meters: what was
// granted minus what is left in the guest's fuel global, once the meter
// knows it (before that, what was granted).
func (m *Meter) Consumed() uint64 {
	if m.global == nil {
		return m.granted
	}
	return m.UsedGlobal(m.global)
}

// UsedGlobal is Used for a fuel global already looked up with Global.
func (m *Meter) UsedGlobal(g api.MutableGlobal) uint64 {
	left := int64(g.Get())
	return uint64(int64(m.granted) - left)
}

// Global returns the fuel global of an instrumented module.
func Global(mod api.Module) (api.MutableGlobal, bool) { return fuelGlobal(mod) }

func fuelGlobal(mod api.Module) (api.MutableGlobal, bool) {
	g, ok := mod.ExportedGlobal(instrument.ExportFuel).(api.MutableGlobal)
	return g, ok
}

// Instantiate adds the host module that instrumented modules import to rt.
// Instantiate it once per runtime, before instrumented modules.
func Instantiate(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(instrument.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(refuel), nil, nil).
		Export(instrument.ImportRefuel).
		Instantiate(ctx)
	return err
}

// refuel is called by an instrumented module when its fuel counter goes
// negative. It panics with *StoppedError or *ExhaustedError to stop the call;
// wazero turns the panic into the error returned by api.Function.Call.
func refuel(ctx context.Context, mod api.Module, _ []uint64) {
	m := FromContext(ctx)
	if m == nil {
		panic(fmt.Errorf("metered module called without a meter in its context; this is a host bug"))
	}
	g, _ := fuelGlobal(mod)
	m.global = g
	if int64(g.Get()) == instrument.DepthExceeded {
		g.Set(0) // the counter was overwritten: Used reports what was granted
		panic(&DepthError{})
	}
	m.check()
	g.Set(uint64(m.cover(int64(g.Get()))))
	// Yield so that a guest spinning on this P cannot starve other
	// goroutines, and so that a pending GC stop-the-world proceeds.
	runtime.Gosched()
}

// check panics with *StoppedError when the call's context has ended or its
// deadline has passed.
func (m *Meter) check() {
	if err := m.ctx.Err(); err != nil {
		panic(&StoppedError{Err: err})
	}
	if !m.Deadline.IsZero() && !time.Now().Before(m.Deadline) {
		panic(&StoppedError{Err: context.DeadlineExceeded})
	}
}

// cover grants from the budget what a counter of left needs to be
// non-negative again plus the next slice, and returns the new counter. It
// panics with *ExhaustedError when the budget cannot cover the deficit: a
// charge over what remains never runs.
func (m *Meter) cover(left int64) int64 {
	if left >= 0 {
		return left
	}
	deficit := uint64(-left)
	if rem := m.Budget - m.granted; deficit > rem {
		panic(&ExhaustedError{Used: m.granted + deficit, Budget: m.Budget})
	}
	m.granted += deficit
	return int64(m.grant())
}

// Charge bills units of work that the host does for the guest (in a host
// function) to the call metered by the Meter in ctx, after checking the
// call's context and deadline. It panics with *StoppedError or
// *ExhaustedError, as refuel does, which stops the call: a host function
// calls it on entry, before the work, and between steps when it works long.
// It does nothing when ctx carries no Meter.
func Charge(ctx context.Context, units uint64) {
	m := FromContext(ctx)
	if m == nil {
		return
	}
	m.check()
	if m.global == nil || units == 0 {
		return
	}
	units = min(units, math.MaxInt64/2)
	left := int64(m.global.Get()) - int64(units)
	m.global.Set(uint64(left)) // so that Used counts the charge if cover panics
	if left < 0 {
		m.global.Set(uint64(m.cover(left)))
	}
}
