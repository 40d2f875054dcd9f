package reconciler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ModuleLabel marks every child with the name of the module that created
// it. A module reads, updates and prunes only the objects that carry both
// its mark and a controller reference to the reconciled object: an object
// it did not create is never adopted, overwritten or deleted.
const ModuleLabel = "wasmreconcile.io/module"

// ControllerIndex is the field index, on the informers of owned kinds, of
// the UID of an object's controller: observed children are looked up in it,
// so a reconcile costs the same however many unrelated objects share the
// namespace.
const ControllerIndex = "wasmreconcile.io/controller-uid"

// indexed remembers the informers that have the controller index, so that
// it is added once per informer (an informer removed and created again is
// a new one).
var indexed sync.Map // cache.Informer → struct{}

// IndexChildren adds ControllerIndex to c's informer of gvk, once. The
// informer is created when it does not exist.
func IndexChildren(ctx context.Context, c cache.Cache, gvk schema.GroupVersionKind) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer of %s: %w", gvk.Kind, err)
	}
	indexed.Range(func(k, _ any) bool { // forget informers removed since
		if k.(cache.Informer).IsStopped() {
			indexed.Delete(k)
		}
		return true
	})
	if _, done := indexed.LoadOrStore(inf, struct{}{}); done {
		return nil
	}
	err = c.IndexField(ctx, obj, ControllerIndex, func(o client.Object) []string {
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			return []string{string(ref.UID)}
		}
		return nil
	})
	if err != nil && !strings.Contains(err.Error(), "indexer conflict") {
		indexed.Delete(inf)
		return fmt.Errorf("indexing %s by controller: %w", gvk.Kind, err)
	}
	return nil
}

// childName names a child in messages: "Kind namespace/name".
func childName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// childKey identifies a child: group, kind, namespace and name.
func childKey(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return gvk.Group + "/" + gvk.Kind + "/" + u.GetNamespace() + "/" + u.GetName()
}

// ours reports whether c is a child of owner made by this module: owner is
// its controller and it carries the module's mark.
func (r *Reconciler) ours(c, owner *unstructured.Unstructured) bool {
	ref := metav1.GetControllerOfNoCopy(c)
	return ref != nil && ref.UID == owner.GetUID() && c.GetLabels()[ModuleLabel] == r.name
}

// observedChildren lists, from the cache's controller index, the objects of
// the owned kinds that are this module's children of obj (see ours). A
// namespaced owner's children are in its namespace; a cluster-scoped
// owner's may be in any.
func (r *Reconciler) observedChildren(ctx context.Context, obj *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, gvk := range r.owns {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		opts := []client.ListOption{client.MatchingFields{ControllerIndex: string(obj.GetUID())}}
		if ns := obj.GetNamespace(); ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := r.opts.Client.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			if c := &list.Items[i]; r.ours(c, obj) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// childrenFingerprint identifies the observed children and their versions,
// so that storm damping notices any change to them.
func childrenFingerprint(observed []*unstructured.Unstructured) string {
	keys := make([]string, len(observed))
	for i, o := range observed {
		keys[i] = childKey(o) + "@" + o.GetResourceVersion()
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
