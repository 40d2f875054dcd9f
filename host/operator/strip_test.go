package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// TestStripManagedFields: the cache's transform drops managedFields from
// unstructured and typed objects alike, and leaves the rest.
func TestStripManagedFields(t *testing.T) {
	strip := stripManagedFields(cache.TransformStripManagedFields())
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "managedFields": []any{map[string]any{"manager": "x"}}}, "data": map[string]any{"k": "v"}}}
	out, err := strip(u)
	if err != nil || out != u {
		t.Fatalf("unstructured: %v, %v", out, err)
	}
	if _, has := u.Object["metadata"].(map[string]any)["managedFields"]; has || u.GetName() != "c" || u.Object["data"] == nil {
		t.Errorf("unstructured after the transform: %v", u.Object)
	}
	if _, err := strip(&unstructured.Unstructured{Object: map[string]any{"kind": "X"}}); err != nil {
		t.Errorf("no metadata: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	if _, err := strip(cm); err != nil || cm.ManagedFields != nil || cm.Name != "c" {
		t.Errorf("typed after the transform: %+v, %v", cm.ObjectMeta, err)
	}
}
