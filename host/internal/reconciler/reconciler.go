// Package reconciler connects a guest module to controller-runtime: it is
// the Reconciler of one module's controller.
//
// One reconcile is one straight line, and every line returns an outcome:
//
//	object (informer cache) → request (protocol.EncodeRequest)
//	  → call (engine: fuel + deadline) → response (protocol.Rules.Decode)
//	  → apply (children, status, Events, finalizer) → outcome
//
// and one place, settle, turns the outcome into everything else: metrics,
// the attempt count passed to the guest, the Warning Event on the object,
// the module's statistics, storm damping and the controller's result. The
// vocabulary of outcomes is protocol.Kind.
//
// The module's code is read from a versionslot.Slot on every reconcile, so
// a supervisor can swap versions between reconciles without this package
// knowing.
package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/compare"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/cacheread"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// ReasonReconcileStorm is the reason of the Warning Event on an object found
// in a reconcile storm; the other Warning reasons are protocol.Kinds and
// ReasonMemoryBudgetWait.
const ReasonReconcileStorm = "ReconcileStorm"

// DefaultTriggerMaxFanOut is the default of Options.TriggerMaxFanOut.
const DefaultTriggerMaxFanOut = 1000

// ReasonMemoryBudgetWait is the reason of the Warning Event on an object
// whose call waited for memory within the operator's guest memory budget
// (engine.MemoryBudget) before it ran.
const ReasonMemoryBudgetWait = "MemoryBudgetWait"

// FinalizerPrefix prefixes the module name to form the finalizer the host
// adds for modules that declare one.
const FinalizerPrefix = "wasmreconcile.io/"

// Options configure a Reconciler. Fields marked required have no default.
type Options struct {
	// Slot serves the module's code. Required. Every version it serves must
	// declare the same kinds and finalizer as the one it held at New.
	Slot *versionslot.Slot
	// Client reads objects and children from the informer cache and writes
	// to the API server. Required. A manager's client reads unstructured
	// objects from the cache only with client.CacheOptions{Unstructured:
	// true}, as package operator configures it.
	Client client.Client
	// Writer makes every write of the module: children, status and
	// finalizers. Defaults to Client. Give it a client that impersonates
	// the module's identity, so that the module's rights are exactly that
	// identity's RBAC (docs/security.md).
	Writer client.Client
	// APIReader reads live from the API server: whose a child is, when its
	// create finds it existing but the cache has not seen it yet. Defaults
	// to Client; the operator passes its manager's APIReader.
	APIReader client.Reader
	// Recorder records Events on reconciled objects. Required.
	Recorder recorder.EventRecorder
	// ReadNamespaces are the namespaces beyond the reconciled object's own
	// that the guest may read through cache_read ("*": every namespace).
	// Defaults to none.
	ReadNamespaces []string
	// Authorize, when set, authorizes each of the guest's cache reads for
	// the module's identity; see cacheread.Options.Authorize. Defaults to
	// nil: the operator's identity, which reads every kind it watches.
	Authorize func(ctx context.Context, verb string, gvk schema.GroupVersionKind, namespace string) error
	// FlightRecorder, when set, keeps the module's failed calls and a
	// sample of its successful ones, for offline replay (package
	// flightrecorder). Defaults to nil: nothing is recorded.
	FlightRecorder *flightrecorder.Recorder
	// Metrics receive the reconcile metrics. Required.
	Metrics *metrics.Metrics
	// Stats accumulate the module's statistics. Defaults to a new Stats;
	// pass one to keep counting across controller restarts.
	Stats *Stats
	// Scopes tells which kinds are namespaced, for the children rules.
	// Defaults to protocol.Builtin; the operator passes its RESTMapper's.
	Scopes protocol.Scopes
	// ResponseLimits bound each response; see protocol.Limits for the
	// defaults.
	ResponseLimits protocol.Limits
	// Config is passed to the guest as Request.Config on every call.
	// Defaults to nil: no configuration.
	Config map[string]any
	// Paused, when set and true, makes reconciles return at once without
	// calling the guest. Defaults to nil: never paused.
	Paused func() bool
	// Storm configures storm damping, of each object and of each trigger
	// source (triggerdamp.go); see StormOptions for the defaults.
	Storm StormOptions
	// TriggerMaxFanOut caps the objects one event of a related object
	// reconciles through a trigger; the rest are dropped and counted
	// (wasmreconcile_trigger_fanout_dropped_total). Defaults to
	// DefaultTriggerMaxFanOut.
	TriggerMaxFanOut int
	// Events is the budget of the guest's Events; see EventBudget for the
	// defaults.
	Events EventBudget
	// CallUnchanged calls the guest for every event, even one that carries
	// nothing it can react to, such as the event of the host's own status
	// write (see memo in unchanged.go for the exact rule). Defaults to
	// false: such events are answered without a call, and counted in
	// wasmreconcile_reconciles_unchanged_total.
	CallUnchanged bool
	// Now returns the wall clock passed to guests as Request.Now.
	// Defaults to time.Now.
	Now func() time.Time
	// Log receives the reconciles' log lines (and, through the context,
	// the guest's), each with the module, its digest, the object and
	// controller-runtime's reconcileID; START and FINISH lines at V(1).
	// Defaults to ctrl.Log.WithName("reconcile"). The logger of the
	// context controller-runtime passes is not used: an unmanaged
	// controller's (NewController's) discards everything.
	Log logr.Logger
}

