//go:build !wasip1

package sdktest_test

import (
	"reflect"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/sdktest"
)

func owner(ns, name string, spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "example.io/v1", "kind": "Backup",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
}

func TestTriggered(t *testing.T) {
	pvc := guest.GVK("", "v1", "PersistentVolumeClaim")
	cm := guest.GVK("", "v1", "ConfigMap")
	sec := guest.GVK("", "v1", "Secret")
	svc := guest.GVK("", "v1", "Service")
	m := guest.Manifest{Name: "b", For: guest.GVK("example.io", "v1", "Backup"),
		Reads: []guest.GroupVersionKind{pvc, cm, sec, svc},
		Triggers: []guest.Trigger{
			{Kind: pvc, Field: "spec.target"},
			{Kind: cm, Selector: "spec.selector"},
			{Kind: sec, OwnerReference: true},
			{Kind: svc, All: true},
		}}
	h := sdktest.New(m,
		owner("a", "named", map[string]any{"target": "data"}),
		owner("a", "listed", map[string]any{"target": []any{"x", "data"}}),
		owner("b", "other-ns", map[string]any{"target": "data"}),
		owner("a", "plain", map[string]any{"selector": map[string]any{"app": "web"}}),
		owner("a", "exprs", map[string]any{"selector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "In", "values": []any{"front"}}}}}),
		owner("a", "empty", map[string]any{"selector": map[string]any{}}),
		owner("a", "bad-exists", map[string]any{"selector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "Exists", "values": []any{"x"}}}}}),
		map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": map[string]any{"name": "data", "namespace": "a"}},
	)
	rel := func(kind, ns, name string, labels map[string]any, owners ...any) map[string]any {
		md := map[string]any{"name": name, "namespace": ns, "labels": labels, "ownerReferences": owners}
		return map[string]any{"apiVersion": "v1", "kind": kind, "metadata": md}
	}
	for _, tc := range []struct {
		name    string
		related map[string]any
		want    []string
	}{
		{"field", rel("PersistentVolumeClaim", "a", "data", nil), []string{"a/listed", "a/named"}},
		{"field, unnamed", rel("PersistentVolumeClaim", "a", "other", nil), []string{}},
		{"selector", rel("ConfigMap", "a", "c", map[string]any{"app": "web", "tier": "front"}), []string{"a/exprs", "a/plain"}},
		{"selector, no labels", rel("ConfigMap", "a", "c", nil), []string{}},
		{"owner reference", rel("Secret", "a", "s", nil,
			map[string]any{"apiVersion": "example.io/v1", "kind": "Backup", "name": "named"},
			map[string]any{"apiVersion": "other.io/v1", "kind": "Backup", "name": "listed"}), []string{"a/named"}},
		{"all, in the namespace", rel("Service", "b", "s", nil), []string{"b/other-ns"}},
		{"a kind with no trigger", map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "data", "namespace": "a"}}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := h.Triggered(tc.related); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Triggered = %v, want %v", got, tc.want)
			}
		})
	}
}
