package reconciler

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// Finalizer is the finalizer the host adds to the module's objects, or ""
// when the module declares none.
func (r *Reconciler) Finalizer() string { return r.finalizer }

// Kind is the kind the module reconciles.
func (r *Reconciler) Kind() schema.GroupVersionKind { return r.gvk }

// DrainFinalizer removes the module's finalizer from every object of its
// kind that holds it, so that a module that is removed, or whose new
// version declares no finalizer, leaves no object stuck terminating. Call
// it once the module's controller has stopped (nothing adds the finalizer
// any more); the reconciler keeps its clients for it.
//
// It lists the objects from the informer cache (Options.Client; with
// Options.Shard, from the API server, Options.APIReader) and
// removes the finalizer with the same optimistic-lock merge patch as a
// finalized reconcile, made by Options.Writer (the module's identity). A
// conflict is retried from the object as the API server has it
// (Options.APIReader); an object gone, or no longer holding the
// finalizer, counts as done. It returns how many objects it released and
// how many still hold the finalizer (those whose patch failed; err joins
// their errors). A module without a finalizer has nothing to drain.
//
// The cache may lag behind the API server: a finalizer added just before
// the controller stopped may not be listed yet, so callers confirm with a
// later pass that finds nothing to release.
func (r *Reconciler) DrainFinalizer(ctx context.Context) (released, remaining int, err error) {
	if r.finalizer == "" {
		return 0, 0, nil
	}
	items, err := r.drainList(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("module[%s]: listing %s to remove finalizer %s: %w", r.name, r.gvk.Kind, r.finalizer, err)
	}
	var errs []error
	for i := range items {
		obj := &items[i]
		if !controllerutil.ContainsFinalizer(obj, r.finalizer) {
			continue
		}
		did, perr := r.releaseOne(ctx, obj)
		switch {
		case perr != nil:
			remaining++
			errs = append(errs, fmt.Errorf("%s/%s: %w", obj.GetNamespace(), obj.GetName(), perr))
		case did:
			released++
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) > 0 {
		err = fmt.Errorf("module[%s]: removing finalizer %s: %w", r.name, r.finalizer, errors.Join(errs...))
	}
	return released, remaining, err
}

// drainList lists every object of the module's kind: from the cache, or,
// with Options.Shard (a sharded replica's cache may hold only its share),
// from the API server in pages of 500.
func (r *Reconciler) drainList(ctx context.Context) ([]unstructured.Unstructured, error) {
	gvk := r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List")
	if r.opts.Shard == nil {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := r.opts.Client.List(ctx, list); err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	var items []unstructured.Unstructured
	cont := ""
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := r.opts.APIReader.List(ctx, list, client.Limit(500), client.Continue(cont)); err != nil {
			return nil, err
		}
		items = append(items, list.Items...)
		if cont = list.GetContinue(); cont == "" {
			return items, nil
		}
	}
}

// releaseOne removes the module's finalizer from obj, retrying conflicts
// from the live object. It reports whether it removed it (false: the
// object is gone or no longer holds it).
func (r *Reconciler) releaseOne(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	cur := obj.DeepCopy()
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(r.gvk)
			if err := r.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, live); err != nil {
				if apierrors.IsNotFound(err) {
					cur = nil
					return nil
				}
				return err
			}
			cur = live
		}
		first = false
		if !controllerutil.ContainsFinalizer(cur, r.finalizer) {
			cur = nil
			return nil
		}
		if cur.GetUID() != obj.GetUID() {
			cur = nil // deleted and created again since: not the object listed
			return nil
		}
		return r.patchFinalizer(ctx, cur, false) // an object gone meanwhile is no error
	})
	if err != nil {
		r.applyFailed(ctx, "finalizer", err)
		return false, err
	}
	return cur != nil, nil
}
