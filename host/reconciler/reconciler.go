// Package reconciler connects a guest module to controller-runtime. It turns
// each reconcile request into an ABI request, calls the module through the
// engine, and applies the declarative response: it writes the status through
// the status subresource, applies and prunes children (server-side apply,
// only when something changes), records Events, handles the module's
// finalizer, and requeues.
//
// The data path is one straight line:
//
//	informer cache → workqueue → Reconciler.Reconcile → engine (fuel + deadline)
//	  → guest → abi.Response → status, children, Events, finalizer, requeue
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/host/cacheread"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/metrics"
)

// Event reasons recorded by the host on reconciled objects.
const (
	ReasonReconcileFailed  = "ReconcileFailed"  // the guest returned an error
	ReasonFuelExhausted    = "FuelExhausted"    // the guest used its whole fuel budget
	ReasonDeadlineExceeded = "DeadlineExceeded" // the guest ran past its timeout
	ReasonMemoryLimit      = "MemoryLimit"      // the guest ran out of memory at its cap
	ReasonStackOverflow    = "StackOverflow"    // the guest's call stack overflowed
	ReasonGuestTrapped     = "GuestTrapped"     // the guest trapped or exited
	ReasonABIViolation     = "ABIViolation"     // the guest broke the ABI or a size limit
	ReasonInvalidResponse  = "InvalidResponse"  // the guest's response could not be applied
	ReasonReconcileStorm   = "ReconcileStorm"   // reconciled many times without any change; damped
)

// MaxEventsPerResponse caps the Events one response may record; the rest are
// dropped with a log line, so a buggy guest cannot flood the API server.
const MaxEventsPerResponse = 10

// Options configure a Reconciler's controller. Zero fields take the stated
// defaults.
type Options struct {
	// MaxConcurrentReconciles is the number of objects reconciled at once.
	// Defaults to the module's Limits.MaxInstances, so no worker waits for an
	// instance.
	MaxConcurrentReconciles int

	// RateLimiter paces retries of failed objects. Defaults to
	// controller-runtime's default: per-item exponential backoff from 5 ms to
	// 1000 s combined with a 10 qps / 100 burst token bucket.
	RateLimiter workqueue.TypedRateLimiter[reconcile.Request]

	// Now returns the wall clock passed to guests as Request.Now.
	// Defaults to time.Now.
	Now func() time.Time

	// Config is passed to the guest as Request.Config on every call.
	// Defaults to nil: no configuration.
	Config map[string]any

	// Storm configures storm damping; see StormOptions for the defaults.
	Storm StormOptions
}

// Reconciler reconciles the objects of one module's kind by calling the
// module. It is safe for concurrent use.
type Reconciler struct {
	client    client.Client
	recorder  recorder.EventRecorder
	name      string
	current   atomic.Pointer[Version]
	paused    atomic.Bool
	requeue   chan event.GenericEvent
	gvk       schema.GroupVersionKind
	owns      []schema.GroupVersionKind
	finalizer string // empty when the module declares none
	cache     *cacheread.Reader
	config    map[string]any
	storms    *stormTracker
	now       func() time.Time

	mu       sync.Mutex
	attempts map[types.NamespacedName]int

	lastError  atomic.Pointer[string]
	suspect    atomic.Bool                                                             // the last finished call was preempted
	penalty    chan struct{}                                                           // capacity 1: serialises a suspect module's calls
	queue      atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]] // the running controller's
	active     atomic.Int64                                                            // reconciles running now
	lastChange atomic.Int64                                                            // unix nanoseconds of the last write
}

// Activity describes what a Reconciler is doing, for lifecycle states.
type Activity struct {
	Queued     int       // objects waiting in the controller's workqueue
	Failing    int       // objects whose last reconcile failed and await a retry
	Active     int       // reconciles running now
	LastChange time.Time // when a reconcile last wrote anything; zero if never
}

