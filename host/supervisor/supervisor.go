// Package supervisor runs module controllers and replaces them at run time.
//
// A Supervisor owns one controller per module name. Apply loads a module's
// bytes (verify the pinned sha256, instrument, compile, read the manifest:
// all off the hot path) and then, between reconciles, either swaps the new
// version into the running controller or, when the module now reconciles
// different kinds, stops the old controller and starts a new one. Calls
// already running finish on the old version. Every object of the module is
// then requeued. If anything fails before the swap, the old version keeps
// serving and Apply returns the error.
//
// Recently used versions stay compiled (Options.KeepVersions), so rolling
// back to a known digest is a pointer swap.
//
// The Supervisor is a manager Runnable that needs leader election: module
// controllers run only in the elected replica.
package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
)

// Options configure a Supervisor. Zero fields take the stated defaults.
type Options struct {
	// Limits are the operator-wide limits; a Spec's non-zero limits override
	// them, and the module's manifest fills what both leave unset.
	Limits engine.Limits

	// Storm configures storm damping for every module; see
	// reconciler.StormOptions for the defaults.
	Storm reconciler.StormOptions

	// RateLimit is the default workqueue rate limiter of every module; see
	// package ratelimit for the defaults.
	RateLimit ratelimit.Options

	// MaxConcurrentReconciles is the default per module. Defaults to the
	// module's MaxInstances.
	MaxConcurrentReconciles int

	// KeepVersions is how many versions of each module stay compiled,
	// counting the one serving, so that a rollback is instant. Defaults to 3.
	KeepVersions int

	// ModuleConfig is the config of modules whose Spec carries none, by
	// module name. Defaults to none.
	ModuleConfig map[string]map[string]any

	// Interpreter, when set, makes new bytes serve first from this engine
	// (one built with engine.Options{Interpreter: true}), which loads about
	// 5x faster than the compiler but runs guests tens of times slower;
	// the compiled version replaces it as soon as it is ready. Fuel is the
	// same on both, so results do not change; deadlines may be hit more
	// often meanwhile. Defaults to nil: new bytes serve once compiled.
	Interpreter *engine.Engine
}

// Spec is what to run as one module.
type Spec struct {
	// Name names the module: its controller, metrics label, field manager
	// and finalizer suffix. It must match the name in the module's
	// manifest. Defaults to the manifest's name.
	Name string
	// Source describes where Wasm came from, for messages (a path, a
	// ConfigMap, a URL).
	Source string
	// Wasm is the module's bytes.
	Wasm []byte
	// SHA256, when set, pins Wasm: hex, optionally prefixed "sha256:".
	SHA256 string
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
	// Owner describes what declares the module, e.g. "a file /m/widget.wasm"
	// or "the ReconcileModule widget". A module of one name is refused from
	// a second owner, so that two files, or a file and a ReconcileModule,
	// cannot replace each other. Defaults to "".
	Owner string
}

// Loaded describes the version serving after a successful Apply.
type Loaded struct {
	Name   string
	Digest string // "sha256:<hex>" of the module's bytes
	At     time.Time
	// Compile is how long loading took (instrument, compile, manifest);
	// zero when the version was still compiled from before.
	Compile time.Duration
	// Restarted reports that the controller was replaced (the module's
	// kinds changed, or it is new) rather than swapped in place.
	Restarted bool
	Module    *engine.Module
}

// DigestMismatchError reports bytes that do not match their pinned digest.
type DigestMismatchError struct {
	Module, Source, Want, Got string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("module[%s] from %s: bytes have %s but the source pins %s; update the pinned sha256 if the new bytes are intended, or fix the source",
		e.Module, e.Source, e.Got, e.Want)
}

// NameConflictError reports a module declared by two owners (a file and a
// ReconcileModule).
type NameConflictError struct {
	Module, Source, Owner string
}

func (e *NameConflictError) Error() string {
	return fmt.Sprintf("module[%s] from %s: a module of that name already runs from %s; rename one of them",
		e.Module, e.Source, e.Owner)
}

// Supervisor runs module controllers. Create it with New and add it to the
// manager (mgr.Add); Apply and Remove may be called before or after the
// manager starts.
type Supervisor struct {
	mgr  ctrl.Manager
	eng  *engine.Engine
	opts Options
	log  func(msg string, kv ...any)

	mu      sync.Mutex
	ctx     context.Context // set once the manager starts the Supervisor
	modules map[string]*running
	closed  bool // Close was called: no more upgrades

	upgrades sync.WaitGroup // background compiles (Options.Interpreter)
}

