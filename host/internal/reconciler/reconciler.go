// Package reconciler connects a guest module to controller-runtime: it is
// the Reconciler of one module's controller.
//
// One reconcile is a pipeline of stages with one job each (pipeline.go),
// which hand each other a pass and build its outcome:
//
//	read (informer cache) → finalizer → children → route (canary, shadow)
//	  → admit (unchanged memo, storm) → encode (protocol.EncodeRequest)
//	  → call (engine: fuel + deadline) → observe (protocol.Rules.Decode,
//	  shadow, flight recorder) → apply (children, status, Events,
//	  finalizer) → remember (memo)
//
// and one place, settle (settle.go), turns the outcome into everything
// else: metrics, the attempt count passed to the guest, the Warning Event
// on the object, the module's statistics, storm damping and the
// controller's result. The vocabulary of outcomes is protocol.Kind. What
// the reconciler keeps about an object between reconciles lives in one
// objectState behind one lock (objects.go).
//
// The module's code is read from a versionslot.Slot on every reconcile, so
// a supervisor can swap versions between reconciles without this package
// knowing.
package reconciler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/cacheread"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// ReasonReconcileStorm is the reason of the Warning Event on an object found
// in a reconcile storm; the other Warning reasons are protocol.Kinds and
// ReasonMemoryBudgetWait.
const ReasonReconcileStorm = "ReconcileStorm"

// ReasonMemoryBudgetWait is the reason of the Warning Event on an object
// whose call waited for memory within the operator's guest memory budget
// (engine.MemoryBudget) before it ran.
const ReasonMemoryBudgetWait = "MemoryBudgetWait"

// FinalizerPrefix prefixes the module name to form the finalizer the host
// adds for modules that declare one.
const FinalizerPrefix = "wasmreconcile.io/"

// StatusApplier applies a status with server-side apply; see
// statusapply.Applier.Apply, which implements it.
type StatusApplier interface {
	Apply(ctx context.Context, gvk schema.GroupVersionKind, namespace, name, owner string, body []byte) error
}

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
	// StatusApplier, when set, applies the status (see
	// statusapply.Applier) in Writer's place: it must write as the same
	// identity. Defaults to nil: Writer applies it, through
	// controller-runtime's client, at about 30 µs more CPU a write.
	StatusApplier StatusApplier
	// APIReader reads live from the API server: whose a child is, when its
	// create finds it existing but the cache has not seen it yet. Defaults
	// to Client; the operator passes its manager's APIReader.
	APIReader client.Reader
	// Recorder records Events on reconciled objects. Required.
	Recorder recorder.EventRecorder
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
	// Config is passed to the guest as Request.Config on every call.
	// Defaults to nil: no configuration.
	Config map[string]any
	// Paused, when set and true, makes reconciles return at once without
	// calling the guest. Defaults to nil: never paused.
	Paused func() bool
	// Shard, when set, admits the reconcile of key on this replica
	// (issue 27, package sharding): ok false drops it at once, without a
	// call or a write, because another replica runs the object's slot;
	// ok true runs it, and exit is called once its result is written, so
	// that the replica hands the slot over only when no reconcile of it
	// runs here. uid is the object's metadata.uid when ShardByUID is set
	// ("" when the cache does not hold the object), and "" otherwise.
	// Defaults to nil: every object is this replica's.
	Shard func(key types.NamespacedName, uid types.UID) (exit func(), ok bool)
	// ShardByUID makes a reconcile read its object from the cache before
	// it asks Shard, which places objects by uid. Defaults to false: Shard
	// places objects by their key, and a reconcile it drops reads nothing.
	ShardByUID bool
	// Admits, when set beside Shard, filters the events of the module's
	// kind (and its requeues) and of its owned children before they are
	// queued: the event of an object it refuses, one whose slot another
	// replica runs, is dropped, where Shard would drop the reconcile after
	// a trip through the queue (and, by uid, a cache read). It is asked
	// with the namespace and uid the reconcile would be placed by: an
	// object of the kind's own, and a child's controller owner's (the
	// child's namespace, "" for a cluster-scoped kind, and the uid of its
	// owner reference), so it places by uid without a read. Delete events
	// always pass: their reconcile forgets what this replica kept. Admits
	// must admit an object from the moment Shard would; what it refused
	// before is requeued when the slot is acquired (RequeueAll), as what
	// Shard drops is. Shard still admits every reconcile, so that a slot's
	// work stops before the slot is given up. Defaults to nil: every event
	// is queued.
	Admits func(namespace string, uid types.UID) bool
	// ReadLive, when set, reports whether a guest's reads (cache_read) of
	// gvk in namespace ("": across namespaces, or a cluster-scoped kind)
	// go to APIReader instead of Client: a replica that caches only its
	// share (server-side sharding) reads other namespaces live. Reads are
	// authorized the same either way.
	ReadLive func(gvk schema.GroupVersionKind, namespace string) bool
	// Policy is the module's policy: storm damping, the Event budget,
	// the response limits, what the guest may read, the trigger fan-out
	// cap and whether unchanged events call the guest (see package
	// policy). Its Limits, RateLimit and MaxConcurrentReconciles are not
	// the reconciler's: the module's engine and controller take them. Zero
	// fields take policy's defaults.
	Policy policy.Policy
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
	declared // what the module declares, fixed at New

	reads   *cacheread.Reader // the guest's cache_read: the manifest's kinds, from the informer cache
	opts    Options
	objects *objects      // per-object state: attempts, child failures, Warnings, memos, storms, trigger marks
	sources *sourceDamper // storm damping per trigger source
	events  *eventLimiter
	calls   callGate // serialises a suspect module's calls

	shadow   atomic.Pointer[shadow.Shadow]                                           // a candidate called beside the serving version; nil for none
	queue    atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]] // the running controller's
	cache    atomic.Pointer[cache.Cache]                                             // the last controller's manager's, for RequeueAll
	activity activity
}

