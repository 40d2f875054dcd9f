//go:build !wasip1

package sdktest

import (
	"errors"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

func cm(ns, name string, labels map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": name, "labels": labels}}
}

func TestGetAndList(t *testing.T) {
	man := guest.Manifest{Name: "t", For: guest.GVK("x.io", "v1", "Thing"), Reads: []guest.GroupVersionKind{guest.GVK("", "v1", "ConfigMap")}}
	t.Cleanup(New(man,
		cm("a", "one", map[string]any{"app": "web"}),
		cm("a", "two", map[string]any{"app": "db"}),
		cm("b", "three", map[string]any{"app": "web"}),
	).Install())

	obj, found, err := guest.Get("v1", "ConfigMap", "a", "one")
	if err != nil || !found || obj.Name() != "one" {
		t.Fatalf("Get = %v %v %v", obj, found, err)
	}
	if _, found, err := guest.Get("v1", "ConfigMap", "a", "nope"); err != nil || found {
		t.Errorf("missing object: found %v err %v", found, err)
	}
	for sel, want := range map[string]int{"": 3, "app=web": 2, "app!=web": 1, "app": 3, "!app": 0} {
		list, err := guest.List("v1", "ConfigMap", "", sel)
		if err != nil || len(list) != want {
			t.Errorf("List(%q) = %d objects, err %v; want %d", sel, len(list), err, want)
		}
	}
	if list, _ := guest.List("v1", "ConfigMap", "a", "app=web"); len(list) != 1 {
		t.Errorf("namespaced list = %d", len(list))
	}
	if _, _, err := guest.Get("v1", "Secret", "a", "s"); !errors.Is(err, guest.ErrForbidden) {
		t.Errorf("undeclared kind: %v", err)
	}
	if _, err := guest.List("v1", "ConfigMap", "", "app in (web)"); err == nil {
		t.Error("set-based selector accepted")
	}
}

func TestWithoutHostReadsAreUnavailable(t *testing.T) {
	guest.SetCacheReader(nil)
	if _, _, err := guest.Get("v1", "ConfigMap", "a", "one"); err == nil {
		t.Error("read without a host succeeded")
	}
}
