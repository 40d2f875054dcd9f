package reconciler

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// pass is one reconcile in flight: what its stages hand each other, and
// the outcome they build. Only the reconcile's own goroutine touches it.
type pass struct {
	o    outcome
	call string // "reconcile ns/name", as errors name the call

	module  *engine.Module
	pre     *unstructured.Unstructured // the object, read before admission (Options.ShardByUID)
	hold    func() (func(), bool)      // keeps module open beyond the call (the flight recorder's replay)
	release []func()                   // run when the reconcile ends

	deleting bool
	observed []*unstructured.Unstructured // the object's children, as listed
	childFP  string                       // their fingerprint
	canary   bool                         // the candidate serves this object
	shadow   *shadow.Shadow               // the candidate to compare with; nil for none or a canary call

	input   abi.Request
	request []byte
	reads   *countingReader
	resp    *protocol.Response
	clean   bool // the apply left nothing pending: no child written, failed or untold
	// guestErr is the guest's own error in a decoded answer: the flight
	// recorder is handed the call after the apply (applyResponse), so that
	// it keeps what the API server refused of it.
	guestErr error
}

// stage is one step of a reconcile. It returns false when the reconcile
// ends with it: p.o is then the outcome.
type stage func(ctx context.Context, p *pass) bool

// run is the data path, one stage per job:
//
//	read → finalizer → children → route (canary, shadow) → admit (memo,
//	storm) → encode → call → observe (decode, shadow, recorder) → apply →
//	remember (memo)
//
// hold keeps module open beyond the call, for the flight recorder's replay
// (versionslot.Version.Hold). settle turns the outcome into everything
// else.
func (r *Reconciler) run(ctx context.Context, key types.NamespacedName, pre *unstructured.Unstructured, module *engine.Module, hold func() (func(), bool)) outcome {
	p := &pass{o: outcome{key: key}, call: callName(key), module: module, hold: hold, pre: pre}
	defer func() {
		for _, release := range p.release {
			release()
		}
	}()
	for _, step := range []stage{r.read, r.ensureFinalizer, r.listChildren, r.route, r.admit, r.encode, r.invoke, r.observe, r.applyResponse} {
		if !step(ctx, p) {
			return p.o
		}
	}
	r.remember(p)
	return p.o
}

// callName names the call in errors: "reconcile ns/name", or
// "reconcile name" for a cluster-scoped object.
func callName(key types.NamespacedName) string {
	if key.Namespace == "" {
		return "reconcile " + key.Name
	}
	return "reconcile " + key.String()
}

// fail ends the reconcile with a failure to read or write what; the outcome
// keeps what was done so far (the object, a written finalizer).
func (r *Reconciler) fail(p *pass, what string, err error) bool {
	p.o.err = &protocol.ApplyError{Module: r.name, Call: p.call, What: what, Err: err}
	return false
}

// read reads the object from the informer cache. A deleted object, and
// one being deleted that no finalizer of ours holds, end the reconcile.
func (r *Reconciler) read(ctx context.Context, p *pass) bool {
	obj := p.pre
	if obj == nil {
		obj = &unstructured.Unstructured{}
		obj.SetGroupVersionKind(r.gvk)
		if err := r.opts.Client.Get(ctx, p.o.key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				p.o.skip = skipGone
				return false
			}
			return r.fail(p, "reading the object", err)
		}
	}
	p.o.obj, p.deleting = obj, obj.GetDeletionTimestamp() != nil
	if p.deleting && (r.finalizer == "" || !controllerutil.ContainsFinalizer(obj, r.finalizer)) {
		p.o.skip = skipNotOurs
		return false
	}
	return true
}

// ensureFinalizer adds the module's finalizer to a live object that lacks
// it, before the guest can create anything the finalizer must clean up.
func (r *Reconciler) ensureFinalizer(ctx context.Context, p *pass) bool {
	if r.finalizer == "" || p.deleting || controllerutil.ContainsFinalizer(p.o.obj, r.finalizer) {
		return true
	}
	if err := r.patchFinalizer(ctx, p.o.obj, true); err != nil {
		return r.fail(p, "finalizer "+r.finalizer, err)
	}
	p.o.wrote = true
	return true
}

