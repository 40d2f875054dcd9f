// Package cacheread serves the cache_read host function (docs/abi.md): it
// lets a guest read only the kinds its manifest declares (For, Owns and
// Reads), strips managedFields from what it returns, and delegates the read
// to a Backend: the informer cache in a cluster, or objects in memory
// offline.
package cacheread

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Backend reads objects. Get returns an error satisfying
// apierrors.IsNotFound for a missing object.
type Backend interface {
	Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (map[string]any, error)
	List(ctx context.Context, gvk schema.GroupVersionKind, namespace string, selector labels.Selector) ([]map[string]any, error)
}

// ObjectCost is the fuel a read charges per object it returns, on top of
// the engine's per-byte charge: the cache copies the object and the host
// encodes it. See docs/metering.md.
const ObjectCost = 32768

// MaxResult caps the encoded result of one read; a list that grows past it
// stops encoding and answers abi.CacheError.
const MaxResult = 16 << 20

// Reader serves one module's reads.
type Reader struct {
	module  string
	allowed map[schema.GroupVersionKind]bool
	backend Backend
}

// New returns a Reader for the kinds declared by man.
func New(man abi.Manifest, backend Backend) *Reader {
	r := &Reader{module: man.Name, allowed: map[schema.GroupVersionKind]bool{}, backend: backend}
	add := func(g abi.GroupVersionKind) {
		r.allowed[schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}] = true
	}
	add(man.For)
	for _, g := range man.Owns {
		add(g)
	}
	for _, g := range man.Reads {
		add(g)
	}
	return r
}

// Read serves one encoded abi.CacheRequest and returns the status and the
// result bytes (the object or list as JSON for CacheOK, a message otherwise).
func (r *Reader) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	var req abi.CacheRequest
	if err := json.Unmarshal(request, &req); err != nil {
		return abi.CacheBadRequest, []byte("cache request is not valid JSON: " + err.Error())
	}
	gv, err := schema.ParseGroupVersion(req.APIVersion)
	if err != nil || req.Kind == "" {
		return abi.CacheBadRequest, []byte(fmt.Sprintf("cache request needs apiVersion and kind, got %q %q", req.APIVersion, req.Kind))
	}
	gvk := gv.WithKind(req.Kind)
	if !r.allowed[gvk] {
		return abi.CacheForbidden, []byte(fmt.Sprintf("module[%s] may not read %s: it is not in the manifest's for, owns or reads; declare it in manifest.reads", r.module, gvk))
	}
	switch req.Op {
	case "get":
		if req.Name == "" {
			return abi.CacheBadRequest, []byte("get needs a name")
		}
		obj, err := r.backend.Get(ctx, gvk, req.Namespace, req.Name)
		if apierrors.IsNotFound(err) {
			return abi.CacheNotFound, []byte(fmt.Sprintf("%s %s/%s not found", gvk.Kind, req.Namespace, req.Name))
		}
		if err != nil {
			return abi.CacheError, []byte(err.Error())
		}
		return encode(protocol.StripManagedFields(obj))
	case "list":
		sel, err := labels.Parse(req.LabelSelector)
		if err != nil {
			return abi.CacheBadRequest, []byte(fmt.Sprintf("labelSelector %q: %v", req.LabelSelector, err))
		}
		objs, err := r.backend.List(ctx, gvk, req.Namespace, sel)
		if err != nil {
			return abi.CacheError, []byte(err.Error())
		}
		// Encode one object at a time, charging each (which also checks the
		// call's deadline and context), so a list over a big cache stops
		// on time.
		out := []byte{'['}
		for i, o := range objs {
			meter.Charge(ctx, ObjectCost)
			b, err := json.Marshal(protocol.StripManagedFields(o))
			if err != nil {
				return abi.CacheError, []byte("encoding the result: " + err.Error())
			}
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, b...)
			if len(out) > MaxResult {
				return abi.CacheError, []byte(fmt.Sprintf("result of more than %d bytes (%d of %d objects encoded) is over the limit of one read; narrow the list with a namespace or label selector", MaxResult, i+1, len(objs)))
			}
		}
		return abi.CacheOK, append(out, ']')
	}
	return abi.CacheBadRequest, []byte(fmt.Sprintf("unknown op %q; want get or list", req.Op))
}

func encode(v any) (abi.CacheStatus, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return abi.CacheError, []byte("encoding the result: " + err.Error())
	}
	return abi.CacheOK, b
}