// Reconciler reconciles the objects of one module's kind by calling the
// module. It is safe for concurrent use.
type Reconciler struct {
	name      string
	manifest  abi.Manifest
	gvk       schema.GroupVersionKind
	owns      []schema.GroupVersionKind
	finalizer string // empty when the module declares none
	rules     protocol.Rules
	reads     *cacheread.Reader // the guest's cache_read: the manifest's kinds, from the informer cache
	opts      Options

	storms    *stormTracker
	sources   *sourceDamper // storm damping per trigger source
	triggered triggeredSet  // objects a trigger enqueued, until their next call
	memos     *memos        // the last successful call per object, to answer unchanged events
	events    *eventLimiter
	stats     *Stats

	mu       sync.Mutex
	attempts map[types.NamespacedName]int                // consecutive failed reconciles
	failures map[types.NamespacedName][]abi.ChildFailure // children the last sync could not write
	warned   map[types.NamespacedName]string             // the last terminal failure's Warning: generation, kind and note

	suspect atomic.Bool   // the last finished call was preempted
	penalty chan struct{} // capacity 1: serialises a suspect module's calls

	shadow     atomic.Pointer[shadow.Shadow]                                           // a candidate called beside the serving version; nil for none
	queue      atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]] // the running controller's
	active     atomic.Int64                                                            // reconciles running now
	lastChange atomic.Int64                                                            // unix nanoseconds of the last write
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// New returns a Reconciler for the module in opts.Slot.
func New(opts Options) (*Reconciler, error) {
	if opts.Slot == nil || opts.Client == nil || opts.Recorder == nil || opts.Metrics == nil {
		return nil, fmt.Errorf("reconciler: Slot, Client, Recorder and Metrics are required")
	}
	v := opts.Slot.Current()
	if v == nil {
		return nil, fmt.Errorf("reconciler: the slot is closed")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log.GetSink() == nil {
		opts.Log = ctrl.Log.WithName("reconcile")
	}
	if opts.Stats == nil {
		opts.Stats = &Stats{}
	}
	if opts.Writer == nil {
		opts.Writer = opts.Client
	}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.Scopes == nil {
		opts.Scopes = protocol.Builtin
	}
	if opts.TriggerMaxFanOut <= 0 {
		opts.TriggerMaxFanOut = DefaultTriggerMaxFanOut
	}
	m := v.Module.Manifest()
	r := &Reconciler{
		name:     v.Module.Name(),
		manifest: m,
		gvk:      gvkOf(m.For),
		rules:    protocol.RulesFor(m, opts.Scopes, opts.ResponseLimits),
		opts:     opts,
		storms:   newStormTracker(opts.Storm),
		sources:  newSourceDamper(opts.Storm),
		memos:    newMemos(),
		events:   newEventLimiter(opts.Events),
		stats:    opts.Stats,
		attempts: map[types.NamespacedName]int{},
		failures: map[types.NamespacedName][]abi.ChildFailure{},
		warned:   map[types.NamespacedName]string{},
		penalty:  make(chan struct{}, 1),
	}
	for _, g := range m.Owns {
		r.owns = append(r.owns, gvkOf(g))
	}
	if m.Finalizer {
		r.finalizer = FinalizerPrefix + r.name
	}
	r.reads = cacheread.New(m, cacheread.ClientBackend{Reader: opts.Client},
		cacheread.Options{Namespaces: opts.ReadNamespaces, Scopes: opts.Scopes, Authorize: opts.Authorize})
	opts.Metrics.Init(r.name)
	return r, nil
}

func gvkOf(g abi.GroupVersionKind) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

// Name is the module's name, which names its controller.
func (r *Reconciler) Name() string { return r.name }

// Manifest is the manifest of the module's kinds.
func (r *Reconciler) Manifest() abi.Manifest { return r.manifest }

// outcome is how one reconcile ended, before settle turns it into metrics,
// Events, attempts and a result.
type outcome struct {
	key  types.NamespacedName
	obj  *unstructured.Unstructured // nil when the object is gone
	skip skip

	called bool          // the guest was called; res holds its fuel and time
	res    engine.Result //
	err    error         // why it failed; nil on success
	wrote  bool          // something was written (status, child, finalizer)
	untold bool          // children failed that the guest has not seen: call it again at once

	requeueAfter time.Duration // success: the guest's requeueAfterSeconds; skipUnchanged: the rest of it
	damped       time.Duration // skipStorm: how long to wait
	fingerprint  string        // generation, children and version, for storm damping
	triggered    bool          // a trigger enqueued the object: not damped or counted by its storm

	// seen lists the objects the call saw: the object, its children and
	// what the guest read; nil before the call. Their Secrets' values are
	// scrubbed from the error settle keeps as the module's lastError.
	seen func() []map[string]any
}

// skip says why a reconcile ended without a call: nothing to settle.
type skip int

const (
	skipNone      skip = iota
	skipGone           // the object is deleted
	skipNotOurs        // being deleted, and no finalizer of ours holds it
	skipStorm          // quiescent: damped
	skipUnchanged      // as the last successful call left it (unchanged.go)
)

// Reconcile implements reconcile.Reconciler; see the package documentation
// for the steps. While paused, or once the module is removed, it returns at
// once and writes nothing. It returns a reconcile.TerminalError for
// outcomes that the same input would repeat (protocol.Terminal), an error
// (so the object is retried with backoff) for other failures, and the
// guest's requeueAfterSeconds on success. A deleted object is forgotten,
// not an error.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	if r.opts.Paused != nil && r.opts.Paused() {
		return ctrl.Result{}, nil // resuming requeues every object
	}
	v, ok := r.opts.Slot.Acquire()
	if !ok {
		return ctrl.Result{}, nil // the module was removed
	}
	defer v.Release()
	r.active.Add(1)
	defer r.active.Add(-1)
	logger := r.opts.Log.WithValues("module", r.name, "digest", v.Module.Digest(),
		"object", klog.KRef(req.Namespace, req.Name), "reconcileID", crcontroller.ReconcileIDFromContext(ctx))
	ctx = log.IntoContext(ctx, logger)
	logger.V(1).Info("START reconcile")
	start := time.Now()
	o := r.runRecovered(ctx, req.NamespacedName, v.Module, v.Hold)
	res, err := r.settle(ctx, o)
	logger.V(1).Info("FINISH reconcile", "duration", time.Since(start).String(), "result", r.kindOf(o), "fuel", o.res.Fuel)
	return res, err
}

