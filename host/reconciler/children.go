package reconciler

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/host/internal/subset"
	"github.com/wasmreconcile/wasmreconcile/host/metrics"
)

// childKey identifies a child: kind, namespace and name.
type childKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

func (k childKey) String() string {
	return fmt.Sprintf("%s %s/%s", k.gvk.Kind, k.namespace, k.name)
}

func keyOf(u *unstructured.Unstructured) childKey {
	return childKey{gvk: u.GroupVersionKind(), namespace: u.GetNamespace(), name: u.GetName()}
}

// observedChildren lists, from the cache, the objects of the owned kinds
// whose controller is obj.
func (r *Reconciler) observedChildren(ctx context.Context, obj *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, gvk := range r.owns {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil, fmt.Errorf("module[%s] listing %s children of %s/%s: %w", r.name, gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		for i := range list.Items {
			c := &list.Items[i]
			if ref := metav1.GetControllerOfNoCopy(c); ref != nil && ref.UID == obj.GetUID() {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// desiredChildren validates the guest's children and completes them: the
// owner's namespace when none is set, and obj as controller owner.
func (r *Reconciler) desiredChildren(obj *unstructured.Unstructured, children []map[string]any) ([]*unstructured.Unstructured, error) {
	owned := map[schema.GroupVersionKind]bool{}
	for _, g := range r.owns {
		owned[g] = true
	}
	seen := map[childKey]bool{}
	out := make([]*unstructured.Unstructured, 0, len(children))
	for i, c := range children {
		u := &unstructured.Unstructured{Object: c}
		gvk := u.GroupVersionKind()
		if !owned[gvk] {
			return nil, fmt.Errorf("children[%d] is a %s, which is not among the kinds the manifest owns; add it to manifest.owns", i, gvk)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("children[%d] (%s) has no metadata.name", i, gvk.Kind)
		}
		if u.GetNamespace() == "" {
			u.SetNamespace(obj.GetNamespace())
		}
		if obj.GetNamespace() != "" && u.GetNamespace() != obj.GetNamespace() {
			return nil, fmt.Errorf("children[%d] (%s %s) is in namespace %q, but children must be in their owner's namespace %q", i, gvk.Kind, u.GetName(), u.GetNamespace(), obj.GetNamespace())
		}
		k := keyOf(u)
		if seen[k] {
			return nil, fmt.Errorf("children[%d]: %s is listed twice", i, k)
		}
		seen[k] = true
		yes := true
		u.SetOwnerReferences([]metav1.OwnerReference{{
			APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), UID: obj.GetUID(),
			Controller: &yes, BlockOwnerDeletion: &yes,
		}})
		out = append(out, u)
	}
	return out, nil
}

// syncChildren applies the desired children that would change something and
// deletes the observed children that are no longer desired. It reports
// whether it wrote anything.
func (r *Reconciler) syncChildren(ctx context.Context, desired, observed []*unstructured.Unstructured) (bool, error) {
	wrote := false
	logger := log.FromContext(ctx)
	byKey := map[childKey]*unstructured.Unstructured{}
	for _, o := range observed {
		byKey[keyOf(o)] = o
	}
	for _, d := range desired {
		k := keyOf(d)
		if o, ok := byKey[k]; ok && subset.Contains(d.Object, o.Object) {
			delete(byKey, k)
			continue // applying would change nothing
		}
		delete(byKey, k)
		err := r.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(d), client.FieldOwner(r.name), client.ForceOwnership)
		if err != nil {
			return wrote, fmt.Errorf("module[%s] applying child %s: %w", r.name, k, err)
		}
		wrote = true
		metrics.ChildOperations.WithLabelValues(r.name, "apply").Inc()
		logger.V(1).Info("child applied", "child", k.String())
	}
	for k, o := range byKey { // observed but no longer desired
		uid := o.GetUID()
		err := r.client.Delete(ctx, o, client.Preconditions{UID: &uid})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return wrote, fmt.Errorf("module[%s] pruning child %s: %w", r.name, k, err)
		}
		if err == nil {
			wrote = true
			metrics.ChildOperations.WithLabelValues(r.name, "prune").Inc()
		}
		logger.V(1).Info("child pruned", "child", k.String())
	}
	return wrote, nil
}

// childrenFingerprint identifies the observed children and their versions,
// so that storm damping notices any change to them.
func childrenFingerprint(observed []*unstructured.Unstructured) string {
	keys := make([]string, len(observed))
	for i, o := range observed {
		keys[i] = keyOf(o).String() + "@" + o.GetResourceVersion()
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}