type running struct {
	spec     Spec
	rec      *reconciler.Reconciler
	ctx      context.Context    // the controller's; nil while it does not run
	cancel   context.CancelFunc // stops the controller; nil before Start
	versions []*cached          // most recent first; versions[0] serves
}

type cached struct {
	key     string // digest + limits
	version *reconciler.Version
}

var (
	reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "wasmreconcile_module_reloads_total",
		Help: "Module loads by Apply, by result: swapped (in place), restarted (new controller), cached (a compiled version reused), unchanged, failed.",
	}, []string{"module", "result"})
	compileSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "wasmreconcile_module_compile_seconds",
		Help:    "Time to instrument, compile and validate a module's new bytes.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
	}, []string{"module"})
)

func init() { crmetrics.Registry.MustRegister(reloads, compileSeconds) }

// New returns a Supervisor that loads modules with eng and runs their
// controllers in mgr.
func New(mgr ctrl.Manager, eng *engine.Engine, opts Options) *Supervisor {
	if opts.KeepVersions <= 0 {
		opts.KeepVersions = 3
	}
	logger := ctrl.Log.WithName("supervisor")
	return &Supervisor{mgr: mgr, eng: eng, opts: opts, modules: map[string]*running{},
		log: func(msg string, kv ...any) { logger.Info(msg, kv...) }}
}

// NeedLeaderElection makes module controllers run only in the leader.
func (s *Supervisor) NeedLeaderElection() bool { return true }

// Start starts the controllers of every module applied so far, and of every
// module applied later, until ctx is done; then it stops them. Remove closes
// a module's versions.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	for _, r := range s.modules {
		s.startController(r)
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.modules {
		s.stop(r)
	}
	s.ctx = nil
	return nil
}