// runRecovered is run, with a panic of the host's turned into an outcome
// of kind HostPanic: settle then logs it as an error, records a Warning
// Event on the object, counts it (wasmreconcile_reconcile_total and
// wasmreconcile_host_panics_total) and retries it with backoff, like any
// failure. controller-runtime would recover it too, but silently for an
// unmanaged controller's logger, and without an Event or a count.
func (r *Reconciler) runRecovered(ctx context.Context, key types.NamespacedName, module *engine.Module, hold func() (func(), bool)) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			call := "reconcile " + key.String()
			if key.Namespace == "" {
				call = "reconcile " + key.Name
			}
			err := &protocol.PanicError{Module: r.name, Call: call, Value: v, Stack: string(debug.Stack())}
			r.opts.Metrics.HostPanics.WithLabelValues(r.name).Inc()
			log.FromContext(ctx).Error(err, "recovered a panic of the host's", "stack", err.Stack)
			o = outcome{key: key, obj: r.objectForEvent(ctx, key), err: err}
		}
	}()
	return r.run(ctx, key, module, hold)
}

// objectForEvent reads the object to record an Event on after a panic, or
// nil.
func (r *Reconciler) objectForEvent(ctx context.Context, key types.NamespacedName) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := r.opts.Client.Get(ctx, key, obj); err != nil {
		return nil
	}
	return obj
}