// Activity reports the reconciler's current activity.
func (r *Reconciler) Activity() Activity {
	r.mu.Lock()
	failing := len(r.attempts)
	r.mu.Unlock()
	a := Activity{Failing: failing, Active: int(r.active.Load())}
	if q := r.queue.Load(); q != nil {
		a.Queued = (*q).Len()
	}
	if ns := r.lastChange.Load(); ns != 0 {
		a.LastChange = time.Unix(0, ns)
	}
	return a
}

// Name is the controller's name: the module's.
func (r *Reconciler) Name() string { return r.name }

var _ reconcile.Reconciler = (*Reconciler)(nil)

// New returns a Reconciler that reconciles module.Manifest().For objects with
// module. c must read from the informer cache: a manager's client does so for
// unstructured objects only with client.CacheOptions{Unstructured: true}, as
// package operator configures it.
func New(c client.Client, rec recorder.EventRecorder, module *engine.Module, opts Options) *Reconciler {
	return NewWithVersion(c, rec, NewVersion(module), opts)
}

// NewWithVersion is New serving v, a Version its caller keeps (and retires).
func NewWithVersion(c client.Client, rec recorder.EventRecorder, v *Version, opts Options) *Reconciler {
	module := v.Module
	for_ := module.Manifest().For
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	r := &Reconciler{
		client:   c,
		recorder: rec,
		name:     module.Name(),
		requeue:  make(chan event.GenericEvent),
		penalty:  make(chan struct{}, 1),
		gvk:      schema.GroupVersionKind{Group: for_.Group, Version: for_.Version, Kind: for_.Kind},
		now:      now,
		config:   opts.Config,
		storms:   newStormTracker(opts.Storm),
		attempts: map[types.NamespacedName]int{},
	}
	for _, g := range module.Manifest().Owns {
		r.owns = append(r.owns, schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
	}
	if module.Manifest().Finalizer {
		r.finalizer = FinalizerPrefix + module.Name()
	}
	r.cache = cacheread.New(module.Manifest(), cacheread.ClientBackend{Reader: c})
	r.current.Store(v)
	return r
}

// FinalizerPrefix prefixes the module name to form the finalizer the host
// adds for modules that declare one.
const FinalizerPrefix = "wasmreconcile.io/"

// SetupWithManager registers a controller named after the module that watches
// the module's kind and calls r. The manager runs it (under leader election,
// when enabled) until the manager stops. Package supervisor instead builds
// controllers with NewController, to stop and replace them at run time.
func SetupWithManager(mgr ctrl.Manager, module *engine.Module, opts Options) (*Reconciler, error) {
	r := New(mgr.GetClient(), mgr.GetEventRecorder("wasmreconcile/"+module.Name()), module, opts)
	c, err := r.NewController(mgr, opts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return r, nil
}

// NewController returns an unmanaged controller named after the module that
// watches the module's kind, its owned kinds (a change to a child reconciles
// its controller) and RequeueAll's events, and calls r. Reads' informers are
// started too, with no handler, so that a guest's read never waits for a
// cold cache. The caller runs it with Start and stops it by cancelling the
// context; several controllers of one name may exist one after another.
func (r *Reconciler) NewController(mgr ctrl.Manager, opts Options) (crcontroller.Controller, error) {
	m := r.Module()
	metrics.Track(m)
	workers := opts.MaxConcurrentReconciles
	if workers == 0 {
		workers = m.Limits().MaxInstances
	}
	skip := true // a module's controller is replaced under the same name on reload
	c, err := crcontroller.NewUnmanaged(r.name, crcontroller.Options{
		Reconciler: r, MaxConcurrentReconciles: workers, RateLimiter: opts.RateLimiter, SkipNameValidation: &skip,
		// controller-runtime's own queue, kept so that Activity can read its
		// length: the workqueue_depth metric is keyed by name, and a
		// replaced controller of the same name would blur it.
		NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			if rl == nil {
				rl = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
			}
			q := workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name})
			r.queue.Store(&q)
			return q
		},
	})
	if err != nil {
		return nil, fmt.Errorf("module[%s]: creating controller for %s: %w", r.name, r.gvk, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	watches := []source.Source{
		source.Kind(mgr.GetCache(), client.Object(obj), &handler.EnqueueRequestForObject{}),
		source.Channel(r.requeue, &handler.EnqueueRequestForObject{}),
	}
	for _, gvk := range r.owns {
		child := &unstructured.Unstructured{}
		child.SetGroupVersionKind(gvk)
		watches = append(watches, source.Kind(mgr.GetCache(), client.Object(child),
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), obj, handler.OnlyControllerOwner())))
	}
	for _, g := range m.Manifest().Reads {
		read := &unstructured.Unstructured{}
		read.SetGroupVersionKind(schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
		watches = append(watches, source.Kind(mgr.GetCache(), client.Object(read), handler.Funcs{}))
	}
	for _, w := range watches {
		if err := c.Watch(w); err != nil {
			return nil, fmt.Errorf("module[%s]: watching for %s: %w", r.name, r.gvk, err)
		}
	}
	return c, nil
}

