// Package supervisor runs module controllers and replaces them at run time.
// It owns the reload policy and every goroutine it starts.
//
// A Supervisor owns one controller per module name. Apply fetches a
// module's bytes from its source, verifies the pinned sha256, loads them
// (instrument, compile, read the manifest: all off the hot path) and then,
// between reconciles, either swaps the new version into the running
// controller's slot or, when the module now reconciles different kinds or
// its controller settings changed, stops the old controller and starts a new
// one. Calls already running finish on the old version. Every object of the
// module is then requeued. If anything fails before the swap, the old
// version keeps serving and Apply returns a typed error.
//
// Recently used versions stay compiled (Options.KeepVersions), so rolling
// back to a known digest is a pointer swap.
//
// The Supervisor is a manager Runnable that needs leader election: module
// controllers, requeues and load-health checks run only in the elected
// replica; Apply loads modules in every replica, so that a new leader
// reconciles at once.
package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Options configure a Supervisor. Fields marked required have no default.
type Options struct {
	// Manager runs the controllers and provides the cache, the RESTMapper,
	// the scheme and the Event recorders. Required.
	Manager ctrl.Manager
	// Client reads from the informer cache (unstructured objects included)
	// and writes to the API server. Required.
	Client client.Client
	// Engine loads modules. Required.
	Engine *engine.Engine
	// Identities gives the modules that name a Spec.ServiceAccount their
	// account's identity: writes and Events impersonate it, cache reads
	// are authorized for it. Defaults to identities of the Manager's
	// config with authz's defaults, made when first needed.
	Identities *authz.Identities
	// Metrics receive the per-module metrics. Required.
	Metrics *metrics.Metrics

	// Limits are the operator-wide limits; a Spec's non-zero limits override
	// them, and the module's manifest may lower them (never raise them).
	Limits engine.Limits
	// Storm configures storm damping for every module; see
	// reconciler.StormOptions for the defaults.
	Storm reconciler.StormOptions
	// TriggerMaxFanOut is reconciler.Options.TriggerMaxFanOut for every
	// module. Defaults to reconciler.DefaultTriggerMaxFanOut.
	TriggerMaxFanOut int
	// CallUnchanged is reconciler.Options.CallUnchanged for every module.
	// Defaults to false.
	CallUnchanged bool
	// Events is the budget of every module's guest Events; see
	// reconciler.EventBudget for the defaults.
	Events reconciler.EventBudget
	// ResponseLimits bound every module's responses; see protocol.Limits
	// for the defaults.
	ResponseLimits protocol.Limits
	// RateLimit is the default workqueue rate limiter of every module; see
	// package ratelimit for the defaults.
	RateLimit ratelimit.Options
	// MaxConcurrentReconciles is the default per module. Defaults to the
	// module's MaxInstances.
	MaxConcurrentReconciles int
	// KeepVersions is how many versions of each module stay compiled,
	// counting the one serving, so that a rollback is instant. Defaults to 3.
	KeepVersions int
	// StopTimeout bounds how long Start, once its context ends, waits for
	// the module controllers to stop before it returns (Close still waits
	// for them). Keep it under the manager's GracefulShutdownTimeout.
	// Defaults to 10 seconds.
	StopTimeout time.Duration
	// ModuleConfig is the config of modules whose Spec carries none, by
	// module name. Defaults to none.
	ModuleConfig map[string]map[string]any
	// ModuleReadNamespaces are, by module name, the namespaces beyond the
	// reconciled object's own that a module's guest may read; a Spec's
	// ReadNamespaces take their place. Defaults to none.
	ModuleReadNamespaces map[string][]string
	// Interpreter, when set, makes new bytes serve first from this engine
	// (one built with engine.Options{Interpreter: true}), which loads about
	// 5x faster than the compiler but runs guests tens of times slower;
	// the compiled version replaces it as soon as it is ready. Fuel is the
	// same on both, so results do not change; deadlines may be hit more
	// often meanwhile. Defaults to nil: new bytes serve once compiled.
	Interpreter *engine.Engine

	// LastEvent tells when the informer of a kind last saw an event or a
	// list, for CacheStale warnings. Defaults to nil: no staleness checks.
	LastEvent func(schema.GroupKind) time.Time
	// LastError tells the last error the informer of a kind reported since
	// its last list or event (a list refused as Forbidden), to say why a
	// module's cache has not synced. Defaults to nil: no reason given.
	LastError func(schema.GroupKind) error
	// HealthInterval is how often each module's caches are checked.
	// Defaults to 10 seconds.
	HealthInterval time.Duration
	// SyncTimeout is how long a module's caches may take to sync before a
	// SyncFailed warning. Defaults to 2 minutes.
	SyncTimeout time.Duration
	// StaleAfter is how long a module's kind may go without a watch event
	// (bookmarks count) or list before a CacheStale warning. Defaults to 10
	// minutes.
	StaleAfter time.Duration
	// QuiescentAfter is how long a converged module must write nothing to
	// be reported quiescent. Defaults to 1 minute.
	QuiescentAfter time.Duration

	// Log receives the supervisor's log lines. Defaults to
	// ctrl.Log.WithName("supervisor").
	Log logr.Logger
	// FlightRecorder, when set, keeps every module's failed calls and a
	// sample of its successful ones (package flightrecorder). Defaults to
	// nil: nothing is recorded.
	FlightRecorder *flightrecorder.Recorder
}