// run is the data path: object → request → call → response → apply.
//
// hold keeps module open beyond the call, for the flight recorder's replay
// (versionslot.Version.Hold).
func (r *Reconciler) run(ctx context.Context, key types.NamespacedName, module *engine.Module, hold func() (func(), bool)) outcome {
	o := outcome{key: key}
	call := "reconcile " + key.String()
	if key.Namespace == "" {
		call = "reconcile " + key.Name
	}
	fail := func(what string, err error) outcome {
		o.err = &protocol.ApplyError{Module: r.name, Call: call, What: what, Err: err}
		return o
	}

	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := r.opts.Client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			o.skip = skipGone
			return o
		}
		return fail("reading the object", err)
	}
	o.obj = obj
	deleting := obj.GetDeletionTimestamp() != nil
	if deleting && (r.finalizer == "" || !controllerutil.ContainsFinalizer(obj, r.finalizer)) {
		o.skip = skipNotOurs
		return o
	}
	if r.finalizer != "" && !deleting && !controllerutil.ContainsFinalizer(obj, r.finalizer) {
		if err := r.patchFinalizer(ctx, obj, true); err != nil {
			return fail("finalizer "+r.finalizer, err)
		}
		o.wrote = true
	}
	observed, err := r.observedChildren(ctx, obj)
	if err != nil {
		return fail("listing children", err)
	}
	childFP := childrenFingerprint(observed)
	// A canary object is served by the candidate (its answers are
	// applied); the others by the serving version, shadowed.
	sh := r.shadow.Load()
	canary := false
	if sh != nil && sh.Serves(obj) {
		if m, release, ok := sh.Acquire(); ok {
			defer release()
			// The recorder holds the candidate beyond the call through its
			// own Shadow: candidate, not sh, which is nil for the rest of a
			// canary call (nothing to compare).
			candidate := sh
			module, canary, hold = m, true, func() (func(), bool) { _, rel, ok := candidate.Acquire(); return rel, ok }
		}
	}
	o.fingerprint = fmt.Sprintf("%d|%s|%s", obj.GetGeneration(), childFP, module.Digest())
	if !r.opts.CallUnchanged && !deleting {
		if m, ok := r.memos.get(key); ok {
			if same, wait := m.unchanged(module.Digest(), obj, childFP, r.opts.Now()); same {
				o.skip, o.requeueAfter = skipUnchanged, wait
				return o
			}
		}
	}
	r.memos.forget(key) // remembered again below if this call succeeds or fails terminally
	// A related object's change (a trigger) is a change the owner's storm
	// does not see: it is admitted, and not counted (triggerdamp.go).
	if o.triggered = r.triggered.take(key); !o.triggered {
		if ok, wait := r.storms.admit(key, o.fingerprint, r.opts.Now()); !ok {
			o.skip, o.damped = skipStorm, wait
			return o
		}
	}

	children := make([]map[string]any, len(observed))
	for i, c := range observed {
		children[i] = c.Object
	}
	told := r.failuresOf(key)
	input := abi.Request{
		Object:        obj.Object,
		Children:      children,
		Finalizing:    deleting,
		Config:        r.opts.Config,
		Attempt:       r.attempt(key),
		Now:           protocol.FormatNow(r.opts.Now()),
		ChildFailures: told,
	}
	request, err := protocol.EncodeRequest(input)
	if err != nil {
		o.err = &engine.ABIError{Module: r.name, Call: call, Reason: "encoding the request: " + err.Error()}
		return o
	}
	o.called = true
	if sh != nil && sh.Options().Canary != nil {
		sh.Served(canary)
	}
	if canary {
		sh = nil // served by the candidate: nothing to compare
	}
	// What the guest reads is kept for the call: the recorder replays it,
	// and the Secrets among it are scrubbed from what the host shows of
	// the call (lastError, a shadow's differences).
	reads := &countingReader{CacheReader: r.reads.For(key.Namespace), keep: true}
	o.seen = func() []map[string]any {
		return append(append([]map[string]any{obj.Object}, children...), reads.objects()...)
	}
	o.res, o.err = r.call(ctx, module, call, reads, request)
	if o.err != nil {
		r.toShadow(sh, key, call, obj, request, compare.Answer{Kind: protocol.KindOf(o.err), Err: o.err.Error()}, o.seen)
		r.record(module, hold, key, input, reads, o.res, o.err)
		return o
	}
	resp, err := r.rules.Decode(call, obj.Object, len(request), o.res.Output)
	if err != nil {
		r.toShadow(sh, key, call, obj, request, compare.Answer{Kind: protocol.KindOf(err), Err: err.Error()}, o.seen)
		r.record(module, hold, key, input, reads, o.res, err)
		o.err = err
		return o
	}
	r.toShadow(sh, key, call, obj, request, answerOf(resp), o.seen)
	var guestErr error
	if resp.Error != nil {
		guestErr = &protocol.GuestError{Module: r.name, Call: call, Message: resp.Error.Message, Terminal: resp.Error.Terminal}
	}
	r.record(module, hold, key, input, reads, o.res, guestErr)
	a, err := r.apply(ctx, call, obj, observed, resp, deleting, told)
	o.wrote, o.untold = o.wrote || a.wrote, a.untold
	switch {
	case a.synced:
		r.setFailures(key, a.failures)
	case resp.Children == nil && resp.Error == nil:
		r.setFailures(key, nil) // the guest no longer asks for the children that failed
	}
	switch {
	case err != nil:
		o.err = err
	case resp.Error != nil:
		o.err = &protocol.GuestError{Module: r.name, Call: call, Message: resp.Error.Message, Terminal: resp.Error.Terminal}
	default:
		o.requeueAfter = time.Duration(resp.RequeueAfterSeconds) * time.Second
	}
	// Remember a success, and a terminal guest error (one the same input
	// repeats), so that an event that changes nothing the guest sees, such
	// as the one of the status this call wrote, is not another call: after
	// a terminal error it would fail again and record a second identical
	// Warning (unchanged.go).
	success := err == nil && resp.Error == nil
	terminal := err == nil && resp.Error != nil && resp.Error.Terminal
	if (success || terminal) && !deleting && !a.untold && !a.childWrites && len(a.failures) == 0 && len(told) == 0 && reads.n == 0 {
		status := any(resp.Status)
		if resp.Status == nil {
			status = obj.Object["status"]
		}
		m := memo{digest: module.Digest(), inputs: hashObject(obj), status: hashValue(status), children: hashString(childFP)}
		if success && o.requeueAfter > 0 {
			m.due = r.opts.Now().Add(o.requeueAfter)
		}
		r.memos.set(key, m)
	}
	return o
}

