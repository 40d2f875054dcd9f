package reconciler

// settle.go: the one place an outcome becomes metrics, statistics, the
// attempt count, Warning Events, storm state and the controller's result.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

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
		r.objects.forget(o.key)
		r.events.forget(o.key)
		return ctrl.Result{}, nil
	case skipNotOurs:
		r.objects.notOurs(o.key)
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
		r.activity.lastChange.Store(r.opts.Now().UnixNano())
	}
	if kind == protocol.Canceled {
		return ctrl.Result{}, o.err // shutting down: retried by the next leader or start
	}
	r.opts.Stats.record(kind, o.called, o.res)
	if kind == protocol.Success {
		r.objects.succeeded(o.key)
		// A triggered call that wrote nothing is not the owner's storm.
		if o.triggered && !o.wrote {
			return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
		}
		if storm, n := r.objects.recordStorm(o.key, o.fingerprint, o.wrote, r.opts.Now()); storm {
			r.opts.Metrics.StormsDetected.WithLabelValues(r.name).Inc()
			r.warn(o.obj, ReasonReconcileStorm, fmt.Sprintf("reconciled %d times within %s without any change; the guest is now called at most once every %s until the object's generation or children change",
				n, r.objects.storm.Window, r.objects.storm.Backoff))
			log.FromContext(ctx).Info("reconcile storm: object is quiescent", "reconciles", n)
		}
		return ctrl.Result{RequeueAfter: o.requeueAfter}, nil
	}
	r.objects.failed(o.key)
	// The error is shown in a ReconcileModule's status and in an Event, to
	// whoever may read those: without the values of the Secrets the call
	// saw (a guest's message may quote one).
	scrub := func(s string) string { return s }
	if o.seen != nil {
		sc := &redact.Scrubber{}
		sc.LearnAll(o.seen()...)
		scrub = sc.String
	}
	r.opts.Stats.setLastError(scrub(fmt.Sprintf("%s %s: %s", kind, o.key, o.err.Error())))
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

// newWarning reports whether failure o deserves a Warning Event: every
// failure does, except a terminal one that repeats the last terminal
// failure of the object (same generation, kind and message). A terminal
// failure's status write, or any event that changes nothing the guest
// reads, may call the guest again, which fails the same way; the object
// already says so. A success in between, or a new generation, warns again.
func (r *Reconciler) newWarning(o outcome) bool {
	sig := fmt.Sprintf("%d|%s|%s", o.obj.GetGeneration(), protocol.KindOf(o.err), protocol.Note(o.err))
	return r.objects.newWarning(o.key, protocol.Terminal(o.err) && !o.untold, sig)
}