// declared is what a module's manifest declares, as the reconciler uses it.
type declared struct {
	name      string
	manifest  abi.Manifest
	gvk       schema.GroupVersionKind
	owns      []schema.GroupVersionKind
	finalizer string // empty when the module declares none
	rules     protocol.Rules
}

// callGate serialises the calls of a suspect module: one whose last
// finished call was preempted.
type callGate struct {
	suspect atomic.Bool
	penalty chan struct{} // capacity 1
}

// activity is what Activity reports besides the queue and failures.
type activity struct {
	active     atomic.Int64 // reconciles running now
	lastChange atomic.Int64 // unix nanoseconds of the last write
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
	opts.Policy = opts.Policy.WithDefaults()
	m := v.Module.Manifest()
	r := &Reconciler{
		declared: declared{
			name:     v.Module.Name(),
			manifest: m,
			gvk:      gvkOf(m.For),
			rules:    protocol.RulesFor(m, opts.Scopes, opts.Policy.Response),
		},
		opts:    opts,
		objects: newObjects(opts.Policy.Storm),
		sources: newSourceDamper(opts.Policy.Storm),
		events:  newEventLimiter(opts.Policy.Events),
		calls:   callGate{penalty: make(chan struct{}, 1)},
	}
	for _, g := range m.Owns {
		r.owns = append(r.owns, gvkOf(g))
	}
	if m.Finalizer {
		r.finalizer = FinalizerPrefix + r.name
	}
	var backend cacheread.Backend = cacheread.ClientBackend{Reader: opts.Client}
	if opts.ReadLive != nil {
		backend = cacheread.SplitBackend{Cache: backend, Live: cacheread.ClientBackend{Reader: opts.APIReader}, UseLive: opts.ReadLive}
	}
	r.reads = cacheread.New(m, backend,
		cacheread.Options{Namespaces: opts.Policy.ReadNamespaces, Scopes: opts.Scopes, Authorize: opts.Authorize})
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
	fingerprint  uint64        // of generation, children and version, for storm damping
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
	var pre *unstructured.Unstructured // read before admission, by uid
	if r.opts.Shard != nil {
		var uid types.UID
		if r.opts.ShardByUID {
			pre = &unstructured.Unstructured{}
			pre.SetGroupVersionKind(r.gvk)
			switch err := r.opts.Client.Get(ctx, req.NamespacedName, pre); {
			case apierrors.IsNotFound(err):
				pre = nil
			case err != nil:
				return ctrl.Result{}, fmt.Errorf("module[%s] %s: reading the object to place it by uid: %w", r.name, callName(req.NamespacedName), err)
			default:
				uid = pre.GetUID()
			}
		}
		exit, ok := r.opts.Shard(req.NamespacedName, uid)
		if !ok {
			return ctrl.Result{}, nil // another replica's; acquiring its slot requeues it here
		}
		defer exit()
		if r.opts.ShardByUID && pre == nil {
			// Gone when it was placed: its reconcile only forgets it. Not
			// read again: one of the same name created since has a uid of
			// its own, and its own event places it.
			return r.settle(ctx, outcome{key: req.NamespacedName, skip: skipGone})
		}
	}
	v, ok := r.opts.Slot.Acquire()
	if !ok {
		return ctrl.Result{}, nil // the module was removed
	}
	defer v.Release()
	r.activity.active.Add(1)
	defer r.activity.active.Add(-1)
	logger := r.opts.Log.WithValues("module", r.name, "digest", v.Module.Digest(),
		"object", klog.KRef(req.Namespace, req.Name), "reconcileID", crcontroller.ReconcileIDFromContext(ctx))
	ctx = log.IntoContext(ctx, logger)
	logger.V(1).Info("START reconcile")
	start := time.Now()
	o := r.runRecovered(ctx, req.NamespacedName, pre, v.Module, v.Hold)
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
func (r *Reconciler) runRecovered(ctx context.Context, key types.NamespacedName, pre *unstructured.Unstructured, module *engine.Module, hold func() (func(), bool)) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			err := &protocol.PanicError{Module: r.name, Call: callName(key), Value: v, Stack: string(debug.Stack())}
			r.opts.Metrics.HostPanics.WithLabelValues(r.name).Inc()
			log.FromContext(ctx).Error(err, "recovered a panic of the host's", "stack", err.Stack)
			o = outcome{key: key, obj: r.objectForEvent(ctx, key), err: err}
		}
	}()
	return r.run(ctx, key, pre, module, hold)
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
	// logged, with a flight recorder, keeps every request (copied out of
	// the guest's memory) and how it ended, decoded only for a call the
	// recorder keeps (readLog).
	logged []loggedRead
	log    bool
}