// SetShadow makes s the candidate called beside the serving version on
// every call from now on, or stops calling one (nil). It returns the
// previous Shadow, which the caller closes. s must have been built with
// Decoder's decoder, for a module of the same kinds.
func (r *Reconciler) SetShadow(s *shadow.Shadow) *shadow.Shadow { return r.shadow.Swap(s) }

// Shadow is the candidate called beside the serving version, or nil.
func (r *Reconciler) Shadow() *shadow.Shadow { return r.shadow.Load() }

// Decoder decodes a candidate's answers by the module's response rules,
// the serving version's.
func (r *Reconciler) Decoder() shadow.Decoder {
	return func(call string, owner map[string]any, requestBytes int, output []byte) (compare.Answer, error) {
		resp, err := r.rules.Decode(call, owner, requestBytes, output)
		if err != nil {
			return compare.Answer{}, err
		}
		return answerOf(resp), nil
	}
}

// answerOf is a decoded response as a compare.Answer: a deep copy, since
// applying the serving response changes its children (labels, owner
// references) while the candidate's comparison reads it.
func answerOf(resp *protocol.Response) compare.Answer {
	children := make([]map[string]any, len(resp.Desired))
	for i, d := range resp.Desired {
		children[i] = d.DeepCopy().Object
	}
	r := resp.Response
	if r.Status != nil {
		r.Status = runtime.DeepCopyJSON(r.Status)
	}
	r.Events = append([]abi.Event(nil), r.Events...)
	r.Children = nil // compared as the completed children
	if r.Error != nil {
		e := *r.Error
		r.Error = &e
	}
	return compare.Answer{Response: &r, Children: children, Kind: protocol.Success}
}