func (o Options) withDefaults() Options {
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.KeepVersions <= 0 {
		o.KeepVersions = 3
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 10 * time.Second
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 2 * time.Minute
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 10 * time.Minute
	}
	if o.QuiescentAfter <= 0 {
		o.QuiescentAfter = time.Minute
	}
	if o.Log.GetSink() == nil {
		o.Log = ctrl.Log.WithName("supervisor")
	}
	return o
}

// Spec is what to run as one module.
type Spec struct {
	// Name names the module: its controller, metrics label, field manager
	// and finalizer suffix. It must match the name in the module's
	// manifest. Defaults to the manifest's name.
	Name string
	// Source fetches the module's bytes. Required.
	Source source.Fetcher
	// SHA256, when set, pins the bytes: hex, optionally prefixed "sha256:".
	SHA256 string
	// Owner describes what declares the module, e.g. "the file
	// /m/widget.wasm" or "the ReconcileModule widget". A module of one name
	// is refused from a second owner, so that two files, or a file and a
	// ReconcileModule, cannot replace each other. Defaults to "".
	Owner string
	// Limits override Options.Limits where non-zero.
	Limits engine.Limits
	// Config is passed to the guest as Request.Config. Defaults to
	// Options.ModuleConfig[Name].
	Config map[string]any
	// Paused stops calling the guest; resuming requeues every object.
	Paused bool
	// MaxConcurrentReconciles overrides Options.MaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// RateLimit overrides Options.RateLimit where non-zero.
	RateLimit ratelimit.Options
	// Check, when set, vets a loaded module before it serves; an error
	// refuses it and the previous version keeps serving.
	Check func(*engine.Module) error
	// OnHealth receives the module's load-health changes (SyncFailed and
	// Synced, CacheStale and Fresh), in the leader. Defaults to logging
	// them.
	OnHealth func(HealthEvent)
	// ServiceAccount, "namespace/name", is the identity the module's writes
	// and cache reads are made with (impersonated). Defaults to "": the
	// operator's own identity.
	ServiceAccount string
	// ReadNamespaces are the namespaces beyond the reconciled object's own
	// that the guest may read through cache_read; "*" is every namespace.
	// Defaults to none.
	ReadNamespaces []string
}

// HealthEvent is a change in a module's load health: a Warning when a
// problem starts, and a Normal event when it ends.
type HealthEvent struct {
	Module  string
	Warning bool
	// Reason is SyncFailed, Synced, CacheStale or Fresh.
	Reason  string
	Message string
}

// Health reasons.
const (
	ReasonSyncFailed = "SyncFailed" // the module's kind's cache has not synced in Options.SyncTimeout
	ReasonSynced     = "Synced"
	ReasonCacheStale = "CacheStale" // no event or list for the module's kind in Options.StaleAfter
	ReasonFresh      = "Fresh"
)

// Loaded describes the version serving after a successful Apply.
type Loaded struct {
	Name   string
	Digest string // "sha256:<hex>" of the module's bytes
	Bytes  int
	At     time.Time
	// Compile is how long loading took (instrument, compile, manifest);
	// zero when the version was still compiled from before.
	Compile time.Duration
	// Result is how the version was put to serve: restarted, swapped,
	// cached or unchanged.
	Result   string
	Manifest abi.Manifest
}

