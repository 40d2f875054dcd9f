package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/subset"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// applied is what apply did.
type applied struct {
	wrote       bool               // something was written
	synced      bool               // the children were synced (the response had children)
	failures    []abi.ChildFailure // desired children not written
	untold      bool               // a failure the request did not list: the status was withheld
	childWrites bool               // a child was created, applied or pruned
}

// apply writes what a valid response asks for, in this order:
//   - children, only from a response without error that has children (nil
//     children leave them alone; a failed reconcile must not prune what it
//     could not compute): desired children that do not exist are created,
//     the module's children that would change are applied with server-side
//     apply, and the module's children no longer desired are deleted. A
//     child whose name is taken by an object the module did not create is
//     not written (a failure of reason Conflict); every other child is
//     still written when one fails;
//   - the status, when it differs from the observed one, unless a child
//     failed that told (the request's ChildFailures) does not list: a
//     status computed without knowing of the failure could claim success
//     over it, so it waits for the next call, which lists the failure;
//   - the guest's Events, those within the Event budget (policy.Events);
//   - the finalizer's removal, when the object is being deleted, the guest
//     answered Finalized without error, and every child was written.
//
// Its error is a *protocol.ChildrenError when children failed, an
// *protocol.InvalidResponseError when the API server refused the status as
// invalid, and an *protocol.ApplyError for any other failed write.
func (r *Reconciler) apply(ctx context.Context, call string, obj *unstructured.Unstructured, observed []*unstructured.Unstructured, resp *protocol.Response, deleting bool, told []abi.ChildFailure) (applied, error) {
	var a applied
	if resp.Error == nil && resp.Children != nil {
		a.synced = true
		a.wrote, a.failures = r.syncChildren(ctx, obj, resp.Desired, observed)
		a.childWrites = a.wrote
		a.untold = !allTold(a.failures, told)
	}
	var err error
	if len(a.failures) > 0 {
		err = &protocol.ChildrenError{Module: r.name, Call: call, Failures: a.failures}
	}
	switch {
	case resp.Status == nil:
	case a.untold:
		log.FromContext(ctx).Info("status not written: children failed that the guest has not seen yet; calling it again with Request.childFailures", "failures", len(a.failures))
	default:
		w, serr := r.applyStatus(ctx, call, obj, resp.Status)
		a.wrote = a.wrote || w
		if serr != nil && err == nil {
			err = serr
		}
	}
	r.recordEvents(ctx, obj, resp.Events)
	if deleting && resp.Finalized && resp.Error == nil && len(a.failures) == 0 && err == nil {
		if ferr := r.patchFinalizer(ctx, obj, false); ferr != nil {
			r.applyFailed(ctx, "finalizer", ferr)
			return a, &protocol.ApplyError{Module: r.name, Call: call, What: "removing finalizer " + r.finalizer, Err: ferr}
		}
		a.wrote = true
	}
	return a, err
}

// allTold reports whether every failure is listed in told (by child and
// reason).
func allTold(failures, told []abi.ChildFailure) bool {
	key := func(f abi.ChildFailure) string {
		return f.APIVersion + "/" + f.Kind + "/" + f.Namespace + "/" + f.Name + "/" + f.Reason
	}
	seen := make(map[string]bool, len(told))
	for _, f := range told {
		seen[key(f)] = true
	}
	for _, f := range failures {
		if !seen[key(f)] {
			return false
		}
	}
	return true
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

// syncChildren writes the desired children and prunes the module's
// children that are no longer desired (see apply), and returns whether it
// wrote anything and the children it could not write or prune.
func (r *Reconciler) syncChildren(ctx context.Context, obj *unstructured.Unstructured, desired, observed []*unstructured.Unstructured) (bool, []abi.ChildFailure) {
	wrote := false
	var failures []abi.ChildFailure
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
	for _, d := range desired { // the response's own objects: set in place
		d.SetOwnerReferences(owner)
		labels := d.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[ModuleLabel] = r.name
		d.SetLabels(labels)
		k := childKey(d)
		o, exists := byKey[k]
		delete(byKey, k)
		w, f := r.writeChild(ctx, obj, d, o, exists)
		wrote = wrote || w
		if f != nil {
			failures = append(failures, *f)
		}
	}
	for _, o := range byKey { // the module's children no longer desired
		uid := o.GetUID()
		err := r.opts.Writer.Delete(ctx, o, client.Preconditions{UID: &uid})
		switch {
		case err == nil:
			wrote = true
			r.opts.Metrics.ChildOperations.WithLabelValues(r.name, "prune").Inc()
			logger.V(1).Info("child pruned", "child", childName(o))
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err): // gone, or replaced by another object
		default:
			r.applyFailed(ctx, "prune", err)
			failures = append(failures, failure(o, err, "deleting it"))
		}
	}
	return wrote, failures
}