// toShadow repeats a call on the candidate, if there is one, without
// waiting for it. A call the host's shutdown canceled is not repeated.
func (r *Reconciler) toShadow(s *shadow.Shadow, key types.NamespacedName, call string, obj *unstructured.Unstructured, request []byte, serving compare.Answer, seen func() []map[string]any) {
	if s == nil || serving.Kind == protocol.Canceled {
		return
	}
	sc := &redact.Scrubber{}
	sc.LearnAll(seen()...)
	s.Submit(shadow.Job{Object: key.String(), Call: call, Owner: obj.DeepCopy().Object, Request: request,
		Reads: r.reads.For(key.Namespace), Serving: serving, Secrets: sc})
}

// countingReader counts a call's cache reads and, with keep, keeps what
// they returned (for the flight recorder). The guest reads on the calling
// goroutine, so no lock is needed.
type countingReader struct {
	engine.CacheReader
	n       int
	keep    bool
	results [][]byte
}

func (c *countingReader) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	c.n++
	st, b := c.CacheReader.Read(ctx, request)
	if c.keep && st == abi.CacheOK {
		c.results = append(c.results, b)
	}
	return st, b
}

// objects are the objects the reads returned: each result is one object
// or a list of them.
func (c *countingReader) objects() []map[string]any {
	var out []map[string]any
	for _, b := range c.results {
		var one map[string]any
		if json.Unmarshal(b, &one) == nil {
			out = append(out, one)
			continue
		}
		var list []map[string]any
		if json.Unmarshal(b, &list) == nil {
			out = append(out, list...)
		}
	}
	return out
}

