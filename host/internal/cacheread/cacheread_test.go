package cacheread

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

func TestRead(t *testing.T) {
	man := abi.Manifest{Name: "m", For: abi.GroupVersionKind{Group: "x.io", Version: "v1", Kind: "Thing"},
		Reads: []abi.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}}}
	objs := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns", "labels": map[string]any{"app": "web"}, "managedFields": []any{"big"}}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "b", "namespace": "ns"}},
		{"apiVersion": "x.io/v1", "kind": "Thing", "metadata": map[string]any{"name": "t", "namespace": "ns"}},
	}
	r := New(man, MemoryBackend{Objects: objs}, Options{}).For("ns")
	read := func(req abi.CacheRequest) (abi.CacheStatus, string) {
		b, _ := json.Marshal(req)
		st, out := r.Read(context.Background(), b)
		return st, string(out)
	}
	if st, out := read(abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}); st != abi.CacheOK || strings.Contains(out, "managedFields") || !strings.Contains(out, `"name":"a"`) {
		t.Errorf("get: %d %s", st, out)
	}
	if _, ok := objs[0]["metadata"].(map[string]any)["managedFields"]; !ok {
		t.Error("strip modified the backend's object")
	}
	if st, _ := read(abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "zz"}); st != abi.CacheNotFound {
		t.Errorf("missing: %d", st)
	}
	if st, out := read(abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", LabelSelector: "app=web"}); st != abi.CacheOK || strings.Count(out, `"kind"`) != 1 {
		t.Errorf("list: %d %s", st, out)
	}
	if st, out := read(abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", LabelSelector: "nope=x"}); st != abi.CacheOK || out != "[]" {
		t.Errorf("empty list: %d %s", st, out)
	}
	if st, _ := read(abi.CacheRequest{Op: "get", APIVersion: "x.io/v1", Kind: "Thing", Namespace: "ns", Name: "t"}); st != abi.CacheOK {
		t.Errorf("the For kind is readable: %d", st)
	}
	if st, out := read(abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "s"}); st != abi.CacheForbidden || !strings.Contains(out, "manifest.reads") {
		t.Errorf("undeclared kind: %d %s", st, out)
	}
	for _, bad := range []abi.CacheRequest{
		{Op: "get", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns"},                           // no name
		{Op: "drop", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns"},                          // unknown op
		{Op: "list", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", LabelSelector: "a in ("}, // bad selector
		{Op: "list", APIVersion: "a/b/c", Kind: "X"},                                                // bad apiVersion
	} {
		if st, _ := read(bad); st != abi.CacheBadRequest {
			t.Errorf("%+v: status %d, want bad request", bad, st)
		}
	}
	if st, _ := r.Read(context.Background(), []byte("{not json")); st != abi.CacheBadRequest {
		t.Errorf("bad JSON: %d", st)
	}
}

// TestReadScope: a guest reads its object's namespace, the namespaces it is
// granted, and cluster-scoped kinds; everything else is Forbidden and says
// how to grant it; Authorize is asked for every read in scope.
func TestReadScope(t *testing.T) {
	man := abi.Manifest{Name: "m", For: abi.GroupVersionKind{Group: "x.io", Version: "v1", Kind: "Thing"},
		Reads: []abi.GroupVersionKind{{Version: "v1", Kind: "Secret"}, {Version: "v1", Kind: "Namespace"}}}
	objs := []map[string]any{
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "a"}},
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "b"}},
		{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "c"}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "a"}},
	}
	var asked []string
	authorize := func(_ context.Context, verb string, gvk schema.GroupVersionKind, ns string) error {
		asked = append(asked, verb+" "+gvk.Kind+" "+ns)
		if ns == "c" {
			return errors.New("system:serviceaccount:x:y cannot get secrets in c")
		}
		return nil
	}
	read := func(r *Scoped, req abi.CacheRequest) (abi.CacheStatus, string) {
		b, _ := json.Marshal(req)
		st, out := r.Read(context.Background(), b)
		return st, string(out)
	}
	get := func(ns string) abi.CacheRequest {
		return abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "Secret", Namespace: ns, Name: "s"}
	}
	own := New(man, MemoryBackend{Objects: objs}, Options{}).For("a")
	if st, out := read(own, get("a")); st != abi.CacheOK {
		t.Errorf("own namespace: %d %s", st, out)
	}
	if st, out := read(own, get("b")); st != abi.CacheForbidden || !strings.Contains(out, "readNamespaces") || strings.Contains(out, `"kind"`) {
		t.Errorf("other namespace: %d %s", st, out)
	}
	if st, out := read(own, abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "Secret"}); st != abi.CacheForbidden || !strings.Contains(out, `"*"`) {
		t.Errorf("list across namespaces: %d %s", st, out)
	}
	if st, out := read(own, abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "Namespace", Name: "a"}); st != abi.CacheOK {
		t.Errorf("cluster-scoped kind: %d %s", st, out)
	}
	if st, _ := read(own, abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "Namespace", Namespace: "a", Name: "a"}); st != abi.CacheForbidden {
		t.Errorf("cluster-scoped kind with a namespace: %d", st)
	}
	cluster := New(man, MemoryBackend{Objects: objs}, Options{}).For("")
	if st, _ := read(cluster, get("a")); st != abi.CacheForbidden {
		t.Errorf("cluster-scoped owner reading a namespace without a grant: %d", st)
	}
	granted := New(man, MemoryBackend{Objects: objs}, Options{Namespaces: []string{"b", "c"}, Authorize: authorize}).For("a")
	if st, out := read(granted, get("b")); st != abi.CacheOK {
		t.Errorf("granted namespace: %d %s", st, out)
	}
	if st, out := read(granted, get("c")); st != abi.CacheForbidden || !strings.Contains(out, "cannot get secrets") {
		t.Errorf("granted but not authorized: %d %s", st, out)
	}
	if want := []string{"get Secret b", "get Secret c"}; strings.Join(asked, ",") != strings.Join(want, ",") {
		t.Errorf("Authorize asked %q, want %q", asked, want)
	}
	all := New(man, MemoryBackend{Objects: objs}, Options{Namespaces: []string{"*"}}).For("a")
	if st, out := read(all, abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "Secret"}); st != abi.CacheOK || strings.Count(out, `"kind"`) != 3 {
		t.Errorf("\"*\" lists every namespace: %d %s", st, out)
	}
}