// writeChild writes desired child d of obj: an update of o, the module's
// child of that name, when it exists (exists) and d would change it, and
// otherwise a create, which never replaces an object. A name taken by an
// object that is not the module's child of obj is a Conflict failure.
func (r *Reconciler) writeChild(ctx context.Context, obj, d, o *unstructured.Unstructured, exists bool) (bool, *abi.ChildFailure) {
	logger := log.FromContext(ctx)
	if !exists {
		// The cache knows of every object of the owned kinds: one of this
		// name that is not ours is a conflict, without asking the API server.
		cached := &unstructured.Unstructured{}
		cached.SetGroupVersionKind(d.GroupVersionKind())
		err := r.opts.Client.Get(ctx, client.ObjectKeyFromObject(d), cached)
		switch {
		case err == nil && !r.ours(cached, obj):
			return false, r.conflict(ctx, d, cached)
		case err == nil:
			o, exists = cached, true // ours, and not yet in the controller index
		case !apierrors.IsNotFound(err):
			r.applyFailed(ctx, "child", err)
			f := failure(d, err, "reading it from the cache")
			return false, &f
		}
	}
	if exists {
		if subset.Contains(d.Object, o.Object) {
			return false, nil // applying would change nothing
		}
		// The UID makes the apply a precondition: an object deleted and
		// created again by someone else meanwhile is not overwritten.
		d.SetUID(o.GetUID())
		err := r.opts.Writer.Apply(ctx, client.ApplyConfigurationFromUnstructured(d), client.FieldOwner(r.name), client.ForceOwnership)
		d.SetUID("")
		if err != nil {
			r.applyFailed(ctx, "child", err)
			f := failure(d, err, "applying it")
			return false, &f
		}
		r.opts.Metrics.ChildOperations.WithLabelValues(r.name, "apply").Inc()
		logger.V(1).Info("child applied", "child", childName(d))
		return true, nil
	}
	// Create, not apply: a create fails on an existing object, where an
	// apply would take it over. The create's field ownership is then
	// turned into the module's apply ownership, so that a field the guest
	// later drops is removed by its next apply.
	created := d.DeepCopy()
	// Strict: a create would otherwise drop a field the schema does not
	// declare, with only a warning, and the child's next apply would fail.
	err := r.opts.Writer.Create(ctx, created, client.FieldOwner(r.name), client.FieldValidation(metav1.FieldValidationStrict))
	if isStrictDecoding(err) {
		// Refuse it in the words of server-side apply, as the module's
		// every later write and the offline schema check would: a dry run
		// of the apply gives them, and writes nothing.
		if aerr := r.opts.Writer.Apply(ctx, client.ApplyConfigurationFromUnstructured(d.DeepCopy()), client.FieldOwner(r.name), client.ForceOwnership, client.DryRunAll); aerr != nil {
			err = aerr
		}
	}
	if apierrors.IsAlreadyExists(err) {
		// Created meanwhile, by us (an earlier reconcile the cache has not
		// seen yet) or by someone else: ask the API server whose it is.
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(d.GroupVersionKind())
		if gerr := r.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(d), live); gerr != nil {
			r.applyFailed(ctx, "child", gerr)
			f := failure(d, gerr, "reading it after its create found it existing")
			return false, &f
		}
		if !r.ours(live, obj) {
			return false, r.conflict(ctx, d, live)
		}
		return r.writeChild(ctx, obj, d, live, true)
	}
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// The namespace is being deleted: its controller deletes the
		// children before their owner, and the owner goes next. Nothing to
		// report, and nothing to retry.
		logger.V(1).Info("child not created: its namespace is being deleted", "child", childName(d))
		return false, nil
	}
	if err != nil {
		r.applyFailed(ctx, "child", err)
		f := failure(d, err, "creating it")
		return false, &f
	}
	if patch, perr := csaupgrade.UpgradeManagedFieldsPatch(created, sets.New(r.name), r.name); perr == nil && patch != nil {
		if perr := r.opts.Writer.Patch(ctx, created, client.RawPatch(types.JSONPatchType, patch)); perr != nil && !apierrors.IsConflict(perr) && !apierrors.IsNotFound(perr) {
			// The child exists and is ours; only a later field removal is
			// affected. Say so, and carry on.
			logger.Info("child created, but its field ownership could not be made the module's apply ownership", "child", childName(d), "error", perr.Error())
		}
	}
	r.opts.Metrics.ChildOperations.WithLabelValues(r.name, "apply").Inc()
	logger.V(1).Info("child created", "child", childName(d))
	return true, nil
}

