// Package policy is what an operator decides for each module it runs, as
// one value: how much a call may use, how a module's storms are damped, how
// many Events it may record, what its responses may hold, how fast its
// queue retries, how many of its objects reconcile at once and what it may
// read.
//
// A Policy is built in layers, each a Policy whose zero fields say "not
// set here": the operator's flags fill operator.Options.Policy, and a
// module's own layer (operator.Module.Policy, a ReconcileModule's spec; for
// ReadNamespaces also operator.Options.ModuleReadNamespaces) is merged over
// it with Merge. The supervisor keeps the merged policy, with WithDefaults
// applied, as the one that serves and passes it by value to the module's
// reconciler, controller and load. WithDefaults is idempotent, and every
// consumer reads a zero field as its default, so a Policy built by hand
// works as well. A module's manifest may then only lower Limits
// (engine.Engine.Load).
package policy

import (
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Policy is one module's policy. Zero fields take the defaults stated on
// them (WithDefaults), except Limits, whose zero fields take the module's
// manifest's and then the engine's defaults.
type Policy struct {
	// Limits bound each call of the module's guest: fuel, deadline,
	// memory, instances, guest log lines and bytes (engine.Limits). Zero
	// fields take the manifest's, then the engine's defaults; the engine's
	// ceilings cap them.
	Limits engine.Limits
	// Storm damps reconcile storms: of each object, and of each related
	// object a trigger maps.
	Storm Storm
	// Events budgets the Events the guest records.
	Events Events
	// Response bounds every response (docs/abi.md, "Response rules"); see
	// protocol.Limits for the defaults. `operator test` takes the same.
	Response protocol.Limits
	// RateLimit paces the module's workqueue.
	RateLimit RateLimit
	// MaxConcurrentReconciles is how many of the module's objects
	// reconcile at once. Defaults to 0: the module's instance count as
	// loaded (engine.Module.Limits().MaxInstances), so that no worker waits
	// for an instance.
	MaxConcurrentReconciles int
	// ReadNamespaces are the namespaces beyond the reconciled object's own
	// whose objects the guest may read through cache_read ("*": every
	// namespace). Defaults to none: the object's namespace, and
	// cluster-scoped kinds. A nil slice is "not set" (Merge keeps the
	// layer below); an empty one sets none.
	ReadNamespaces []string
	// TriggerMaxFanOut caps the objects one event of a related object
	// reconciles through a selector or all trigger; the others are dropped
	// and counted (wasmreconcile_trigger_fanout_dropped_total). Defaults
	// to DefaultTriggerMaxFanOut (1000).
	TriggerMaxFanOut int
	// CallUnchanged calls the guest for every event, even one that
	// carries nothing the guest can react to, such as the event of the
	// host's own status write (docs/abi.md, "When the guest is called").
	// Defaults to false: such events are answered without a call. A layer
	// can only turn it on.
	CallUnchanged bool
}

// Storm configures storm damping: an object reconciled more than Threshold
// times within Window without any change (same generation, same children,
// same module version, and nothing written) is quiescent; its guest is
// then called at most once per Backoff until it changes. Zero fields take
// the stated defaults.
type Storm struct {
	// Threshold is the number of unchanged reconciles that make a storm.
	// Defaults to DefaultStormThreshold (20).
	Threshold int
	// Window is the period they must fall in. Defaults to
	// DefaultStormWindow (10 s).
	Window time.Duration
	// Backoff is the interval between guest calls while quiescent.
	// Defaults to DefaultStormBackoff (1 minute).
	Backoff time.Duration
	// Disabled turns damping off. Defaults to false.
	Disabled bool
}

// Events bounds the Events a module's guest records (Response.events):
// every Event takes a token from its object's bucket and one from the
// module's, and an Event either bucket cannot pay for is dropped and
// counted (wasmreconcile_events_dropped_total). The host's own Warning
// Events (a failed reconcile, a storm) are not budgeted: the workqueue's
// retry backoff already paces them, and a guest that spends its budget must
// not hide its own failures. Zero fields take the stated defaults.
type Events struct {
	// ObjectQPS is the rate at which an object's bucket refills, in Events
	// per second. Defaults to DefaultEventObjectQPS (0.1: one per 10 s).
	ObjectQPS float64
	// ObjectBurst is the size of an object's bucket: the Events an object
	// that recorded none for a while may record at once. Defaults to
	// DefaultEventObjectBurst (10, the most one response may ask for).
	ObjectBurst int
	// ModuleQPS is the rate at which the module's bucket refills.
	// Defaults to DefaultEventModuleQPS (10 per second).
	ModuleQPS float64
	// ModuleBurst is the size of the module's bucket. Defaults to
	// DefaultEventModuleBurst (100).
	ModuleBurst int
	// Disabled records every Event. Defaults to false.
	Disabled bool
}

// RateLimit configures a module's workqueue: per-object exponential
// backoff for failures, combined (the slower wins) with an overall token
// bucket, as controller-runtime's default rate limiter. Zero fields take
// the stated defaults, which are controller-runtime's.
type RateLimit struct {
	// BaseDelay is the first retry delay of a failing object; it doubles
	// on every failure. Defaults to DefaultRetryBaseDelay (5 ms).
	BaseDelay time.Duration
	// MaxDelay caps the per-object delay. Defaults to DefaultRetryMaxDelay
	// (1000 s).
	MaxDelay time.Duration
	// QPS is the overall rate of the bucket. Defaults to DefaultQueueQPS
	// (10).
	QPS float64
	// Burst is the bucket size. Defaults to DefaultQueueBurst (100).
	Burst int
}

// The defaults WithDefaults fills in.
const (
	DefaultStormThreshold = 20
	DefaultStormWindow    = 10 * time.Second
	DefaultStormBackoff   = time.Minute

	DefaultEventObjectQPS   = 0.1
	DefaultEventObjectBurst = 10
	DefaultEventModuleQPS   = 10
	DefaultEventModuleBurst = 100

	DefaultRetryBaseDelay = 5 * time.Millisecond
	DefaultRetryMaxDelay  = 1000 * time.Second
	DefaultQueueQPS       = 10
	DefaultQueueBurst     = 100

	DefaultTriggerMaxFanOut = 1000
)

// WithDefaults returns p with every zero field set to its default but those
// of Limits and MaxConcurrentReconciles: the loaded module decides those
// (the manifest, the engine's defaults and ceilings; see
// engine.Module.Limits).
func (p Policy) WithDefaults() Policy {
	p.Storm = p.Storm.WithDefaults()
	p.Events = p.Events.WithDefaults()
	p.RateLimit = p.RateLimit.WithDefaults()
	p.Response = p.Response.WithDefaults()
	if p.TriggerMaxFanOut <= 0 {
		p.TriggerMaxFanOut = DefaultTriggerMaxFanOut
	}
	return p
}

// WithDefaults returns s with zero fields set to the defaults.
func (s Storm) WithDefaults() Storm {
	s.Threshold = orDefault(s.Threshold, DefaultStormThreshold)
	s.Window = orDefault(s.Window, DefaultStormWindow)
	s.Backoff = orDefault(s.Backoff, DefaultStormBackoff)
	return s
}

// WithDefaults returns e with zero fields set to the defaults.
func (e Events) WithDefaults() Events {
	e.ObjectQPS = orDefault(e.ObjectQPS, DefaultEventObjectQPS)
	e.ObjectBurst = orDefault(e.ObjectBurst, DefaultEventObjectBurst)
	e.ModuleQPS = orDefault(e.ModuleQPS, DefaultEventModuleQPS)
	e.ModuleBurst = orDefault(e.ModuleBurst, DefaultEventModuleBurst)
	return e
}

// WithDefaults returns r with zero fields set to the defaults.
func (r RateLimit) WithDefaults() RateLimit {
	r.BaseDelay = orDefault(r.BaseDelay, DefaultRetryBaseDelay)
	r.MaxDelay = orDefault(r.MaxDelay, DefaultRetryMaxDelay)
	r.QPS = orDefault(r.QPS, DefaultQueueQPS)
	r.Burst = orDefault(r.Burst, DefaultQueueBurst)
	return r
}

// Merge returns p with the fields over sets: every non-zero field of over,
// and of its Limits, Storm, Events, Response and RateLimit, field by field,
// replaces p's; a non-nil over.ReadNamespaces replaces p's; CallUnchanged
// and the Disabled switches are on when either is. Merging never fills a
// default: a zero in both stays zero, for WithDefaults.
func (p Policy) Merge(over Policy) Policy {
	p.Limits = MergeLimits(p.Limits, over.Limits)
	p.Storm = Storm{
		Threshold: pick(p.Storm.Threshold, over.Storm.Threshold),
		Window:    pick(p.Storm.Window, over.Storm.Window),
		Backoff:   pick(p.Storm.Backoff, over.Storm.Backoff),
		Disabled:  p.Storm.Disabled || over.Storm.Disabled,
	}
	p.Events = Events{
		ObjectQPS:   pick(p.Events.ObjectQPS, over.Events.ObjectQPS),
		ObjectBurst: pick(p.Events.ObjectBurst, over.Events.ObjectBurst),
		ModuleQPS:   pick(p.Events.ModuleQPS, over.Events.ModuleQPS),
		ModuleBurst: pick(p.Events.ModuleBurst, over.Events.ModuleBurst),
		Disabled:    p.Events.Disabled || over.Events.Disabled,
	}
	p.Response = protocol.Limits{
		MaxEvents:       pick(p.Response.MaxEvents, over.Response.MaxEvents),
		MaxRequeueAfter: pick(p.Response.MaxRequeueAfter, over.Response.MaxRequeueAfter),
		MaxObjectBytes:  pick(p.Response.MaxObjectBytes, over.Response.MaxObjectBytes),
	}
	p.RateLimit = RateLimit{
		BaseDelay: pick(p.RateLimit.BaseDelay, over.RateLimit.BaseDelay),
		MaxDelay:  pick(p.RateLimit.MaxDelay, over.RateLimit.MaxDelay),
		QPS:       pick(p.RateLimit.QPS, over.RateLimit.QPS),
		Burst:     pick(p.RateLimit.Burst, over.RateLimit.Burst),
	}
	p.MaxConcurrentReconciles = pick(p.MaxConcurrentReconciles, over.MaxConcurrentReconciles)
	if over.ReadNamespaces != nil {
		p.ReadNamespaces = append(make([]string, 0, len(over.ReadNamespaces)), over.ReadNamespaces...)
	}
	p.TriggerMaxFanOut = pick(p.TriggerMaxFanOut, over.TriggerMaxFanOut)
	p.CallUnchanged = p.CallUnchanged || over.CallUnchanged
	return p
}

// MergeLimits is Merge for Limits alone: over's non-zero fields (and a
// true FreshInstancePerCall) replace l's.
func MergeLimits(l, over engine.Limits) engine.Limits {
	return engine.Limits{
		Fuel:                 pick(l.Fuel, over.Fuel),
		InitFuel:             pick(l.InitFuel, over.InitFuel),
		InitTimeout:          pick(l.InitTimeout, over.InitTimeout),
		Timeout:              pick(l.Timeout, over.Timeout),
		MemoryLimitPages:     pick(l.MemoryLimitPages, over.MemoryLimitPages),
		MaxRequestBytes:      pick(l.MaxRequestBytes, over.MaxRequestBytes),
		MaxResponseBytes:     pick(l.MaxResponseBytes, over.MaxResponseBytes),
		MaxInstances:         pick(l.MaxInstances, over.MaxInstances),
		FreshInstancePerCall: l.FreshInstancePerCall || over.FreshInstancePerCall,
		MaxLogLines:          pick(l.MaxLogLines, over.MaxLogLines),
		MaxLogBytes:          pick(l.MaxLogBytes, over.MaxLogBytes),
		MaxTableElements:     pick(l.MaxTableElements, over.MaxTableElements),
		RecycleAfterCalls:    pick(l.RecycleAfterCalls, over.RecycleAfterCalls),
		RecycleMemoryPages:   pick(l.RecycleMemoryPages, over.RecycleMemoryPages),
		IdleInstanceTimeout:  pick(l.IdleInstanceTimeout, over.IdleInstanceTimeout),
		IdleSpareTimeout:     pick(l.IdleSpareTimeout, over.IdleSpareTimeout),
		IdleModuleTimeout:    pick(l.IdleModuleTimeout, over.IdleModuleTimeout),
		MaxCallDepth:         pick(l.MaxCallDepth, over.MaxCallDepth),
	}
}

type number interface {
	~int | ~int64 | ~uint32 | ~uint64 | ~float64
}

// pick returns over unless it is zero.
func pick[T number](v, over T) T {
	if over != 0 {
		return over
	}
	return v
}

// orDefault returns v, or def when v is not positive.
func orDefault[T number](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