// FetchError reports that a module's bytes could not be fetched.
type FetchError struct {
	Module, Source string
	Err            error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("module[%s] fetching %s: %v", e.Module, e.Source, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// DigestMismatchError reports bytes that do not match their pinned digest.
type DigestMismatchError struct {
	Module, Source, Want, Got string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("module[%s] from %s: bytes have %s but the source pins %s; update the pinned sha256 if the new bytes are intended, or fix the source",
		e.Module, e.Source, e.Got, e.Want)
}

// NameConflictError reports a module declared by two owners (two files, or
// a file and a ReconcileModule).
type NameConflictError struct {
	Module, Source, Owner string
}

func (e *NameConflictError) Error() string {
	return fmt.Sprintf("module[%s] from %s: a module of that name already runs from %s; rename one of them",
		e.Module, e.Source, e.Owner)
}

// NameMismatchError reports a module whose manifest names it differently
// from its Spec.
type NameMismatchError struct {
	Module, Source, Manifest string
}

// KindConflictError reports a module whose reconciled kind another module
// of the operator already reconciles: two modules of one kind would write
// the same objects' status, and each would see the other's children.
type KindConflictError struct {
	Module, Group, Kind string
	Other, Owner        string // the module already reconciling the kind, and what declares it
}

func (e *KindConflictError) Error() string {
	gk := e.Kind
	if e.Group != "" {
		gk += "." + e.Group
	}
	return fmt.Sprintf("module[%s]: %s is already reconciled by module %s (declared by %s); one kind has one module: remove one, or merge their logic", e.Module, gk, e.Other, e.Owner)
}

func (e *NameMismatchError) Error() string {
	return fmt.Sprintf("module[%s] from %s: the module's manifest names it %q; the names must match (a ReconcileModule is named after its module; a file keeps the module it first loaded, so remove it and add the new one)",
		e.Module, e.Source, e.Manifest)
}

// Supervisor runs module controllers. Create it with New and add it to the
// manager (mgr.Add); Apply and Remove may be called before or after the
// manager starts it.
type Supervisor struct {
	opts Options

	mu      sync.Mutex
	ctx     context.Context // the leader's, set while Start runs; nil otherwise
	modules map[string]*running
	closed  bool
	kinds   map[schema.GroupVersionKind]int // modules using each kind's informer

	drains map[string][]*drain // finalizers of removed or replaced modules being drained, by module name

	closing     context.Context // ends when Close is called: bounds background compiles and drains
	closeCancel context.CancelFunc

	// Every goroutine the supervisor starts is counted here and ends by
	// Close: controllers, requeues, retirements, background compiles and
	// the health loop.
	goroutines sync.WaitGroup
}

// running is one module.
type running struct {
	spec     Spec
	rec      *reconciler.Reconciler
	slot     *versionslot.Slot
	stats    *reconciler.Stats // kept across controller restarts
	paused   atomic.Bool
	requeue  chan event.GenericEvent
	versions []*cached // most recent first; versions[0] serves
	loaded   Loaded
	// candidate runs beside the serving version (SetCandidate); nil for
	// none. A new controller (a restart) starts without one.
	candidate *candidate

	cancel  context.CancelFunc // stops the controller; nil while it does not run
	stopped chan struct{}      // closed when the controller's goroutine returns
	events  *authz.Recorder    // posts as Spec.ServiceAccount; nil for the operator's identity

	health health
}

type cached struct {
	key     string // digest + limits
	version *versionslot.Version
}

// New returns a Supervisor.
func New(opts Options) (*Supervisor, error) {
	if opts.Manager == nil || opts.Client == nil || opts.Engine == nil || opts.Metrics == nil {
		return nil, errors.New("supervisor: Manager, Client, Engine and Metrics are required")
	}
	closing, cancel := context.WithCancel(context.Background())
	return &Supervisor{opts: opts.withDefaults(), modules: map[string]*running{}, kinds: map[schema.GroupVersionKind]int{},
		closing: closing, closeCancel: cancel}, nil
}

// NeedLeaderElection makes module controllers run only in the leader.
func (s *Supervisor) NeedLeaderElection() bool { return true }

// Start runs the controllers of every module applied so far, and of every
// module applied later, and checks their load health, until ctx is done;
// then it stops them, and returns once they and the health loop have.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.ctx = ctx
	for _, r := range s.modules {
		s.startController(r)
	}
	s.goroutines.Add(1)
	s.mu.Unlock()
	healthDone := make(chan struct{})
	go func() {
		defer s.goroutines.Done()
		defer close(healthDone)
		s.healthLoop(ctx)
	}()
	<-ctx.Done()
	s.mu.Lock()
	stopped := map[string]chan struct{}{}
	for name, r := range s.modules {
		if r.stopped != nil {
			stopped[name] = r.stopped
		}
		s.stopController(r)
	}
	s.ctx = nil
	s.mu.Unlock()
	// Return once the controllers and the health loop have, so that the
	// manager stops the caches they read after them; their running calls
	// end at once, cancelled. The wait is bounded well inside the manager's
	// graceful-shutdown timeout: a controller that takes longer is logged
	// and left to Close, which waits for every goroutine.
	deadline := time.NewTimer(s.opts.StopTimeout)
	defer deadline.Stop()
	for name, ch := range stopped {
		select {
		case <-ch:
		case <-deadline.C:
			var late []string
			for n, c := range stopped {
				select {
				case <-c:
				default:
					late = append(late, n)
				}
			}
			sort.Strings(late)
			s.opts.Log.Info("module controllers still stopping; Close waits for them", "modules", late, "waited", s.opts.StopTimeout.String())
			return nil
		}
		delete(stopped, name)
	}
	select {
	case <-healthDone:
	case <-deadline.C:
	}
	return nil
}

// Digest returns the "sha256:<hex>" digest of wasm.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Apply makes spec the running version of module spec.Name. It returns once
// the new version serves (and its objects are being requeued), or with an
// error and the previous version still serving: a *FetchError,
// *DigestMismatchError, *engine.InvalidModuleError, *NameMismatchError,
// *NameConflictError, or the error of spec.Check.
func (s *Supervisor) Apply(ctx context.Context, spec Spec) (Loaded, error) {
	label := spec.Name // for messages and metrics until the manifest names the module
	if label == "" {
		label = filepath.Base(spec.Source.String()) // "widget.wasm" for "file /m/widget.wasm"
	}
	fail := func(err error) (Loaded, error) {
		s.opts.Metrics.Reloads.WithLabelValues(label, "failed").Inc()
		return Loaded{}, err
	}
	wasm, err := spec.Source.Fetch(ctx)
	if err != nil {
		return fail(&FetchError{Module: label, Source: spec.Source.String(), Err: err})
	}
	if len(wasm) == 0 {
		return fail(&FetchError{Module: label, Source: spec.Source.String(), Err: errors.New("no bytes; the source is empty")})
	}
	digest := Digest(wasm)
	if spec.SHA256 != "" {
		if want := "sha256:" + strings.TrimPrefix(strings.ToLower(spec.SHA256), "sha256:"); want != digest {
			return fail(&DigestMismatchError{Module: label, Source: spec.Source.String(), Want: want, Got: digest})
		}
	}
	limits := mergeLimits(s.opts.Limits, spec.Limits)
	key := fmt.Sprintf("%s/%+v", digest, limits)

	// A version still kept for these bytes and limits is reused as is.
	var version *versionslot.Version
	s.mu.Lock()
	for name, r := range s.modules {
		if spec.Name != "" && name != spec.Name {
			continue
		}
		for _, c := range r.versions {
			if c.key == key {
				version, spec.Name = c.version, name
			}
		}
		if c := r.candidate; version == nil && c != nil && c.key == key {
			version, spec.Name = c.version, name // a promotion: the candidate's compiled code serves at once
		}
	}
	s.mu.Unlock()

	// Otherwise load, off the hot path: the running version serves meanwhile.
	loaded := Loaded{Digest: digest, Bytes: len(wasm)}
	reused, interpreted := version != nil, false
	if !reused {
		start := time.Now()
		loader := s.opts.Engine
		if s.opts.Interpreter != nil {
			loader, interpreted = s.opts.Interpreter, true
		}
		// A compile may take seconds (a worker's limits bound it): say
		// that one started, and the "module applied" line says it ended.
		s.opts.Log.Info("loading module: instrumenting and compiling", "module", label, "source", spec.Source.String(), "digest", digest, "bytes", len(wasm), "interpreter", interpreted)
		m, err := loader.Load(ctx, label, wasm, limits)
		if err != nil {
			if spec.Name == "" {
				return fail(err) // the engine's error names the source
			}
			return fail(fmt.Errorf("module[%s] from %s: %w", label, spec.Source, err))
		}
		loaded.Compile = time.Since(start)
		s.opts.Metrics.CompileSeconds.WithLabelValues(m.Name()).Observe(loaded.Compile.Seconds())
		version = versionslot.New(m)
	}
	// discard refuses the version: a new one is closed, a kept one stays.
	discard := func(err error) (Loaded, error) {
		if !reused {
			_ = version.Module.Close(ctx)
		}
		return fail(err)
	}
	m := version.Module
	if spec.Name == "" {
		spec.Name, label = m.Name(), m.Name()
	}
	if m.Name() != spec.Name {
		return discard(&NameMismatchError{Module: spec.Name, Source: spec.Source.String(), Manifest: m.Name()})
	}
	if spec.Check != nil {
		if err := spec.Check(m); err != nil {
			return discard(err)
		}
	}
	if err := protocol.CheckOwnership(m.Manifest(), protocol.Chain(protocol.MapperScopes(s.opts.Manager.GetRESTMapper()), protocol.Builtin)); err != nil {
		return discard(&engine.InvalidModuleError{Module: m.Name(), Reason: "manifest: " + err.Error(), Hint: "fix the module's manifest (docs/abi.md, \"Manifest\")"})
	}
	if spec.Config == nil {
		spec.Config = s.opts.ModuleConfig[spec.Name]
	}
	if spec.ReadNamespaces == nil {
		spec.ReadNamespaces = s.opts.ModuleReadNamespaces[spec.Name]
	}
	loaded.Name, loaded.At, loaded.Manifest = spec.Name, time.Now(), m.Manifest()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return discard(errors.New("supervisor: closed"))
	}
	r := s.modules[spec.Name] // it may have changed while loading
	if r != nil && r.spec.Owner != spec.Owner {
		return discard(&NameConflictError{Module: spec.Name, Source: spec.Source.String(), Owner: r.spec.Owner})
	}
	for name, other := range s.modules {
		if f, g := other.slot.Current(), m.Manifest().For; name != spec.Name && f != nil &&
			f.Module.Manifest().For.Group == g.Group && f.Module.Manifest().For.Kind == g.Kind {
			return discard(&KindConflictError{Module: spec.Name, Kind: g.Kind, Group: g.Group, Other: name, Owner: other.spec.Owner})
		}
	}
	loaded.Result, err = s.serve(r, spec, version, reused)
	if err != nil {
		return discard(err)
	}
	r = s.modules[spec.Name]
	r.loaded = loaded
	if c := r.candidate; c != nil && c.version == version {
		// The candidate was promoted: it serves now, and no longer shadows.
		r.candidate = nil
		r.rec.SetShadow(nil)
		s.closeCandidate(r, c, false)
	}
	if interpreted {
		s.remember(r, key+"#interpreter", version)
		s.goroutines.Add(1)
		go func() {
			defer s.goroutines.Done()
			s.upgrade(spec, wasm, limits, key, version)
		}()
	} else {
		s.remember(r, key, version)
	}
	s.opts.Metrics.Reloads.WithLabelValues(spec.Name, loaded.Result).Inc()
	s.opts.Log.Info("module applied", "module", spec.Name, "source", spec.Source.String(), "digest", digest, "result", loaded.Result,
		"compile", loaded.Compile.String(), "paused", spec.Paused)
	return loaded, nil
}