// conflict reports desired child d, whose name is taken by existing, an
// object that is not the module's child of the reconciled object.
func (r *Reconciler) conflict(ctx context.Context, d, existing *unstructured.Unstructured) *abi.ChildFailure {
	holder := "no controller"
	if ref := metav1.GetControllerOfNoCopy(existing); ref != nil {
		holder = fmt.Sprintf("controller %s %s", ref.Kind, ref.Name)
		if existing.GetLabels()[ModuleLabel] != r.name {
			if m := existing.GetLabels()[ModuleLabel]; m != "" {
				holder += ", made by module " + m
			} else {
				holder += ", not made by a module"
			}
		}
	}
	r.opts.Metrics.ApplyFailures.WithLabelValues(r.name, "child", abi.ChildFailureConflict).Inc()
	log.FromContext(ctx).Error(nil, "desired child not written: its name is taken by an object this module did not create", "child", childName(d), "holder", holder)
	return &abi.ChildFailure{
		APIVersion: d.GetAPIVersion(), Kind: d.GetKind(), Namespace: d.GetNamespace(), Name: d.GetName(),
		Reason: abi.ChildFailureConflict,
		Message: fmt.Sprintf("%s exists and was not created by module %s for this object (%s); it is never adopted, overwritten or deleted: rename the child, or remove the object",
			childName(d), r.name, holder),
	}
}

// reasonFor is the reason of a write the API server refused: its
// StatusReason, except that a refusal by the schema is Invalid however the
// API server answered it. Server-side apply answers an undeclared field or
// a value of the wrong type with 500 and no reason ("failed to create typed
// patch object"), and a strict create with 400 BadRequest ("strict decoding
// error"); both are invalid responses, not transient failures to retry.
func reasonFor(err error) string {
	if isSchemaRefusal(err) {
		return string(metav1.StatusReasonInvalid)
	}
	if reason := string(apierrors.ReasonForError(err)); reason != "" {
		return reason
	}
	return "Failed"
}

// isSchemaRefusal reports whether the API server refused a write because
// it does not match the kind's schema.
func isSchemaRefusal(err error) bool {
	if err == nil {
		return false
	}
	if apierrors.IsInvalid(err) || isStrictDecoding(err) {
		return true
	}
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed to create typed patch object")
}

// isStrictDecoding reports whether a strict create was refused for a field
// the schema does not declare (or declares twice).
func isStrictDecoding(err error) bool {
	return err != nil && apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "strict decoding error")
}

