//go:build !wasip1

// Package sdktest is a fake host for unit tests of guest handlers, run with
// plain `go test` (native builds). It serves guest.Get and guest.List from
// objects the test provides, with the host's rule that only kinds declared in
// the manifest may be read.
//
//	func TestReconcile(t *testing.T) {
//		h := sdktest.New(manifest, configMap)
//		t.Cleanup(h.Install())
//		resp := Reconcile(&guest.Request{Object: widget})
//		...
//	}
package sdktest

import (
	"encoding/json"
	"fmt"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// Host serves cache reads from Objects.
type Host struct {
	Manifest abi.Manifest
	Objects  []map[string]any
}

// New returns a Host for a module with manifest m holding objects.
func New(m abi.Manifest, objects ...map[string]any) *Host {
	return &Host{Manifest: m, Objects: objects}
}

// Install makes guest.Get and guest.List read from h and returns a function
// that restores the previous state; pass it to t.Cleanup.
func (h *Host) Install() (restore func()) {
	guest.SetCacheReader(h.Read)
	return func() { guest.SetCacheReader(nil) }
}

// Read serves one cache request like the real host.
func (h *Host) Read(req abi.CacheRequest) (abi.CacheStatus, []byte) {
	if !h.allowed(req.APIVersion, req.Kind) {
		return abi.CacheForbidden, []byte(fmt.Sprintf("module[%s] may not read %s %s: it is not in the manifest's for, owns or reads", h.Manifest.Name, req.APIVersion, req.Kind))
	}
	sel, err := parseSelector(req.LabelSelector)
	if err != nil {
		return abi.CacheBadRequest, []byte(err.Error())
	}
	var list []map[string]any
	for _, o := range h.Objects {
		obj := guest.Object(o)
		if obj.NestedString("apiVersion") != req.APIVersion || obj.NestedString("kind") != req.Kind {
			continue
		}
		switch req.Op {
		case "get":
			if obj.Namespace() == req.Namespace && obj.Name() == req.Name {
				b, _ := json.Marshal(o)
				return abi.CacheOK, b
			}
		case "list":
			if (req.Namespace == "" || obj.Namespace() == req.Namespace) && sel.matches(obj) {
				list = append(list, o)
			}
		default:
			return abi.CacheBadRequest, []byte("unknown op " + req.Op)
		}
	}
	if req.Op == "get" {
		return abi.CacheNotFound, []byte(req.Kind + " " + req.Namespace + "/" + req.Name + " not found")
	}
	if list == nil {
		list = []map[string]any{}
	}
	b, _ := json.Marshal(list)
	return abi.CacheOK, b
}

func (h *Host) allowed(apiVersion, kind string) bool {
	gvks := append(append([]abi.GroupVersionKind{h.Manifest.For}, h.Manifest.Owns...), h.Manifest.Reads...)
	for _, g := range gvks {
		av := g.Version
		if g.Group != "" {
			av = g.Group + "/" + g.Version
		}
		if av == apiVersion && g.Kind == kind {
			return true
		}
	}
	return false
}

// selector supports the equality-based label selectors: k=v, k==v, k!=v, k
// and !k, separated by commas.
type selector []func(map[string]string) bool

func parseSelector(s string) (selector, error) {
	var sel selector
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		switch {
		case term == "":
		case strings.Contains(term, " in ") || strings.Contains(term, " notin "):
			return nil, fmt.Errorf("labelSelector %q: sdktest supports equality selectors only", s)
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			sel = append(sel, func(l map[string]string) bool { return l[k] != v })
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(strings.Replace(term, "==", "=", 1), "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			sel = append(sel, func(l map[string]string) bool { x, ok := l[k]; return ok && x == v })
		case strings.HasPrefix(term, "!"):
			k := strings.TrimSpace(term[1:])
			sel = append(sel, func(l map[string]string) bool { _, ok := l[k]; return !ok })
		default:
			k := term
			sel = append(sel, func(l map[string]string) bool { _, ok := l[k]; return ok })
		}
	}
	return sel, nil
}

func (s selector) matches(obj guest.Object) bool {
	labels := map[string]string{}
	if m, ok := obj.NestedField("metadata", "labels"); ok {
		if mm, ok := m.(map[string]any); ok {
			for k, v := range mm {
				labels[k], _ = v.(string)
			}
		}
	}
	for _, f := range s {
		if !f(labels) {
			return false
		}
	}
	return true
}
