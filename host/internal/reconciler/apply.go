package reconciler

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/subset"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// apply writes what a valid response asks for, in this order, and reports
// whether it wrote anything:
//   - children, only from a response without error (a failed reconcile
//     must not prune what it could not compute): desired children that
//     would change are applied with server-side apply, and observed
//     children no longer desired are deleted;
//   - the status, when it differs from the observed one (after the
//     children, so that a status such as Ready=True is not written when
//     the children it describes could not be);
//   - the guest's Events, those within the Event budget (EventBudget);
//   - the finalizer's removal, when the object is being deleted and the
//     guest answered Finalized without error.
//
// The API server refusing a child or the status as invalid is an
// *protocol.InvalidResponseError (terminal: the same response would be
// refused again); any other failure is an *protocol.ApplyError.
func (r *Reconciler) apply(ctx context.Context, call string, obj *unstructured.Unstructured, observed []*unstructured.Unstructured, resp *protocol.Response, deleting bool) (bool, error) {
	wrote := false
	if resp.Error == nil {
		w, err := r.syncChildren(ctx, call, obj, resp, observed)
		wrote = wrote || w
		if err != nil {
			return wrote, err
		}
	}
	if resp.Status != nil {
		w, err := r.applyStatus(ctx, call, obj, resp.Status)
		wrote = wrote || w
		if err != nil {
			return wrote, err
		}
	}
	r.recordEvents(ctx, obj, resp.Events)
	if deleting && resp.Finalized && resp.Error == nil {
		if err := r.patchFinalizer(ctx, obj, false); err != nil {
			return wrote, &protocol.ApplyError{Module: r.name, Call: call, What: "removing finalizer " + r.finalizer, Err: err}
		}
		wrote = true
	}
	return wrote, nil
}

// recordEvents records the guest's Events on obj (checked by protocol: at
// most MaxEvents, valid types, notes the API server accepts), dropping and
// counting those over the Event budget, with one log line per response
// that had some dropped.
func (r *Reconciler) recordEvents(ctx context.Context, obj *unstructured.Unstructured, events []abi.Event) {
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	now := r.opts.Now()
	dropped := 0
	for _, e := range events {
		if reason := r.events.allow(key, now); reason != "" {
			r.opts.Metrics.EventsDropped.WithLabelValues(r.name, reason).Inc()
			dropped++
			continue
		}
		r.opts.Recorder.Eventf(obj, nil, string(e.Type), e.Reason, "Reconcile", "%s", e.Message)
	}
	if dropped > 0 {
		log.FromContext(ctx).V(1).Info("guest Events dropped over the Event budget", "dropped", dropped, "of", len(events))
	}
}

// syncChildren applies the desired children that would change something and
// deletes the observed children that are no longer desired.
func (r *Reconciler) syncChildren(ctx context.Context, call string, obj *unstructured.Unstructured, resp *protocol.Response, observed []*unstructured.Unstructured) (bool, error) {
	wrote := false
	logger := log.FromContext(ctx)
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range observed {
		byKey[childKey(o)] = o
	}
	yes := true
	owner := []metav1.OwnerReference{{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), UID: obj.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &yes,
	}}
	for _, d := range resp.Desired { // the response's own objects: set in place
		d.SetOwnerReferences(owner)
		k := childKey(d)
		o, exists := byKey[k]
		delete(byKey, k)
		if exists && subset.Contains(d.Object, o.Object) {
			continue // applying would change nothing
		}
		err := r.opts.Writer.Apply(ctx, client.ApplyConfigurationFromUnstructured(d), client.FieldOwner(r.name), client.ForceOwnership)
		if apierrors.IsInvalid(err) {
			return wrote, &protocol.InvalidResponseError{Module: r.name, Call: call,
				Reason: fmt.Sprintf("the API server refused child %s: %v", childName(d), err)}
		}
		if err != nil {
			return wrote, &protocol.ApplyError{Module: r.name, Call: call, What: "child " + childName(d), Err: err}
		}
		wrote = true
		r.opts.Metrics.ChildOperations.WithLabelValues(r.name, "apply").Inc()
		logger.V(1).Info("child applied", "child", childName(d))
	}
	for _, o := range byKey { // observed but no longer desired
		uid := o.GetUID()
		err := r.opts.Writer.Delete(ctx, o, client.Preconditions{UID: &uid})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return wrote, &protocol.ApplyError{Module: r.name, Call: call, What: "pruning child " + childName(o), Err: err}
		}
		if err == nil {
			wrote = true
			r.opts.Metrics.ChildOperations.WithLabelValues(r.name, "prune").Inc()
		}
		logger.V(1).Info("child pruned", "child", childName(o))
	}
	return wrote, nil
}

// applyStatus writes desired as the object's status unless it already is,
// and reports whether it wrote.
func (r *Reconciler) applyStatus(ctx context.Context, call string, obj *unstructured.Unstructured, desired map[string]any) (bool, error) {
	observed, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status")
	if equality.Semantic.DeepEqual(observed, any(desired)) {
		return false, nil
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": desired}}
	patch.SetGroupVersionKind(r.gvk)
	patch.SetNamespace(obj.GetNamespace())
	patch.SetName(obj.GetName())
	err := r.opts.Writer.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch),
		client.FieldOwner(r.name), client.ForceOwnership)
	if apierrors.IsInvalid(err) {
		return false, &protocol.InvalidResponseError{Module: r.name, Call: call,
			Reason: fmt.Sprintf("the API server refused the status: %v; make the module's status match the CRD's schema", err)}
	}
	if err != nil {
		return false, &protocol.ApplyError{Module: r.name, Call: call, What: "status", Err: err}
	}
	r.opts.Metrics.StatusWrites.WithLabelValues(r.name).Inc()
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
	if err := r.opts.Writer.Patch(ctx, obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