// Digest returns the "sha256:<hex>" digest of wasm.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Apply makes spec the running version of module spec.Name. It returns once
// the new version serves (and every object is requeued), or with an error
// and the previous version still serving.
func (s *Supervisor) Apply(ctx context.Context, spec Spec) (Loaded, error) {
	label := spec.Name // for messages and metrics until the manifest names the module
	if label == "" {
		label = filepath.Base(spec.Source) // e.g. "widget.wasm"
	}
	if len(spec.Wasm) == 0 {
		return Loaded{}, fmt.Errorf("module[%s] from %s: no bytes; the source is empty", label, spec.Source)
	}
	digest := Digest(spec.Wasm)
	if spec.SHA256 != "" {
		want := "sha256:" + strings.TrimPrefix(strings.ToLower(spec.SHA256), "sha256:")
		if want != digest {
			reloads.WithLabelValues(label, "failed").Inc()
			return Loaded{}, &DigestMismatchError{Module: label, Source: spec.Source, Want: want, Got: digest}
		}
	}
	limits := mergeLimits(s.opts.Limits, spec.Limits)
	key := fmt.Sprintf("%s/%+v", digest, limits)

	// A version still kept for these bytes and limits is reused as is.
	s.mu.Lock()
	var version *reconciler.Version
	for name, r := range s.modules {
		if spec.Name != "" && name != spec.Name {
			continue
		}
		for _, c := range r.versions {
			if c.key == key {
				version, spec.Name = c.version, name
			}
		}
	}
	s.mu.Unlock()

	// Otherwise load, off the hot path: the running version serves meanwhile.
	var loaded Loaded
	reused, interpreted := version != nil, false
	if !reused {
		start := time.Now()
		loader := s.eng
		if s.opts.Interpreter != nil {
			loader, interpreted = s.opts.Interpreter, true
		}
		m, err := loader.Load(ctx, label, spec.Wasm, limits)
		if err != nil {
			reloads.WithLabelValues(label, "failed").Inc()
			if spec.Name == "" {
				return Loaded{}, err // the engine's error names the file
			}
			return Loaded{}, fmt.Errorf("module[%s] from %s: %w", label, spec.Source, err)
		}
		loaded.Compile = time.Since(start)
		compileSeconds.WithLabelValues(m.Name()).Observe(loaded.Compile.Seconds())
		version = reconciler.NewVersion(m)
	}
	// discard refuses the version: a new one is closed, a kept one stays.
	discard := func(err error) (Loaded, error) {
		if !reused {
			_ = version.Module.Close(ctx)
		}
		reloads.WithLabelValues(label, "failed").Inc()
		return Loaded{}, err
	}
	m := version.Module
	if spec.Name == "" {
		spec.Name, label = m.Name(), m.Name()
	}
	if m.Name() != spec.Name {
		return discard(fmt.Errorf("module[%s] from %s: the module's manifest names it %q; the names must match (a ReconcileModule is named after its module; a file keeps the module it first loaded, so remove it and add the new one)",
			spec.Name, spec.Source, m.Name()))
	}
	if spec.Check != nil {
		if err := spec.Check(m); err != nil {
			return discard(err)
		}
	}
	if spec.Config == nil {
		spec.Config = s.opts.ModuleConfig[spec.Name]
	}
	loaded.Name, loaded.Digest, loaded.At, loaded.Module = spec.Name, digest, time.Now(), m

	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[spec.Name] // it may have changed while loading
	if r != nil && r.spec.Owner != spec.Owner {
		return discard(&NameConflictError{Module: spec.Name, Source: spec.Source, Owner: r.spec.Owner})
	}
	if r == nil {
		r = &running{}
		s.modules[spec.Name] = r
	}
	restart := r.rec == nil || reconciler.SameKinds(r.rec.Module(), m) != nil || !controllerSettingsEqual(r.spec, spec)
	result := "swapped"
	switch {
	case restart:
		// New, different kinds, or different controller settings: a new
		// controller. The old one stops; its running calls finish.
		s.stop(r)
		r.rec = reconciler.NewWithVersion(s.mgr.GetClient(), s.mgr.GetEventRecorder("wasmreconcile/"+spec.Name), version, s.reconcilerOptions(spec))
		result, loaded.Restarted = "restarted", true
	case r.versions[0].version == version:
		result = "unchanged"
	default:
		if _, err := r.rec.SwapVersion(version); err != nil {
			return Loaded{}, err // checked by SameKinds above
		}
		if reused {
			result = "cached"
		}
	}
	r.spec = spec
	resumed := r.rec.SetPaused(spec.Paused)
	switch {
	case restart && s.ctx != nil:
		s.startController(r) // its initial list reconciles every object
	case (resumed || result == "swapped" || result == "cached") && !spec.Paused && r.ctx != nil:
		go func(rec *reconciler.Reconciler, ctx context.Context) {
			if err := rec.RequeueAll(ctx); err != nil && ctx.Err() == nil {
				s.log("requeue after reload failed; objects are reconciled on their next event", "module", spec.Name, "error", err.Error())
			}
		}(r.rec, r.ctx)
	}
	reloads.WithLabelValues(spec.Name, result).Inc()
	if interpreted {
		s.remember(r, key+"#interpreter", version)
		s.upgrades.Add(1)
		go func() {
			defer s.upgrades.Done()
			s.upgrade(spec, limits, key, version)
		}()
	} else {
		s.remember(r, key, version)
	}
	s.log("module applied", "module", spec.Name, "source", spec.Source, "digest", digest, "result", result,
		"compile", loaded.Compile.String(), "paused", spec.Paused)
	return loaded, nil
}