// serve is the reload policy: it makes version serve module spec.Name and
// says how. A new module, one whose kinds changed, or one whose controller
// settings (config, concurrency, rate) changed gets a new controller:
// "restarted". Otherwise the version is swapped into the running slot:
// "swapped" for new bytes, "cached" for a version kept compiled, or
// "unchanged". A swap or a resume requeues every object. s.mu is held.
func (s *Supervisor) serve(r *running, spec Spec, version *versionslot.Version, reused bool) (string, error) {
	restart := r == nil || sameKinds(r.slot.Current().Module, version.Module) != nil || !controllerSettingsEqual(r.spec, spec)
	if restart {
		next := &running{stats: &reconciler.Stats{}, requeue: make(chan event.GenericEvent), health: health{since: time.Now()}}
		if r != nil {
			next.stats, next.versions = r.stats, r.versions
			next.health.syncWarned, next.health.staleWarned = r.health.syncWarned, r.health.staleWarned
			next.health.unserved = watchedOnly(r.health.unserved, version.Module.Manifest()) // the same episodes: not reported again
		}
		next.slot = versionslot.NewSlot(version)
		next.paused.Store(spec.Paused)
		ropts := reconciler.Options{
			Slot: next.slot, Client: s.opts.Client, APIReader: s.opts.Manager.GetAPIReader(),
			Recorder: s.opts.Manager.GetEventRecorder("wasmreconcile/" + spec.Name),
			Metrics:  s.opts.Metrics, Stats: next.stats,
			Scopes: protocol.Chain(protocol.MapperScopes(s.opts.Manager.GetRESTMapper()), protocol.Builtin),
			Config: spec.Config, Paused: next.paused.Load, Storm: s.opts.Storm, TriggerMaxFanOut: s.opts.TriggerMaxFanOut, CallUnchanged: s.opts.CallUnchanged, ResponseLimits: s.opts.ResponseLimits,
			Events: s.opts.Events, ReadNamespaces: spec.ReadNamespaces, FlightRecorder: s.opts.FlightRecorder,
		}
		if spec.ServiceAccount != "" {
			if err := s.impersonate(&ropts, next, spec, version.Module.Manifest().For); err != nil {
				return "", err
			}
		}
		rec, err := reconciler.New(ropts)
		if err != nil {
			if next.events != nil {
				next.events.Stop()
			}
			return "", err
		}
		next.rec, next.spec = rec, spec
		s.holdKinds(version.Module.Manifest())
		s.cancelDrainsFor(spec.Name, version.Module.Manifest())
		if r != nil {
			// The old controller stops; its running calls finish on the
			// versions they hold. Its slot is closed so that its workers
			// return at once.
			s.releaseIdentity(r)
			stopped := r.stopped
			s.stopController(r)
			r.slot.Close()
			if c := r.candidate; c != nil {
				// The new controller starts without a candidate (its rules
				// may differ); the candidate's version goes unless it is
				// the one about to serve.
				r.candidate = nil
				r.rec.SetShadow(nil)
				s.closeCandidate(r, c, c.version != version)
			}
			// A finalizer the new version does not declare (for the same
			// kind) is drained from the old kind's objects once the old
			// controller has stopped; the old kinds are released then.
			old := r.rec.Manifest()
			release := func() { s.releaseKinds(old) }
			if m := version.Module.Manifest(); m.Finalizer && r.rec.Kind() == gvkOf(m.For) {
				release()
			} else {
				s.drainAfter(spec.Name, r.rec, stopped, release)
			}
		}
		s.modules[spec.Name] = next
		if s.ctx != nil {
			s.startController(next) // its initial list reconciles every object
		}
		return "restarted", nil
	}
	result := "swapped"
	if r.slot.Current() == version {
		result = "unchanged"
	} else {
		if _, err := r.slot.Swap(version); err != nil {
			return "", err
		}
		if reused {
			result = "cached"
		}
	}
	resumed := r.paused.Swap(spec.Paused) && !spec.Paused
	r.spec = spec
	if (resumed || result != "unchanged") && !spec.Paused {
		s.requeueAll(r)
	}
	return result, nil
}

