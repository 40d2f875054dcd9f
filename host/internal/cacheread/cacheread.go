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

// Options scope a Reader. Zero fields take the stated defaults.
type Options struct {
	// Namespaces are the namespaces, beyond the reconciled object's own,
	// whose objects the guest may read; "*" is every namespace (and lists
	// across all namespaces). Defaults to none: a guest reconciling an
	// object in namespace A reads namespaced kinds in A only, and a guest
	// reconciling a cluster-scoped object reads only cluster-scoped kinds.
	Namespaces []string
	// Scopes tells which kinds are namespaced. Defaults to protocol.Builtin;
	// a kind it does not know is taken as namespaced (the stricter choice).
	Scopes protocol.Scopes
	// Authorize, when set, is asked before every read whether the module's
	// identity may perform verb ("get" or "list") on gvk in namespace (""
	// for cluster-scoped kinds and lists across all namespaces); an error
	// answers abi.CacheForbidden with its message. Defaults to nil: every
	// declared kind in scope may be read (the operator's own identity).
	Authorize func(ctx context.Context, verb string, gvk schema.GroupVersionKind, namespace string) error
}

// Reader serves one module's reads. Use For to scope it to one reconcile.
type Reader struct {
	module  string
	allowed map[schema.GroupVersionKind]bool
	backend Backend
	opts    Options
	anyNS   bool
	extraNS map[string]bool
}

// New returns a Reader for the kinds declared by man.
func New(man abi.Manifest, backend Backend, opts Options) *Reader {
	if opts.Scopes == nil {
		opts.Scopes = protocol.Builtin
	}
	r := &Reader{module: man.Name, allowed: map[schema.GroupVersionKind]bool{}, backend: backend, opts: opts, extraNS: map[string]bool{}}
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
	for _, ns := range opts.Namespaces {
		if ns == "*" {
			r.anyNS = true
		}
		r.extraNS[ns] = true
	}
	return r
}

// For returns the reader of the reconcile of an object in namespace ("" for
// a cluster-scoped object): what engine.WithCacheReader takes.
func (r *Reader) For(namespace string) *Scoped { return &Scoped{r: r, namespace: namespace} }

// Scoped serves the reads of one reconcile: the object's namespace and the
// Reader's Options.Namespaces.
type Scoped struct {
	r         *Reader
	namespace string
}

// Read implements engine.CacheReader.
func (s *Scoped) Read(ctx context.Context, request []byte) (abi.CacheStatus, []byte) {
	return s.r.read(ctx, s.namespace, request)
}

// inScope says why a read of gvk in namespace is out of the scope of a
// reconcile of an object in own, or "" when it is in scope.
func (r *Reader) inScope(gvk schema.GroupVersionKind, namespace, own string) string {
	namespaced, known := r.opts.Scopes.Namespaced(gvk.GroupKind())
	if !known {
		namespaced = true
	}
	switch {
	case !namespaced && namespace != "":
		return fmt.Sprintf("%s is cluster-scoped; read it without a namespace", gvk.Kind)
	case !namespaced:
		return ""
	case r.anyNS:
		return ""
	case namespace == "":
		if own == "" {
			return fmt.Sprintf("%s is namespaced and the reconciled object is cluster-scoped: name the namespace to read; reading it needs the namespace in the module's readNamespaces (ReconcileModule spec.readNamespaces or --module-read-namespaces)", gvk.Kind)
		}
		return fmt.Sprintf("listing %s across all namespaces needs \"*\" in the module's readNamespaces (ReconcileModule spec.readNamespaces or --module-read-namespaces); give the namespace %q to read the object's own", gvk.Kind, own)
	case namespace == own || r.extraNS[namespace]:
		return ""
	}
	return fmt.Sprintf("namespace %q is outside the module's read scope (the object's namespace %q); grant it in the module's readNamespaces (ReconcileModule spec.readNamespaces or --module-read-namespaces)", namespace, own)
}

// read serves one encoded abi.CacheRequest of a reconcile of an object in
// namespace own, and returns the status and the result bytes (the object or
// list as JSON for CacheOK, a message otherwise).
func (r *Reader) read(ctx context.Context, own string, request []byte) (abi.CacheStatus, []byte) {
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
		return abi.CacheForbidden, []byte(fmt.Sprintf("module[%s] may not read %s: it is not in the manifest's for, owns or reads; declare it in manifest.reads", r.module, kindName(gvk)))
	}
	if why := r.inScope(gvk, req.Namespace, own); why != "" {
		return abi.CacheForbidden, []byte(fmt.Sprintf("module[%s] may not read %s: %s", r.module, kindName(gvk), why))
	}
	if r.opts.Authorize != nil && (req.Op == "get" || req.Op == "list") {
		if err := r.opts.Authorize(ctx, req.Op, gvk, req.Namespace); err != nil {
			return abi.CacheForbidden, []byte(fmt.Sprintf("module[%s] may not %s %s: %v", r.module, req.Op, kindName(gvk), err))
		}
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

// kindName names a kind in messages as a request names it: "v1 Secret",
// "apps/v1 Deployment".
func kindName(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + " " + gvk.Kind
}

func encode(v any) (abi.CacheStatus, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return abi.CacheError, []byte("encoding the result: " + err.Error())
	}
	return abi.CacheOK, b
}