// Version is one loaded version of a module. Reconciles hold it while they
// call it; Retire waits for them before closing the module, so a swap never
// cuts a call short.
type Version struct {
	Module *engine.Module
	mu     sync.RWMutex // read-held by each call; Retire takes it to close
	closed bool
}

// NewVersion wraps a loaded module.
func NewVersion(m *engine.Module) *Version { return &Version{Module: m} }

// Retire waits for the calls on v to finish, then closes its module.
func (v *Version) Retire(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	v.closed = true
	return v.Module.Close(ctx)
}

// acquire returns the current version, read-locked; the caller unlocks it.
func (r *Reconciler) acquire() *Version {
	for {
		v := r.current.Load()
		v.mu.RLock()
		if !v.closed {
			return v
		}
		v.mu.RUnlock() // retired between Load and RLock: a newer one is current
	}
}

// Module is the module version serving new reconciles.
func (r *Reconciler) Module() *engine.Module { return r.current.Load().Module }

// SwapVersion makes v serve every reconcile that starts from now on and
// returns the previous version, which calls already running finish on. v
// must reconcile the same kinds as the current module (see SameKinds): the
// controller's watches stay as they are.
func (r *Reconciler) SwapVersion(v *Version) (*Version, error) {
	if err := SameKinds(r.Module(), v.Module); err != nil {
		return nil, err
	}
	metrics.Track(v.Module)
	old := r.current.Swap(v)
	r.storms.reset() // new code: quiescent objects are reconciled again
	return old, nil
}

// SameKinds reports whether b can replace a in a running controller: the same
// name, kind, owned and read kinds, and finalizer.
func SameKinds(a, b *engine.Module) error {
	ma, mb := a.Manifest(), b.Manifest()
	switch {
	case a.Name() != b.Name():
		return fmt.Errorf("module name changed from %s to %s", a.Name(), b.Name())
	case ma.For != mb.For:
		return fmt.Errorf("module[%s]: reconciled kind changed from %v to %v", a.Name(), ma.For, mb.For)
	case !equality.Semantic.DeepEqual(ma.Owns, mb.Owns) || !equality.Semantic.DeepEqual(ma.Reads, mb.Reads):
		return fmt.Errorf("module[%s]: owned or read kinds changed", a.Name())
	case ma.Finalizer != mb.Finalizer:
		return fmt.Errorf("module[%s]: finalizer declaration changed", a.Name())
	}
	return nil
}

// SetPaused stops (true) or resumes (false) calling the guest. While paused,
// reconciles return at once and write nothing. It reports whether the call
// resumed a paused reconciler, whose objects then need a RequeueAll.
func (r *Reconciler) SetPaused(paused bool) (resumed bool) {
	return r.paused.Swap(paused) && !paused
}