// requeueAll requeues every object of r into its running controller, in
// the background; nothing when the controller does not run (a standby: a
// new leader's controllers list every object anyway). s.mu is held.
func (s *Supervisor) requeueAll(r *running) {
	if r.cancel == nil {
		return
	}
	ctx, rec, ch, stopped := s.ctx, r.rec, r.requeue, r.stopped
	ctx, cancel := context.WithCancel(ctx)
	s.goroutines.Add(2)
	go func() { // the controller stopping ends the requeue
		defer s.goroutines.Done()
		select {
		case <-stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer s.goroutines.Done()
		defer cancel()
		if err := rec.RequeueAll(ctx, ch); err != nil && ctx.Err() == nil {
			s.opts.Log.Info("requeue after reload failed; objects are reconciled on their next event", "module", rec.Name(), "error", err.Error())
		}
	}()
}

// upgrade compiles the bytes and, if the interpreted version still serves,
// swaps the compiled one in and retires the interpreted one.
func (s *Supervisor) upgrade(spec Spec, wasm []byte, limits engine.Limits, key string, interpreted *versionslot.Version) {
	ctx := s.closing
	start := time.Now()
	m, err := s.opts.Engine.Load(ctx, spec.Source.String(), wasm, limits)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Log.Info("compiling after serving from the interpreter failed; the interpreter keeps serving", "module", spec.Name, "error", err.Error())
		}
		return
	}
	s.opts.Metrics.CompileSeconds.WithLabelValues(spec.Name).Observe(time.Since(start).Seconds())
	compiled := versionslot.New(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[spec.Name]
	if s.closed || r == nil || r.slot.Current() != interpreted {
		_ = m.Close(ctx) // superseded or removed meanwhile
		return
	}
	if _, err := r.slot.Swap(compiled); err != nil {
		_ = m.Close(ctx)
		return
	}
	kept := []*cached{{key: key, version: compiled}}
	for _, c := range r.versions {
		if c.version != interpreted {
			kept = append(kept, c)
		}
	}
	r.versions = kept
	s.retire(interpreted)
	s.opts.Metrics.Reloads.WithLabelValues(spec.Name, "upgraded").Inc()
	s.opts.Log.Info("compiled version replaced the interpreted one", "module", spec.Name, "compile", time.Since(start).String())
}

