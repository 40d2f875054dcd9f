package reconciler

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func widget() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{
			"name": "w", "namespace": "ns", "generation": int64(3), "resourceVersion": "10",
			"labels":        map[string]any{"a": "1", "b": "2"},
			"managedFields": []any{map[string]any{"manager": "x"}},
		},
		"spec":   map[string]any{"size": int64(3), "color": "blue", "tags": []any{"x", "y"}},
		"status": map[string]any{"summary": "3 x blue", "observedGeneration": int64(3)},
	}}
}

func TestHashObjectIgnoresOnlyVersionManagedFieldsAndStatus(t *testing.T) {
	base := hashObject(widget())
	if hashObject(widget()) != base {
		t.Fatal("the same object hashes differently")
	}
	same := widget()
	same.SetResourceVersion("11")
	same.SetManagedFields(nil)
	same.Object["status"] = map[string]any{"summary": "other"}
	if hashObject(same) != base {
		t.Fatal("resourceVersion, managedFields or status changed the hash")
	}
	changes := map[string]func(u *unstructured.Unstructured){
		"generation":  func(u *unstructured.Unstructured) { u.SetGeneration(4) },
		"label value": func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "1", "b": "3"}) },
		"label key":   func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "1", "c": "2"}) },
		"annotation":  func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"n": ""}) },
		"finalizer":   func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"f"}) },
		"spec number": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(4), "spec", "size")
		},
		"spec order": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{"y", "x"}, "spec", "tags")
		},
		"spec type": func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, "3", "spec", "size") },
		"spec moved": func(u *unstructured.Unstructured) {
			u.Object["spec"] = map[string]any{"size": map[string]any{"color": "blue"}}
		},
		"new top key": func(u *unstructured.Unstructured) { u.Object["data"] = map[string]any{} },
		"deletion": func(u *unstructured.Unstructured) {
			u.Object["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		},
		"null vs none": func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["extra"] = nil },
	}
	for what, mutate := range changes {
		u := widget()
		mutate(u)
		if hashObject(u) == base {
			t.Errorf("a change of %s did not change the hash", what)
		}
	}
}

func TestHashValueComparesNumbersByValue(t *testing.T) {
	fromCache := map[string]any{"n": int64(3), "list": []any{int64(1), 2.5}, "s": "x"}
	var fromResponse map[string]any
	if err := json.Unmarshal([]byte(`{"s":"x","list":[1,2.5],"n":3}`), &fromResponse); err != nil {
		t.Fatal(err)
	}
	if hashValue(fromCache) != hashValue(fromResponse) {
		t.Fatal("an int64 and a float64 of the same value hash differently")
	}
	if hashValue(map[string]any{"n": 3.5}) == hashValue(map[string]any{"n": int64(3)}) {
		t.Fatal("3.5 and 3 hash the same")
	}
	if hashValue(nil) == hashValue(map[string]any{}) {
		t.Fatal("no status and an empty status hash the same")
	}
	if hashValue(map[string]any{"a": "b"}) == hashValue(map[string]any{"b": "a"}) {
		t.Fatal("swapped key and value hash the same")
	}
}

func TestMemoUnchanged(t *testing.T) {
	now := time.Unix(1000, 0)
	u := widget()
	status := u.Object["status"]
	m := memo{digest: "sha256:a", inputs: hashObject(u), status: hashValue(status), children: hashString("c@1")}
	if ok, wait := m.unchanged("sha256:a", u, "c@1", now); !ok || wait != 0 {
		t.Fatalf("unchanged = %v, %v; want true, 0", ok, wait)
	}
	for what, ok := range map[string]bool{
		"another digest":   func() bool { s, _ := m.unchanged("sha256:b", u, "c@1", now); return s }(),
		"another child rv": func() bool { s, _ := m.unchanged("sha256:a", u, "c@2", now); return s }(),
	} {
		if ok {
			t.Errorf("%s: answered unchanged", what)
		}
	}
	other := widget()
	_ = unstructured.SetNestedField(other.Object, "tampered", "status", "summary")
	if s, _ := m.unchanged("sha256:a", other, "c@1", now); s {
		t.Error("another status: answered unchanged")
	}
	m.due = now.Add(2 * time.Second)
	if ok, wait := m.unchanged("sha256:a", u, "c@1", now); !ok || wait != 2*time.Second {
		t.Fatalf("before the requeue is due: %v, %v; want true, 2s", ok, wait)
	}
	if ok, _ := m.unchanged("sha256:a", u, "c@1", now.Add(2*time.Second)); ok {
		t.Fatal("a due requeue was answered unchanged")
	}
}
