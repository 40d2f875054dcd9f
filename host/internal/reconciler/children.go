package reconciler

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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

// observedChildren lists, from the cache, the objects of the owned kinds
// whose controller is obj.
func (r *Reconciler) observedChildren(ctx context.Context, obj *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, gvk := range r.owns {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.opts.Client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
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