// failure reports that doing what to child c failed with err.
func failure(c *unstructured.Unstructured, err error, what string) abi.ChildFailure {
	reason := reasonFor(err)
	return abi.ChildFailure{
		APIVersion: c.GetAPIVersion(), Kind: c.GetKind(), Namespace: c.GetNamespace(), Name: c.GetName(),
		Reason: reason, Message: fmt.Sprintf("%s: %s: the API server answered %s", childName(c), what, err.Error()),
	}
}

// applyFailed counts and logs a write the API server refused; target is
// child, prune, status or finalizer.
func (r *Reconciler) applyFailed(ctx context.Context, target string, err error) {
	reason := reasonFor(err)
	r.opts.Metrics.ApplyFailures.WithLabelValues(r.name, target, reason).Inc()
	log.FromContext(ctx).Error(err, "write refused", "target", target, "reason", reason)
}

// applyStatus writes desired as the object's status unless it already is,
// and reports whether it wrote.
func (r *Reconciler) applyStatus(ctx context.Context, call string, obj *unstructured.Unstructured, desired map[string]any) (bool, error) {
	observed, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status")
	if equality.Semantic.DeepEqual(observed, any(desired)) {
		return false, nil
	}
	err := r.patchStatus(ctx, obj, desired)
	if err != nil {
		r.applyFailed(ctx, "status", err)
	}
	if isSchemaRefusal(err) {
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

// patchStatus applies desired as obj's status with server-side apply, as
// the module's field manager, forcing ownership: through
// Options.StatusApplier, which reads no answer, or else Writer, asking
// for the answer as PartialObjectMetadata (protobuf where the client
// prefers it): the host never reads the object the API server returns,
// and decoding all of it into an unstructured map cost 6% of the
// operator's CPU at 10,000 objects (docs/benchmarks.md).
func (r *Reconciler) patchStatus(ctx context.Context, obj *unstructured.Unstructured, desired map[string]any) error {
	md := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		md["namespace"] = ns
	}
	apiVersion, kind := r.gvk.ToAPIVersionAndKind()
	body, err := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md, "status": desired})
	if err != nil {
		return err
	}
	if a := r.opts.StatusApplier; a != nil {
		return a.Apply(ctx, r.gvk, obj.GetNamespace(), obj.GetName(), r.name, body)
	}
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}}
	target.SetGroupVersionKind(r.gvk)
	return r.opts.Writer.Status().Patch(ctx, target, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(r.name), client.ForceOwnership)
}

// patchFinalizer adds or removes the module's finalizer, with optimistic
// locking so that no other finalizer is lost. A conflict (anyone changed
// the object since it was read: the namespace controller, another
// finalizer's owner) is retried on the object read again from the API
// server, as long as it is the same object (its UID) and the change still
// applies: a finalizer is not added to an object being deleted. obj ends
// as the API server last returned it.
func (r *Reconciler) patchFinalizer(ctx context.Context, obj *unstructured.Unstructured, add bool) error {
	cur := obj
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if controllerutil.ContainsFinalizer(cur, r.finalizer) == add || (add && cur.GetDeletionTimestamp() != nil) {
			return nil // nothing (left) to change
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if add {
			controllerutil.AddFinalizer(cur, r.finalizer)
		} else {
			controllerutil.RemoveFinalizer(cur, r.finalizer)
		}
		err := r.opts.Writer.Patch(ctx, cur, patch)
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh := &unstructured.Unstructured{}
		fresh.SetGroupVersionKind(obj.GroupVersionKind())
		if gerr := r.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), fresh); gerr != nil {
			return gerr // NotFound: gone, nothing to do (below)
		}
		switch {
		case fresh.GetUID() == obj.GetUID():
			cur = fresh
			return err // retried on fresh
		case add: // not a conflict: retrying cannot help
			return fmt.Errorf("%s was deleted and created again while its finalizer was added; the new object is reconciled on its own event", client.ObjectKeyFromObject(obj))
		default:
			return nil // the object that held it is gone
		}
	})
	if cur != obj {
		obj.Object = cur.Object
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