type loggedRead struct {
	request []byte
	status  abi.CacheStatus
}

func (c *countingReader) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	c.n++
	st, b := c.CacheReader.Read(ctx, request)
	if c.keep && st == abi.CacheOK {
		c.results = append(c.results, b)
	}
	if c.log {
		c.logged = append(c.logged, loggedRead{request: bytes.Clone(request), status: st})
	}
	return st, b
}

// readLog is the call's reads for the flight recorder: each request as the
// guest made it, and how it ended (a request that does not decode failed
// as malformed and is left out).
func (c *countingReader) readLog() []flightrecorder.Read {
	out := []flightrecorder.Read{}
	for _, l := range c.logged {
		var req abi.CacheRequest
		if json.Unmarshal(l.request, &req) == nil {
			out = append(out, flightrecorder.Read{Request: req, Status: l.status})
		}
	}
	return out
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
func (r *Reconciler) record(module *engine.Module, hold func() (func(), bool), key types.NamespacedName, in abi.Request, reads *countingReader, res engine.Result, err error, refused refusal) {
	fr := r.opts.FlightRecorder
	failed := err != nil || refused.any()
	if fr == nil || protocol.KindOf(err) == protocol.Canceled || protocol.KindOf(refused.err) == protocol.Canceled || !fr.Wants(r.name, failed) {
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
		Refused: append([]abi.ChildFailure(nil), refused.children...), ApplyErr: refused.err, ReadLog: reads.readLog(),
		ReadNamespaces: r.opts.Policy.ReadNamespaces, Scopes: r.opts.Scopes, Release: release})
}

// refusal is what the host could not write of a valid answer: children
// (refused by the API server, or a name taken) and the error that ended
// the apply (the status refused, say).
type refusal struct {
	children []abi.ChildFailure
	err      error
}

func (f refusal) any() bool { return len(f.children) > 0 || f.err != nil }

// call calls the guest. While the module is suspect (its last finished call
// was preempted: it spins or runs away), its calls run one at a time, so a
// spinning module occupies at most one CPU however many workers it has, and
// the other modules keep the rest. The first call that finishes without
// preemption lifts it.
func (r *Reconciler) call(ctx context.Context, module *engine.Module, call string, reads engine.CacheReader, request []byte) (engine.Result, error) {
	if r.calls.suspect.Load() {
		select {
		case r.calls.penalty <- struct{}{}:
			defer func() { <-r.calls.penalty }()
		case <-ctx.Done():
			return engine.Result{}, &engine.CanceledError{Module: r.name, Call: call}
		}
	}
	res, err := module.Reconcile(engine.WithCacheReader(ctx, reads), call, request)
	switch kind := protocol.KindOf(err); {
	case kind.Preempted():
		if !r.calls.suspect.Swap(true) {
			log.FromContext(ctx).Info("guest preempted: the module's calls now run one at a time until one finishes in budget", "error", err.Error())
		}
	case kind != protocol.Canceled:
		r.calls.suspect.Store(false)
	}
	return res, err
}