// remember puts version first in r's versions and retires the ones beyond
// KeepVersions once their running calls finish. s.mu is held.
func (s *Supervisor) remember(r *running, key string, v *versionslot.Version) {
	kept := []*cached{{key: key, version: v}}
	for _, c := range r.versions {
		if c.version == v {
			continue
		}
		if len(kept) < s.opts.KeepVersions {
			kept = append(kept, c)
			continue
		}
		s.retire(c.version)
	}
	r.versions = kept
}

// retire closes v once its running calls finish, in the background.
// s.mu is held.
func (s *Supervisor) retire(v *versionslot.Version) {
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		_ = v.Retire(context.Background())
	}()
}

// Remove stops module name's controller and closes its versions. Objects
// keep their status and children; nothing is deleted. The module's
// finalizer, if it declares one, is then removed from every object of its
// kind in the background (Draining), so that no deletion waits for a
// module that is gone. It reports whether the module ran.
func (s *Supervisor) Remove(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.modules[name]
	if !ok {
		return false
	}
	s.releaseIdentity(r)
	stopped := r.stopped
	s.stopController(r)
	r.slot.Close()
	s.dropCandidate(r)
	for _, c := range r.versions {
		s.retire(c.version)
	}
	delete(s.modules, name)
	s.opts.FlightRecorder.Forget(name) // its records are freed
	// Its finalizer, if it declares one, is drained from its objects (in
	// the background, see Draining), which keeps its kinds' informers
	// until then.
	old := r.rec.Manifest()
	s.drainAfter(name, r.rec, stopped, func() { s.releaseKinds(old) })
	s.opts.Log.Info("module removed", "module", name)
	return true
}

// kindsOf lists the kinds whose informers a module uses: its own, owned
// and read kinds.
func kindsOf(m abi.Manifest) []schema.GroupVersionKind {
	gvk := func(g abi.GroupVersionKind) schema.GroupVersionKind {
		return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
	}
	out := []schema.GroupVersionKind{gvk(m.For)}
	for _, g := range m.Owns {
		out = append(out, gvk(g))
	}
	for _, g := range m.Reads {
		out = append(out, gvk(g))
	}
	return out
}

// holdKinds counts a module's use of its kinds' informers. s.mu is held.
func (s *Supervisor) holdKinds(m abi.Manifest) {
	for _, gvk := range kindsOf(m) {
		s.kinds[gvk]++
	}
}

// releaseKinds ends a module's use of its kinds' informers, and removes
// the informers no module uses any more from the manager's cache, so that
// a removed module leaves no watch (and no cached objects) behind. s.mu is
// held.
func (s *Supervisor) releaseKinds(m abi.Manifest) {
	for _, gvk := range kindsOf(m) {
		if s.kinds[gvk]--; s.kinds[gvk] > 0 {
			continue
		}
		delete(s.kinds, gvk)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		if err := s.opts.Manager.GetCache().RemoveInformer(context.Background(), obj); err != nil {
			s.opts.Log.Info("informer of a removed module's kind not removed", "kind", gvk.String(), "error", err.Error())
		}
	}
}

