// Package supervisor runs module controllers and replaces them at run time.
// It owns the reload policy and every goroutine it starts.
//
// The Supervisor coordinates; each job is a type of its own, with its own
// tests: loading (load.go: the loader fetches, verifies and compiles;
// versions.go: the versions kept compiled), controller lifecycle
// (lifecycle.go: start, build again while a kind is not served, restart
// with backoff, stop; controllers.go: the reload policy that decides
// between a swap and a new controller, and requeues; identity.go:
// impersonation), rollout (rollout.go: a candidate beside the serving
// version, its canary share, and how it ends, replaced, dropped,
// restarted away or promoted; candidate.go fetches and compiles it),
// drain (drain.go: the drainer waits out a removed module's finalizers)
// and health (health.go: the health type decides a module's load-health
// episodes from what the informers and each check report; readiness).
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
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/statusapply"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
)

// Supervisor runs module controllers. Create it with New and add it to the
// manager (mgr.Add); Apply and Remove may be called before or after the
// manager starts it.
type Supervisor struct {
	opts   Options
	loader loader // fetch, verify, compile (load.go)

	mu      sync.Mutex
	ctx     context.Context // the leader's, set while Start runs; nil otherwise
	modules map[string]*running
	yielded map[string]Spec // specs of Spec.Yields set aside for a module of another owner, by name
	closed  bool
	kinds   map[schema.GroupVersionKind]int // modules using each kind's informer

	statuses *statusapply.Applier // the operator's own status writes; nil without a Manager config

	drainer   *drainer   // finalizers of removed or replaced modules (drain.go)
	lifecycle *lifecycle // starts, restarts and stops controllers (lifecycle.go)
	rollout   *rollout   // candidates: shadow, canary, promotion (rollout.go)

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
	stopped <-chan struct{}    // closed when the controller's goroutine returns
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
	opts = opts.withDefaults()
	closing, cancel := context.WithCancel(context.Background())
	s := &Supervisor{opts: opts, modules: map[string]*running{}, yielded: map[string]Spec{}, kinds: map[schema.GroupVersionKind]int{},
		loader:  loader{engine: opts.Engine, interpreter: opts.Interpreter, limits: opts.Policy.Limits, metrics: opts.Metrics, log: opts.Log},
		closing: closing, closeCancel: cancel}
	s.drainer = &drainer{log: opts.Log, leading: s.leading, closing: closing, goroutines: &s.goroutines, timing: defaultDrainTiming}
	s.lifecycle = (&lifecycle{log: opts.Log, goroutines: &s.goroutines}).withDefaults()
	s.rollout = &rollout{metrics: opts.Metrics, goroutines: &s.goroutines, requeueAll: s.requeueAll}
	if cfg := opts.Manager.GetConfig(); cfg != nil {
		// The same identity as opts.Client, which package operator makes
		// from the manager's config and HTTP client.
		s.statuses = statusapply.New(cfg, opts.Manager.GetHTTPClient(), opts.Manager.GetRESTMapper())
	}
	return s, nil
}

// NeedLeaderElection makes module controllers run only in the leader,
// unless they are sharded (Options.Shard): then they run in every replica.
func (s *Supervisor) NeedLeaderElection() bool { return s.opts.Shard == nil }

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
	stopped := map[string]<-chan struct{}{}
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

// Remove stops module name's controller and closes its versions. Objects
// keep their status and children; nothing is deleted. The module's
// finalizer, if it declares one, is then removed from every object of its
// kind in the background (Draining), so that no deletion waits for a
// module that is gone. It reports whether the module ran.
func (s *Supervisor) Remove(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remove(name)
}

// RemoveOwned is Remove for owner, the Spec.Owner that applied the module:
// a module another owner serves stays (a ReconcileModule refused with
// NameConflict, deleted, does not stop the file module of its name), and a
// spec of owner that yielded to it is forgotten. When the removed module
// had taken over from a yielding spec, that spec is applied again, in the
// background, and serves once loaded. It reports whether owner's module
// ran.
func (s *Supervisor) RemoveOwned(name, owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if y, ok := s.yielded[name]; ok && y.Owner == owner {
		delete(s.yielded, name)
		s.opts.Log.Info("module that yielded removed; it will not serve again", "module", name, "owner", owner)
		return false
	}
	r, ok := s.modules[name]
	if !ok || r.spec.Owner != owner {
		return false
	}
	s.remove(name)
	y, ok := s.yielded[name]
	if !ok || s.closed {
		return true
	}
	delete(s.yielded, name)
	s.opts.Log.Info("module removed; the module it took over from serves again", "module", name, "owner", y.Owner)
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		if _, err := s.Apply(s.closing, y); err != nil && s.closing.Err() == nil {
			s.opts.Log.Error(err, "the module that yielded could not serve again; it is loaded on its next change", "module", name, "owner", y.Owner)
		}
	}()
	return true
}

// remove is Remove with s.mu held.
func (s *Supervisor) remove(name string) bool {
	r, ok := s.modules[name]
	if !ok {
		return false
	}
	s.releaseIdentity(r)
	stopped := r.stopped
	s.stopController(r)
	r.slot.Close()
	s.rollout.end(r, dropped, nil)
	for _, c := range r.versions {
		s.retire(c.version)
	}
	delete(s.modules, name)
	s.opts.FlightRecorder.Forget(name) // its records are freed
	// Its finalizer, if it declares one, is drained from its objects (in
	// the background, see Draining), which keeps its kinds' informers
	// until then.
	s.drainThenRelease(name, r.rec, stopped)
	s.opts.Log.Info("module removed", "module", name)
	return true
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
		s.rollout.end(r, closing, nil)
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