// upgrade compiles spec's bytes and, if the interpreted version still
// serves, swaps the compiled one in and retires the interpreted one.
func (s *Supervisor) upgrade(spec Spec, limits engine.Limits, key string, interpreted *reconciler.Version) {
	ctx := context.Background()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	start := time.Now()
	m, err := s.eng.Load(ctx, spec.Source, spec.Wasm, limits)
	if err != nil {
		s.log("compiling after serving from the interpreter failed; the interpreter keeps serving", "module", spec.Name, "error", err.Error())
		return
	}
	compileSeconds.WithLabelValues(spec.Name).Observe(time.Since(start).Seconds())
	compiled := reconciler.NewVersion(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.modules[spec.Name]
	if s.closed || r == nil || r.rec == nil || len(r.versions) == 0 || r.versions[0].version != interpreted {
		_ = m.Close(ctx) // superseded or removed meanwhile
		return
	}
	if _, err := r.rec.SwapVersion(compiled); err != nil {
		_ = m.Close(ctx)
		return
	}
	kept := []*cached{{key: key, version: compiled}}
	for _, c := range r.versions[1:] {
		kept = append(kept, c)
	}
	r.versions = kept
	go func() { _ = interpreted.Retire(context.Background()) }()
	reloads.WithLabelValues(spec.Name, "upgraded").Inc()
	s.log("compiled version replaced the interpreted one", "module", spec.Name, "compile", time.Since(start).String())
}

// remember puts version first in r's versions and retires the ones beyond
// KeepVersions once their running calls finish.
func (s *Supervisor) remember(r *running, key string, v *reconciler.Version) {
	kept := []*cached{{key: key, version: v}}
	for _, c := range r.versions {
		if c.version == v {
			continue
		}
		if len(kept) < s.opts.KeepVersions {
			kept = append(kept, c)
			continue
		}
		go func() { _ = c.version.Retire(context.Background()) }()
	}
	r.versions = kept
}

// Remove stops module name's controller and closes its versions. Objects
// keep their status and children; nothing is deleted.
func (s *Supervisor) Remove(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.modules[name]
	if !ok {
		return false
	}
	s.stop(r)
	for _, c := range r.versions {
		go func() { _ = c.version.Retire(context.Background()) }()
	}
	delete(s.modules, name)
	metrics.Untrack(name)
	s.log("module removed", "module", name)
	return true
}

// Close stops every module's controller and closes every version, waiting
// for calls still running (each is bounded by its module's deadline). Call
// it once the manager has stopped, before closing the engine.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.upgrades.Wait() // a compile in flight must not outlive the engine
	s.mu.Lock()
	var versions []*reconciler.Version
	for name, r := range s.modules {
		s.stop(r)
		for _, c := range r.versions {
			versions = append(versions, c.version)
		}
		delete(s.modules, name)
		metrics.Untrack(name)
	}
	s.mu.Unlock()
	var errs []error
	for _, v := range versions {
		errs = append(errs, v.Retire(ctx))
	}
	return errors.Join(errs...)
}

// Reconciler returns module name's reconciler, or nil.
func (s *Supervisor) Reconciler(name string) *reconciler.Reconciler {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.modules[name]; r != nil {
		return r.rec
	}
	return nil
}

// Reconcilers lists the reconcilers of the modules applied.
func (s *Supervisor) Reconcilers() []*reconciler.Reconciler {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*reconciler.Reconciler
	for _, r := range s.modules {
		out = append(out, r.rec)
	}
	return out
}

// Names lists the modules applied.
func (s *Supervisor) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.modules {
		names = append(names, n)
	}
	return names
}

// startController starts r's controller under s.ctx. s.mu is held.
func (s *Supervisor) startController(r *running) {
	c, err := r.rec.NewController(s.mgr, s.reconcilerOptions(r.spec))
	if err != nil {
		s.log("controller not started", "module", r.spec.Name, "error", err.Error())
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	r.ctx, r.cancel = ctx, cancel
	go func() {
		if err := c.Start(ctx); err != nil && ctx.Err() == nil {
			s.log("controller stopped with an error", "module", r.spec.Name, "error", err.Error())
		}
	}()
}

// stop stops r's controller, if running. s.mu is held.
func (s *Supervisor) stop(r *running) {
	if r.cancel != nil {
		r.cancel()
		r.ctx, r.cancel = nil, nil
	}
}

func (s *Supervisor) reconcilerOptions(spec Spec) reconciler.Options {
	rl := s.opts.RateLimit
	if spec.RateLimit.BaseDelay > 0 {
		rl.BaseDelay = spec.RateLimit.BaseDelay
	}
	if spec.RateLimit.MaxDelay > 0 {
		rl.MaxDelay = spec.RateLimit.MaxDelay
	}
	if spec.RateLimit.QPS > 0 {
		rl.QPS = spec.RateLimit.QPS
	}
	if spec.RateLimit.Burst > 0 {
		rl.Burst = spec.RateLimit.Burst
	}
	workers := s.opts.MaxConcurrentReconciles
	if spec.MaxConcurrentReconciles > 0 {
		workers = spec.MaxConcurrentReconciles
	}
	return reconciler.Options{Config: spec.Config, Storm: s.opts.Storm, RateLimiter: ratelimit.New(rl), MaxConcurrentReconciles: workers}
}

// controllerSettingsEqual reports whether a and b need the same controller:
// the same config, concurrency and rate limits (the bytes may differ).
func controllerSettingsEqual(a, b Spec) bool {
	return reflect.DeepEqual(a.Config, b.Config) && a.MaxConcurrentReconciles == b.MaxConcurrentReconciles && a.RateLimit == b.RateLimit
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
	return base
}