// RequeueAll enqueues every object of the module's kind in the cache, for
// example after a new version of the module is swapped in. It returns once
// they are handed to the controller, or when ctx is done.
func (r *Reconciler) RequeueAll(ctx context.Context) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.client.List(ctx, list); err != nil {
		return fmt.Errorf("module[%s]: listing %s to requeue: %w", r.name, r.gvk.Kind, err)
	}
	for i := range list.Items {
		select {
		case r.requeue <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// GuestError is a reconcile failure the guest reported in its response.
type GuestError struct {
	Module   string
	Object   string // namespace/name
	Message  string
	Terminal bool
}

func (e *GuestError) Error() string {
	kind := "error"
	if e.Terminal {
		kind = "terminal error (not retried until the object changes)"
	}
	return fmt.Sprintf("module[%s] reconcile %s: guest reported %s: %s", e.Module, e.Object, kind, e.Message)
}

// Reconcile implements reconcile.Reconciler.
//
// It reads the object and its observed children from the cache, adds the
// module's finalizer if the module declares one, and calls the module (with
// Finalizing set for an object being deleted). Then:
//   - invalid children (an undeclared kind, no name, another namespace) make
//     the response invalid: a Warning Event and a terminal error;
//   - if the guest returned a status that differs from the observed one, it is
//     applied to the status subresource with the module name as field manager;
//   - if the guest reported no error, desired children that would change are
//     applied and observed children no longer desired are deleted;
//   - if the object is being deleted and the guest answered Finalized, the
//     finalizer is removed;
//   - the guest's Events are recorded on the object;
//   - if the call failed (deadline, trap, ABI violation) or the guest reported
//     an error, a Warning Event is recorded and an error is returned, so the
//     object is retried with the controller's backoff; a terminal guest error
//     is returned as a reconcile.TerminalError and not retried;
//   - otherwise, a positive RequeueAfterSeconds becomes Result.RequeueAfter.
//
// A deleted object is forgotten and not an error.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	if r.paused.Load() {
		return ctrl.Result{}, nil // resuming requeues every object
	}
	v := r.acquire()
	defer v.mu.RUnlock()
	logger := log.FromContext(ctx).WithValues("module", r.name, "digest", v.Module.Digest())
	ctx = log.IntoContext(ctx, logger)
	r.active.Add(1)
	defer r.active.Add(-1)
	start := time.Now()
	logger.V(1).Info("START reconcile")
	res, err := r.reconcile(ctx, req, v.Module)
	logger.V(1).Info("FINISH reconcile", "duration", time.Since(start).String(), "error", err != nil)
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request, module *engine.Module) (ctrl.Result, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.storms.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}

	deleting := obj.GetDeletionTimestamp() != nil
	if deleting && (r.finalizer == "" || !controllerutil.ContainsFinalizer(obj, r.finalizer)) {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil // nothing of ours holds the deletion
	}
	if r.finalizer != "" && !deleting && !controllerutil.ContainsFinalizer(obj, r.finalizer) {
		if err := r.patchFinalizer(ctx, obj, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	observed, err := r.observedChildren(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	children := make([]map[string]any, len(observed))
	for i, c := range observed {
		children[i] = c.Object
	}
	fingerprint := childrenFingerprint(observed)
	if ok, wait := r.storms.admit(req.NamespacedName, obj.GetGeneration(), fingerprint, r.now()); !ok {
		metrics.Damped.WithLabelValues(r.name).Inc()
		log.FromContext(ctx).V(1).Info("quiescent: reconcile postponed", "after", wait.String())
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	changed := false // whether this reconcile wrote anything
	request, err := utiljson.Marshal(abi.Request{
		Object:     obj.Object,
		Children:   children,
		Finalizing: deleting,
		Config:     r.config,
		Attempt:    r.attempt(req.NamespacedName),
		Now:        r.now().UTC().Truncate(time.Second).Format(time.RFC3339),
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("encoding request for %s: %w", req.NamespacedName, err)
	}
	res, err := r.call(ctx, module, req, request)
	log.FromContext(ctx).V(1).Info("guest returned", "fuel", res.Fuel, "guestDuration", res.Duration.String())
	metrics.ObserveCall(r.name, res, err)
	result := metrics.ResultSuccess
	defer func() { metrics.ReconcileTotal.WithLabelValues(r.name, result).Inc() }()
	if err != nil {
		result = metrics.ResultOf(err)
		var canceled *engine.CanceledError
		if !errors.As(err, &canceled) {
			r.warn(obj, reasonFor(err), err.Error())
			r.failed(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}

	var resp abi.Response
	if err := utiljson.Unmarshal(res.Output, &resp); err != nil {
		err = &engine.ABIError{Module: r.name, Call: "reconcile " + req.String(), Reason: "response is not valid JSON: " + err.Error()}
		result = metrics.ResultABI
		r.warn(obj, ReasonABIViolation, err.Error())
		r.failed(req.NamespacedName)
		return ctrl.Result{}, err
	}

	desired, err := r.desiredChildren(obj, resp.Children)
	if err != nil {
		msg := "invalid children: " + err.Error()
		result = metrics.ResultInvalidResponse
		r.warn(obj, ReasonInvalidResponse, msg)
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("module[%s] reconcile %s: %s", r.name, req, msg))
	}
	if resp.Status != nil {
		wrote, err := r.applyStatus(ctx, obj, resp.Status)
		changed = changed || wrote
		if err != nil {
			result = metrics.ResultApplyError
			if errors.Is(err, reconcile.TerminalError(nil)) {
				result = metrics.ResultInvalidResponse
			}
			r.failed(req.NamespacedName)
			return ctrl.Result{}, err
		}
	}
	if resp.Error == nil {
		// Children are applied only from a response without error: a failed
		// reconcile must not prune what it could not compute.
		wrote, err := r.syncChildren(ctx, desired, observed)
		changed = changed || wrote
		if err != nil {
			result = metrics.ResultApplyError
			r.failed(req.NamespacedName)
			return ctrl.Result{}, err
		}
	}
	r.recordEvents(ctx, obj, resp.Events)
	if deleting && resp.Finalized && resp.Error == nil {
		changed = true
		if err := r.patchFinalizer(ctx, obj, false); err != nil {
			result = metrics.ResultApplyError
			return ctrl.Result{}, err
		}
	}

	if resp.Error != nil {
		gerr := &GuestError{Module: r.name, Object: req.String(), Message: resp.Error.Message, Terminal: resp.Error.Terminal}
		r.warn(obj, ReasonReconcileFailed, resp.Error.Message)
		result = metrics.ResultGuestError
		if gerr.Terminal {
			result = metrics.ResultTerminalError
			r.forget(req.NamespacedName)
			return ctrl.Result{}, reconcile.TerminalError(gerr)
		}
		r.failed(req.NamespacedName)
		return ctrl.Result{}, gerr
	}
	r.forget(req.NamespacedName)
	if changed {
		r.lastChange.Store(r.now().UnixNano())
	}
	if storm, n := r.storms.record(req.NamespacedName, obj.GetGeneration(), fingerprint, changed, r.now()); storm {
		metrics.StormsDetected.WithLabelValues(r.name).Inc()
		msg := fmt.Sprintf("reconciled %d times within %s without any change; the guest is now called at most once every %s until the object's generation or children change",
			n, r.storms.opts.Window, r.storms.opts.Backoff)
		r.warn(obj, ReasonReconcileStorm, msg)
		log.FromContext(ctx).Info("reconcile storm: object is quiescent", "reconciles", n)
	}
	if resp.RequeueAfterSeconds > 0 {
		return ctrl.Result{RequeueAfter: time.Duration(resp.RequeueAfterSeconds) * time.Second}, nil
	}
	return ctrl.Result{}, nil
}

// call calls the guest. While the module is suspect (its last finished call
// was preempted: it spins or runs away), its calls run one at a time, so a
// spinning module occupies at most one CPU however many workers it has, and
// the other modules keep the rest. The first call that finishes without
// preemption lifts it.
func (r *Reconciler) call(ctx context.Context, module *engine.Module, req reconcile.Request, request []byte) (engine.Result, error) {
	if r.suspect.Load() {
		select {
		case r.penalty <- struct{}{}:
			defer func() { <-r.penalty }()
		case <-ctx.Done():
			return engine.Result{}, &engine.CanceledError{Module: r.name, Call: "reconcile " + req.String()}
		}
	}
	res, err := module.Reconcile(engine.WithCacheReader(ctx, r.cache), "reconcile "+req.String(), request)
	switch engine.KindOf(err) {
	case engine.KindFuelExhausted, engine.KindDeadlineExceeded:
		if !r.suspect.Swap(true) {
			log.FromContext(ctx).Info("guest preempted: the module's calls now run one at a time until one finishes in budget", "error", err.Error())
		}
	case "":
		r.suspect.Store(false)
	}
	return res, err
}

// applyStatus writes desired as the object's status unless it already is,
// and reports whether it wrote.
func (r *Reconciler) applyStatus(ctx context.Context, obj *unstructured.Unstructured, desired map[string]any) (bool, error) {
	observed, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status")
	if equality.Semantic.DeepEqual(observed, any(desired)) {
		return false, nil
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": desired}}
	patch.SetGroupVersionKind(r.gvk)
	patch.SetNamespace(obj.GetNamespace())
	patch.SetName(obj.GetName())
	err := r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch),
		client.FieldOwner(r.name), client.ForceOwnership)
	if err != nil {
		if apierrors.IsInvalid(err) {
			msg := fmt.Sprintf("the API server refused the status returned by the guest: %v; fix the module's status to match the CRD schema", err)
			r.warn(obj, ReasonInvalidResponse, msg)
			return false, reconcile.TerminalError(fmt.Errorf("module[%s] reconcile %s/%s: %s", r.name, obj.GetNamespace(), obj.GetName(), msg))
		}
		return false, fmt.Errorf("module[%s] applying status of %s/%s: %w", r.name, obj.GetNamespace(), obj.GetName(), err)
	}
	metrics.StatusWrites.WithLabelValues(r.name).Inc()
	log.FromContext(ctx).V(1).Info("status applied")
	return true, nil
}

// patchFinalizer adds or removes the module's finalizer, with optimistic
// locking so that no other finalizer is lost.
func (r *Reconciler) patchFinalizer(ctx context.Context, obj *unstructured.Unstructured, add bool) error {
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if add {
		controllerutil.AddFinalizer(obj, r.finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, r.finalizer)
	}
	if err := r.client.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("module[%s] updating finalizer %s on %s/%s: %w", r.name, r.finalizer, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

func (r *Reconciler) recordEvents(ctx context.Context, obj *unstructured.Unstructured, events []abi.Event) {
	for i, e := range events {
		if i == MaxEventsPerResponse {
			log.FromContext(ctx).Info("guest returned too many events; dropping the rest", "returned", len(events), "max", MaxEventsPerResponse)
			return
		}
		typ := string(e.Type)
		if typ != corev1.EventTypeNormal && typ != corev1.EventTypeWarning {
			log.FromContext(ctx).Info("guest event has an invalid type; recording it as Warning", "type", typ, "reason", e.Reason)
			typ = corev1.EventTypeWarning
		}
		reason := e.Reason
		if reason == "" {
			reason = "GuestEvent"
		}
		r.recorder.Eventf(obj, nil, typ, reason, "Reconcile", "%s", e.Message)
	}
}

func (r *Reconciler) warn(obj *unstructured.Unstructured, reason, msg string) {
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	e := fmt.Sprintf("%s %s/%s: %s", reason, obj.GetNamespace(), obj.GetName(), msg)
	r.lastError.Store(&e)
}

// LastError is the last failure a reconcile reported (as its Warning
// Event's reason, object and message), or "".
func (r *Reconciler) LastError() string {
	if e := r.lastError.Load(); e != nil {
		return *e
	}
	return ""
}

// reasonFor is the Event reason for an engine error.
func reasonFor(err error) string {
	switch kind := engine.KindOf(err); kind {
	case engine.KindTrap:
		return ReasonGuestTrapped
	case engine.KindABI:
		return ReasonABIViolation
	case engine.KindInvalidModule, engine.KindCanceled:
		return ReasonReconcileFailed
	default: // FuelExhausted, DeadlineExceeded, MemoryLimit, StackOverflow
		return kind
	}
}

func (r *Reconciler) attempt(key types.NamespacedName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[key]
}

func (r *Reconciler) failed(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts[key]++
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.attempts, key)
}