// listChildren lists the object's children from the informer cache.
func (r *Reconciler) listChildren(ctx context.Context, p *pass) bool {
	observed, err := r.observedChildren(ctx, p.o.obj)
	if err != nil {
		return r.fail(p, "listing children", err)
	}
	p.observed, p.childFP = observed, childrenFingerprint(observed)
	return true
}

// route picks the version that serves the object: a canary object is
// served by the candidate (its answers are applied), the others by the
// serving version, with the candidate, if any, called beside it.
func (r *Reconciler) route(_ context.Context, p *pass) bool {
	sh := r.shadow.Load()
	p.shadow = sh
	if sh == nil || !sh.Serves(p.o.obj) {
		return true
	}
	m, release, ok := sh.Acquire()
	if !ok {
		return true // the candidate is retiring: the serving version serves
	}
	p.release = append(p.release, release)
	// The recorder holds the candidate beyond the call through its own
	// Shadow: sh, not p.shadow, which is nil for a canary call (nothing to
	// compare).
	p.module, p.canary = m, true
	p.hold = func() (func(), bool) { _, rel, ok := sh.Acquire(); return rel, ok }
	return true
}

// admit decides whether the guest is called at all: not when the object is
// as the last call that needs no repeat left it (unchanged.go), nor while
// it is quiescent in a storm (storm.go). A trigger's call is admitted and
// not counted by the owner's storm (triggerdamp.go).
func (r *Reconciler) admit(_ context.Context, p *pass) bool {
	key, digest := p.o.key, p.module.Digest()
	if !r.opts.Policy.CallUnchanged && !p.deleting {
		if m, ok := r.objects.memoOf(key); ok {
			if same, wait := m.unchanged(digest, p.o.obj, p.childFP, r.opts.Now()); same {
				p.o.skip, p.o.requeueAfter = skipUnchanged, wait
				return false
			}
		}
	}
	r.objects.forgetMemo(key) // remembered again if this call needs no repeat
	// Only a call that is made is recorded for storm damping (settle).
	p.o.fingerprint = stormFingerprint(p.o.obj.GetGeneration(), p.childFP, digest)
	if p.o.triggered = r.objects.takeTriggered(key); p.o.triggered {
		return true
	}
	if ok, wait := r.objects.admitStorm(key, p.o.fingerprint, r.opts.Now()); !ok {
		p.o.skip, p.o.damped = skipStorm, wait
		return false
	}
	return true
}

// encode builds the guest's request.
func (r *Reconciler) encode(_ context.Context, p *pass) bool {
	children := make([]map[string]any, len(p.observed))
	for i, c := range p.observed {
		children[i] = c.Object
	}
	p.input = abi.Request{
		Object:        p.o.obj.Object,
		Children:      children,
		Finalizing:    p.deleting,
		Config:        r.opts.Config,
		Attempt:       r.objects.attempt(p.o.key),
		Now:           protocol.FormatNow(r.opts.Now()),
		ChildFailures: r.objects.failuresOf(p.o.key),
	}
	request, err := protocol.EncodeRequest(p.input)
	if err != nil {
		p.o.err = &engine.ABIError{Module: r.name, Call: p.call, Reason: "encoding the request: " + err.Error()}
		return false
	}
	p.request = request
	return true
}

// invoke calls the guest. What the guest reads is kept for the call: the
// recorder replays it, and the Secrets among it are scrubbed from what the
// host shows of the call (lastError, a shadow's differences).
func (r *Reconciler) invoke(ctx context.Context, p *pass) bool {
	p.o.called = true
	if p.shadow != nil && p.shadow.Options().Canary != nil {
		p.shadow.Served(p.canary)
	}
	if p.canary {
		p.shadow = nil // served by the candidate: nothing to compare
	}
	p.reads = &countingReader{CacheReader: r.reads.For(p.o.key.Namespace), keep: true, log: r.opts.FlightRecorder != nil}
	obj, children, reads := p.o.obj.Object, p.input.Children, p.reads
	p.o.seen = func() []map[string]any {
		return append(append([]map[string]any{obj}, children...), reads.objects()...)
	}
	p.o.res, p.o.err = r.call(ctx, p.module, p.call, p.reads, p.request)
	if p.o.err != nil {
		r.observeAnswer(p, compare.Answer{Kind: protocol.KindOf(p.o.err), Err: p.o.err.Error()}, p.o.err)
		return false
	}
	return true
}

