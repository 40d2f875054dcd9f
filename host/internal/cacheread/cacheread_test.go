package cacheread

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
	r := New(man, MemoryBackend{Objects: objs})
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
	if st, out := read(abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "ConfigMap", LabelSelector: "nope=x"}); st != abi.CacheOK || out != "[]" {
		t.Errorf("empty list: %d %s", st, out)
	}
	if st, _ := read(abi.CacheRequest{Op: "get", APIVersion: "x.io/v1", Kind: "Thing", Namespace: "ns", Name: "t"}); st != abi.CacheOK {
		t.Errorf("the For kind is readable: %d", st)
	}
	if st, out := read(abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "s"}); st != abi.CacheForbidden || !strings.Contains(out, "manifest.reads") {
		t.Errorf("undeclared kind: %d %s", st, out)
	}
	for _, bad := range []abi.CacheRequest{
		{Op: "get", APIVersion: "v1", Kind: "ConfigMap"},                           // no name
		{Op: "drop", APIVersion: "v1", Kind: "ConfigMap"},                          // unknown op
		{Op: "list", APIVersion: "v1", Kind: "ConfigMap", LabelSelector: "a in ("}, // bad selector
		{Op: "list", APIVersion: "a/b/c", Kind: "X"},                               // bad apiVersion
	} {
		if st, _ := read(bad); st != abi.CacheBadRequest {
			t.Errorf("%+v: status %d, want bad request", bad, st)
		}
	}
	if st, _ := r.Read(context.Background(), []byte("{not json")); st != abi.CacheBadRequest {
		t.Errorf("bad JSON: %d", st)
	}
}