// record hands a call to the flight recorder, when there is one and it
// wants the call (every failure, a sample of successes). The input's maps
// are copied: the recorder replays it later, off this goroutine.
func (r *Reconciler) record(module *engine.Module, hold func() (func(), bool), key types.NamespacedName, in abi.Request, reads *countingReader, res engine.Result, err error) {
	fr := r.opts.FlightRecorder
	if fr == nil || protocol.KindOf(err) == protocol.Canceled || !fr.Wants(r.name, err != nil) {
		return
	}
	release, ok := hold() // the replay runs on module after this call: keep it open
	if !ok {
		return // the version is retiring
	}
	in.Object = runtime.DeepCopyJSON(in.Object)
	children := make([]map[string]any, len(in.Children))
	for i, c := range in.Children {
		children[i] = runtime.DeepCopyJSON(c)
	}
	in.Children = children
	if in.Config != nil {
		in.Config = runtime.DeepCopyJSON(in.Config)
	}
	in.ChildFailures = append([]abi.ChildFailure(nil), in.ChildFailures...)
	fr.Offer(flightrecorder.Call{Module: module, Object: key.String(), Input: in, Reads: reads.objects(),
		Output: append([]byte(nil), res.Output...), Err: err, Fuel: res.Fuel, Duration: res.Duration,
		ReadNamespaces: r.opts.ReadNamespaces, Scopes: r.opts.Scopes, Release: release})
}

// call calls the guest. While the module is suspect (its last finished call
// was preempted: it spins or runs away), its calls run one at a time, so a
// spinning module occupies at most one CPU however many workers it has, and
// the other modules keep the rest. The first call that finishes without
// preemption lifts it.
func (r *Reconciler) call(ctx context.Context, module *engine.Module, call string, reads engine.CacheReader, request []byte) (engine.Result, error) {
	if r.suspect.Load() {
		select {
		case r.penalty <- struct{}{}:
			defer func() { <-r.penalty }()
		case <-ctx.Done():
			return engine.Result{}, &engine.CanceledError{Module: r.name, Call: call}
		}
	}
	res, err := module.Reconcile(engine.WithCacheReader(ctx, reads), call, request)
	switch kind := protocol.KindOf(err); {
	case kind.Preempted():
		if !r.suspect.Swap(true) {
			log.FromContext(ctx).Info("guest preempted: the module's calls now run one at a time until one finishes in budget", "error", err.Error())
		}
	case kind != protocol.Canceled:
		r.suspect.Store(false)
	}
	return res, err
}

func (r *Reconciler) kindOf(o outcome) string {
	switch o.skip {
	case skipGone:
		return "Gone"
	case skipNotOurs:
		return "NotOurs"
	case skipStorm:
		return "Damped"
	case skipUnchanged:
		return "Unchanged"
	}
	return string(protocol.KindOf(o.err))
}