// Close stops every module's controller and closes every version, waiting
// for calls still running (each bounded by its module's deadline) and for
// every goroutine the supervisor started. Call it once the manager has
// stopped, before closing the engine.
func (s *Supervisor) Close(ctx context.Context) error {
	s.closeCancel() // a background compile stops waiting to serve
	s.mu.Lock()
	s.closed = true
	var versions []*versionslot.Version
	for name, r := range s.modules {
		s.releaseIdentity(r)
		s.stopController(r)
		r.slot.Close()
		s.dropCandidate(r)
		for _, c := range r.versions {
			versions = append(versions, c.version)
		}
		delete(s.modules, name)
	}
	s.mu.Unlock()
	// The versions are retired by goroutines of the supervisor's, like every
	// other retirement, so that the wait below covers them all.
	var mu sync.Mutex
	var errs []error
	for _, v := range versions {
		s.goroutines.Add(1)
		go func() {
			defer s.goroutines.Done()
			if err := v.Retire(context.Background()); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { s.goroutines.Wait(); close(done) }()
	var late error
	select {
	case <-done:
	case <-ctx.Done():
		late = fmt.Errorf("supervisor: goroutines still running at close: %w", ctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(append(errs, late)...)
}

// startController starts r's controller under s.ctx. s.mu is held.
func (s *Supervisor) startController(r *running) {
	rl := s.opts.RateLimit
	if r.spec.RateLimit.BaseDelay > 0 {
		rl.BaseDelay = r.spec.RateLimit.BaseDelay
	}
	if r.spec.RateLimit.MaxDelay > 0 {
		rl.MaxDelay = r.spec.RateLimit.MaxDelay
	}
	if r.spec.RateLimit.QPS > 0 {
		rl.QPS = r.spec.RateLimit.QPS
	}
	if r.spec.RateLimit.Burst > 0 {
		rl.Burst = r.spec.RateLimit.Burst
	}
	workers := s.opts.MaxConcurrentReconciles
	if r.spec.MaxConcurrentReconciles > 0 {
		workers = r.spec.MaxConcurrentReconciles
	}
	newController := func() (crcontroller.Controller, error) {
		return r.rec.NewController(s.opts.Manager, reconciler.ControllerOptions{
			MaxConcurrentReconciles: workers, RateLimiter: ratelimit.New(rl), Requeue: r.requeue,
		})
	}
	c, err := newController()
	if err != nil && !meta.IsNoMatchError(err) {
		s.opts.Log.Error(err, "controller not started", "module", r.spec.Name)
		return
	}
	r.health.since = time.Now() // the sync timeout runs from here: a standby's modules loaded long before it leads
	ctx, cancel := context.WithCancel(s.ctx)
	report := s.informerReport(r)
	ctx = reconciler.WithInformerReport(ctx, report)
	stopped := make(chan struct{})
	r.cancel, r.stopped = cancel, stopped
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		defer close(stopped)
		defer cancel() // a controller that fails to start releases its sources too
		// A kind the controller indexes (an owned kind, the reconciled kind
		// of a field trigger) is not served: its CRD is not installed.
		// Report the module's unserved kinds as its sources would, and
		// build the controller again every InformerRetry until they are.
		for attempt := 1; err != nil; attempt++ {
			s.reportUnserved(r.rec.Manifest(), err, attempt, report)
			select {
			case <-ctx.Done():
				return
			case <-time.After(reconciler.InformerRetry):
			}
			if c, err = newController(); err != nil && !meta.IsNoMatchError(err) {
				s.opts.Log.Error(err, "controller not started", "module", r.spec.Name)
				return
			}
		}
		// A controller whose kinds do not sync in its CacheSyncTimeout (the
		// operator may not list one) stops with an error: it is started
		// again, with backoff, until its controller is replaced or removed.
		// The module is unready meanwhile (Ready, Status.SyncProblem); the
		// other modules are not affected.
		backoff := reconciler.InformerRetry
		for {
			err := c.Start(ctx)
			if ctx.Err() != nil {
				return
			}
			s.opts.Log.Error(err, "module controller stopped; starting it again", "module", r.spec.Name, "after", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Minute)
			if c, err = newController(); err != nil {
				s.opts.Log.Error(err, "controller not started", "module", r.spec.Name)
				return
			}
		}
	}()
}

// reportUnserved reports to report the kinds of m the API server does not
// serve, found with the RESTMapper, after building a controller of m
// failed with err, a "no match" error; err itself for the reconciled kind
// when the mapper finds none.
func (s *Supervisor) reportUnserved(m abi.Manifest, err error, attempt int, report func(reconciler.InformerState)) {
	found := false
	for _, g := range append(append([]abi.GroupVersionKind{m.For}, m.Owns...), m.Reads...) {
		gvk := gvkOf(g)
		if _, merr := s.opts.Manager.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(merr) {
			report(reconciler.InformerState{GVK: gvk, Err: merr, Attempt: attempt})
			found = true
		}
	}
	if !found {
		report(reconciler.InformerState{GVK: gvkOf(m.For), Err: err, Attempt: attempt})
	}
}

// impersonate gives the reconciler of module spec, reconciling forKind,
// the identity of spec.ServiceAccount: its writes, and the guest's Events,
// impersonate the account; the object, its children and the guest's cache
// reads are read only where the account may read (SubjectAccessReviews,
// cached); the host's own Warnings stay the operator's, so that a refused
// write is reported even when the account may not create Events. next
// keeps the Event recorder, which releaseIdentity stops. s.mu is held.
func (s *Supervisor) impersonate(opts *reconciler.Options, next *running, spec Spec, forKind abi.GroupVersionKind) error {
	if s.opts.Identities == nil {
		ids, err := authz.NewIdentities(s.opts.Manager.GetConfig(), s.opts.Manager.GetHTTPClient(), s.opts.Manager.GetScheme(),
			s.opts.Manager.GetRESTMapper(), authz.Options{})
		if err != nil {
			return err
		}
		s.opts.Identities = ids
	}
	id, err := s.opts.Identities.Get(spec.ServiceAccount)
	if err != nil {
		return fmt.Errorf("module[%s]: %w", spec.Name, err)
	}
	host := opts.Recorder
	opts.Client = id.Reader(opts.Client, spec.Name, schema.GroupVersionKind{Group: forKind.Group, Version: forKind.Version, Kind: forKind.Kind}, host)
	opts.Writer, opts.Authorize = id.Writer(), id.Authorize
	next.events = id.Recorder(spec.Name, "wasmreconcile/"+spec.Name, host, hostReason)
	opts.Recorder = next.events
	return nil
}

// hostReason tells the host's own Warnings (a reconcile's outcome, a
// storm) from the guest's Events.
func hostReason(eventtype, reason string) bool {
	if eventtype != corev1.EventTypeWarning {
		return false
	}
	if reason == reconciler.ReasonReconcileStorm || reason == reconciler.ReasonMemoryBudgetWait {
		return true
	}
	return slices.Contains(protocol.Kinds, protocol.Kind(reason))
}

// releaseIdentity stops r's impersonating Event recorder, if any, once
// r's controller has stopped (its last reconciles may still record).
// s.mu is held.
func (s *Supervisor) releaseIdentity(r *running) {
	events, stopped := r.events, r.stopped
	if events == nil {
		return
	}
	r.events = nil
	if stopped == nil {
		events.Stop()
		return
	}
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		<-stopped
		events.Stop()
	}()
}

// stopController stops r's controller, if running. s.mu is held.
func (s *Supervisor) stopController(r *running) {
	if r.cancel != nil {
		r.cancel()
		r.cancel, r.stopped = nil, nil
	}
}

// sameKinds reports whether b can replace a in a running controller: the
// same name, kind, owned and read kinds, triggers and finalizer.
func sameKinds(a, b *engine.Module) error {
	ma, mb := a.Manifest(), b.Manifest()
	switch {
	case a.Name() != b.Name():
		return fmt.Errorf("module name changed from %s to %s", a.Name(), b.Name())
	case ma.For != mb.For:
		return fmt.Errorf("module[%s]: reconciled kind changed from %v to %v", a.Name(), ma.For, mb.For)
	case !reflect.DeepEqual(ma.Owns, mb.Owns) || !reflect.DeepEqual(ma.Reads, mb.Reads):
		return fmt.Errorf("module[%s]: owned or read kinds changed", a.Name())
	case !reflect.DeepEqual(ma.Triggers, mb.Triggers):
		return fmt.Errorf("module[%s]: triggers changed", a.Name())
	case ma.Finalizer != mb.Finalizer:
		return fmt.Errorf("module[%s]: finalizer declaration changed", a.Name())
	}
	return nil
}

// controllerSettingsEqual reports whether a and b need the same controller:
// the same config, concurrency, rate limits, identity and read scope (the
// bytes may differ).
func controllerSettingsEqual(a, b Spec) bool {
	return reflect.DeepEqual(a.Config, b.Config) && a.MaxConcurrentReconciles == b.MaxConcurrentReconciles && a.RateLimit == b.RateLimit &&
		a.ServiceAccount == b.ServiceAccount && reflect.DeepEqual(a.ReadNamespaces, b.ReadNamespaces)
}

// mergeLimits returns base with the non-zero fields of override.
func mergeLimits(base, override engine.Limits) engine.Limits {
	if override.Fuel != 0 {
		base.Fuel = override.Fuel
	}
	if override.InitFuel != 0 {
		base.InitFuel = override.InitFuel
	}
	if override.Timeout != 0 {
		base.Timeout = override.Timeout
	}
	if override.InitTimeout != 0 {
		base.InitTimeout = override.InitTimeout
	}
	if override.MemoryLimitPages != 0 {
		base.MemoryLimitPages = override.MemoryLimitPages
	}
	if override.MaxRequestBytes != 0 {
		base.MaxRequestBytes = override.MaxRequestBytes
	}
	if override.MaxResponseBytes != 0 {
		base.MaxResponseBytes = override.MaxResponseBytes
	}
	if override.MaxInstances != 0 {
		base.MaxInstances = override.MaxInstances
	}
	if override.FreshInstancePerCall {
		base.FreshInstancePerCall = true
	}
	if override.MaxLogLines != 0 {
		base.MaxLogLines = override.MaxLogLines
	}
	if override.MaxLogBytes != 0 {
		base.MaxLogBytes = override.MaxLogBytes
	}
	if override.MaxTableElements != 0 {
		base.MaxTableElements = override.MaxTableElements
	}
	if override.MaxCallDepth != 0 {
		base.MaxCallDepth = override.MaxCallDepth
	}
	if override.RecycleAfterCalls != 0 {
		base.RecycleAfterCalls = override.RecycleAfterCalls
	}
	if override.RecycleMemoryPages != 0 {
		base.RecycleMemoryPages = override.RecycleMemoryPages
	}
	if override.IdleInstanceTimeout != 0 {
		base.IdleInstanceTimeout = override.IdleInstanceTimeout
	}
	return base
}