// observe decodes the guest's answer by the module's response rules, and
// hands the call to the shadow and the flight recorder.
func (r *Reconciler) observe(_ context.Context, p *pass) bool {
	resp, err := r.rules.Decode(p.call, p.o.obj.Object, len(p.request), p.o.res.Output)
	if err != nil {
		r.observeAnswer(p, compare.Answer{Kind: protocol.KindOf(err), Err: err.Error()}, err)
		p.o.err = err
		return false
	}
	p.resp = resp
	if resp.Error != nil {
		p.guestErr = r.guestError(p)
	}
	r.toShadow(p.shadow, p.o.key, p.call, p.o.obj, p.request, answerOf(resp), p.o.seen)
	return true
}

// observeAnswer hands the serving version's answer to the shadow and the
// call to the flight recorder.
func (r *Reconciler) observeAnswer(p *pass, answer compare.Answer, err error) {
	r.toShadow(p.shadow, p.o.key, p.call, p.o.obj, p.request, answer, p.o.seen)
	r.record(p.module, p.hold, p.o.key, p.input, p.reads, p.o.res, err, refusal{})
}

func (r *Reconciler) guestError(p *pass) error {
	return &protocol.GuestError{Module: r.name, Call: p.call, Message: p.resp.Error.Message, Terminal: p.resp.Error.Terminal}
}

// applyResponse writes what the guest asked for (apply.go) and keeps the
// child failures it must be told of.
func (r *Reconciler) applyResponse(ctx context.Context, p *pass) bool {
	resp := p.resp
	in := p.input
	if p.deleting && r.opts.FlightRecorder != nil {
		// Removing the finalizer (apply) changes the object in place: the
		// recorder keeps the object the guest saw.
		in.Object = runtime.DeepCopyJSON(p.input.Object)
	}
	a, err := r.apply(ctx, p.call, p.o.obj, p.observed, resp, p.deleting, p.input.ChildFailures)
	// The recorder keeps the call with what the API server refused of it
	// (a child, the status): what offline checks cannot see.
	r.record(p.module, p.hold, p.o.key, in, p.reads, p.o.res, p.guestErr, refusal{children: a.failures, err: err})
	p.o.wrote, p.o.untold = p.o.wrote || a.wrote, a.untold
	switch {
	case a.synced:
		r.objects.setFailures(p.o.key, a.failures)
	case resp.Children == nil && resp.Error == nil:
		r.objects.setFailures(p.o.key, nil) // the guest no longer asks for the children that failed
	}
	switch {
	case err != nil:
		p.o.err = err
		return false
	case resp.Error != nil:
		p.o.err = r.guestError(p)
	default:
		p.o.requeueAfter = time.Duration(resp.RequeueAfterSeconds) * time.Second
	}
	p.clean = !a.untold && !a.childWrites && len(a.failures) == 0
	return true
}

// remember keeps a memo of a success, and of a terminal guest error (one
// the same input repeats), so that an event that changes nothing the guest
// sees, such as the one of the status this call wrote, is not another call:
// after a terminal error it would fail again and record a second identical
// Warning (unchanged.go). Only calls that leave nothing pending qualify.
func (r *Reconciler) remember(p *pass) {
	resp := p.resp
	success := resp.Error == nil
	if !(success || resp.Error.Terminal) || p.deleting || !p.clean || len(p.input.ChildFailures) > 0 || p.reads.n > 0 {
		return
	}
	status := any(resp.Status)
	if resp.Status == nil {
		status = p.o.obj.Object["status"]
	}
	m := memo{digest: p.module.Digest(), inputs: hashObject(p.o.obj), status: hashValue(status), children: hashString(p.childFP)}
	if success && p.o.requeueAfter > 0 {
		m.due = r.opts.Now().Add(p.o.requeueAfter)
	}
	r.objects.setMemo(p.o.key, m)
}