// settle is the one place an outcome becomes metrics, statistics, the
// attempt count, a Warning Event, storm state and the controller's result.
//
// The attempt count (Request.attempt) counts consecutive reconciles of an
// object that ended in any failure; a success or the object's deletion
// resets it, and a host shutdown (Canceled) does not count.
func (r *Reconciler) settle(ctx context.Context, o outcome) (ctrl.Result, error) {
	switch o.skip {
	case skipGone:
		r.forget(o.key)
		r.setFailures(o.key, nil)
		r.memos.forget(o.key)
		r.storms.forget(o.key)
		r.events.forget(o.key)
		return ctrl.Result{}, nil
	case skipNotOurs:
		r.forget(o.key)
		r.memos.forget(o.key)
		return ctrl.Result{}, nil
	case skipUnchanged:
		r.opts.Metrics.Unchanged.WithLabelValues(r.name).Inc()
		log.FromContext(ctx).V(1).Info("unchanged since the guest's last answer (a success or a terminal error): guest not called")
		return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
	case skipStorm:
		r.opts.Metrics.Damped.WithLabelValues(r.name).Inc()
		log.FromContext(ctx).V(1).Info("quiescent: reconcile postponed", "after", o.damped.String())
		return ctrl.Result{RequeueAfter: o.damped}, nil
	}
	kind := protocol.KindOf(o.err)
	if o.called {
		r.opts.Metrics.ObserveCall(r.name, o.res, kind)
	}
	if o.res.MemoryWait > 0 && o.obj != nil {
		r.warn(o.obj, ReasonMemoryBudgetWait, fmt.Sprintf("the guest call waited %s for its instance's memory within the operator's guest memory budget (--memory-budget): other instances and compiles held it",
			o.res.MemoryWait.Round(time.Millisecond)))
	}
	r.opts.Metrics.ReconcileTotal.WithLabelValues(r.name, string(kind)).Inc()
	if o.wrote {
		r.lastChange.Store(r.opts.Now().UnixNano())
	}
	if kind == protocol.Canceled {
		return ctrl.Result{}, o.err // shutting down: retried by the next leader or start
	}
	r.stats.record(kind, o.called, o.res)
	if kind == protocol.Success {
		r.forget(o.key)
		// A triggered call that wrote nothing is not the owner's storm.
		if o.triggered && !o.wrote {
			return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
		}
		if storm, n := r.storms.record(o.key, o.fingerprint, o.wrote, r.opts.Now()); storm {
			r.opts.Metrics.StormsDetected.WithLabelValues(r.name).Inc()
			r.warn(o.obj, ReasonReconcileStorm, fmt.Sprintf("reconciled %d times within %s without any change; the guest is now called at most once every %s until the object's generation or children change",
				n, r.storms.opts.Window, r.storms.opts.Backoff))
			log.FromContext(ctx).Info("reconcile storm: object is quiescent", "reconciles", n)
		}
		return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
	}
	r.failed(o.key)
	// The error is shown in a ReconcileModule's status and in an Event, to
	// whoever may read those: without the values of the Secrets the call
	// saw (a guest's message may quote one).
	scrub := func(s string) string { return s }
	if o.seen != nil {
		sc := &redact.Scrubber{}
		sc.LearnAll(o.seen()...)
		scrub = sc.String
	}
	r.stats.setLastError(scrub(fmt.Sprintf("%s %s: %s", kind, o.key, o.err.Error())))
	if o.obj != nil && r.newWarning(o) {
		r.warn(o.obj, string(kind), scrub(protocol.Note(o.err)))
	}
	switch kind {
	case protocol.ApplyFailed, protocol.ChildConflict:
		log.FromContext(ctx).Error(o.err, "reconcile failed: the API server refused a write", "result", kind)
	default:
		log.FromContext(ctx).Info("reconcile failed", "result", kind, "error", o.err.Error())
	}
	if o.untold {
		// The guest has not seen the failure: call it again, with it in
		// Request.childFailures, before anything is terminal.
		return ctrl.Result{}, o.err
	}
	if protocol.Terminal(o.err) {
		return ctrl.Result{}, reconcile.TerminalError(o.err)
	}
	return ctrl.Result{}, o.err
}

// warn records a Warning Event on obj, its message cut to what the API
// server accepts (protocol.Note cuts an error's message better).
func (r *Reconciler) warn(obj *unstructured.Unstructured, reason, msg string) {
	r.opts.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", protocol.Cap(msg))
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

func (r *Reconciler) failuresOf(key types.NamespacedName) []abi.ChildFailure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[key]
}

func (r *Reconciler) setFailures(key types.NamespacedName, f []abi.ChildFailure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(f) == 0 {
		delete(r.failures, key)
	} else {
		r.failures[key] = f
	}
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.attempts, key)
	delete(r.warned, key)
}

// newWarning reports whether failure o deserves a Warning Event: every
// failure does, except a terminal one that repeats the last terminal
// failure of the object (same generation, kind and message). A terminal
// failure's status write, or any event that changes nothing the guest
// reads, may call the guest again, which fails the same way; the object
// already says so. A success in between, or a new generation, warns again.
func (r *Reconciler) newWarning(o outcome) bool {
	kind := protocol.KindOf(o.err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !protocol.Terminal(o.err) || o.untold {
		delete(r.warned, o.key)
		return true
	}
	sig := fmt.Sprintf("%d|%s|%s", o.obj.GetGeneration(), kind, protocol.Note(o.err))
	if r.warned[o.key] == sig {
		return false
	}
	r.warned[o.key] = sig
	return true
}
