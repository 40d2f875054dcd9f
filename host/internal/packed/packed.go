// Package packed keeps the unstructured objects of the operator's informer
// cache as their JSON bytes beside their typed metadata, instead of as
// nested maps.
//
// A small custom resource decoded into unstructured maps costs about 2.5 KB
// of heap, most of it pointers for the garbage collector to scan; as JSON
// with typed metadata it costs under 1 KB, and the JSON is one
// pointer-free block (BenchmarkMemory). The cache decodes an object back into an
// unstructured map only when it is read.
//
// Install Transform as the cache's transform for unstructured objects
// (cache.Options.DefaultTransform). Readers do not change: the cache's
// reader copies every object it returns with DeepCopyObject, and a packed
// Object's copy is the decoded *unstructured.Unstructured, so client.Get
// and client.List of unstructured objects return what they returned
// before. Event handlers, predicates and index functions receive the
// packed Object itself, a client.Object whose metadata and type are those
// of the object; Content returns the rest.
package packed

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Object is one cached object: its type and metadata typed, and the whole
// object, metadata included, as JSON. It is immutable once packed.
//
// DeepCopyObject does not return an Object: it returns the object decoded
// as a new *unstructured.Unstructured, which is what the cache's reader
// hands out. Nothing else should copy it; client-go's cache mutation
// detector (KUBE_CACHE_MUTATION_DETECTOR) would, and Transform does not
// pack while it is on.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	raw []byte
}

var _ client.Object = &Object{}

// Pack returns u as an Object. u's metadata.managedFields are dropped, as
// the cache drops them. The JSON is encoded from u as encoding/json would
// (protocol.AppendJSON): numbers stay integers or floats as they were
// decoded.
func Pack(u *unstructured.Unstructured) (*Object, error) {
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	buf := buffers.Get().(*[]byte)
	raw, err := protocol.AppendJSON((*buf)[:0], u.Object)
	defer func() {
		if cap(raw) <= maxPooled {
			*buf = raw[:0]
			buffers.Put(buf)
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("packing %s %s for the cache: %w", u.GetKind(), client.ObjectKeyFromObject(u), err)
	}
	o := &Object{raw: bytes.Clone(raw)}
	o.APIVersion, o.Kind = u.GetAPIVersion(), u.GetKind()
	o.Name, o.GenerateName, o.Namespace = u.GetName(), u.GetGenerateName(), u.GetNamespace()
	o.UID, o.ResourceVersion, o.Generation = u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
	o.CreationTimestamp, o.DeletionTimestamp = u.GetCreationTimestamp(), u.GetDeletionTimestamp()
	o.DeletionGracePeriodSeconds = u.GetDeletionGracePeriodSeconds()
	o.Labels, o.Annotations = u.GetLabels(), u.GetAnnotations()
	o.OwnerReferences, o.Finalizers = u.GetOwnerReferences(), u.GetFinalizers()
	return o, nil
}

// buffers hold encodings while they grow: the cache keeps an exact copy.
// A buffer grown past maxPooled by a large object is left to the garbage
// collector.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooled = 64 << 10

// JSON returns the object's JSON, without metadata.managedFields: the
// API server's own bytes when the object came from Decode, Pack's
// encoding otherwise. The caller must not modify it.
func (o *Object) JSON() []byte { return o.raw }

// Unpack decodes the object: a new map each call, which the caller owns.
func (o *Object) Unpack() (*unstructured.Unstructured, error) {
	m := map[string]any{}
	if err := utiljson.Unmarshal(o.raw, &m); err != nil {
		return nil, fmt.Errorf("unpacking %s %s from the cache: %w", o.Kind, client.ObjectKeyFromObject(o), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// DeepCopyObject returns the object decoded as a new
// *unstructured.Unstructured (see Object). It panics if the bytes do not
// decode, which Pack's own encoding rules out.
func (o *Object) DeepCopyObject() runtime.Object {
	u, err := o.Unpack()
	if err != nil {
		panic(err)
	}
	return u
}

// Content returns obj's content as an unstructured map: a packed Object's
// decoded, an unstructured object's own map (not a copy). ok is false for
// other objects or bytes that do not decode.
func Content(obj client.Object) (content map[string]any, ok bool) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o.Object, true
	case *Object:
		u, err := o.Unpack()
		if err != nil {
			return nil, false
		}
		return u.Object, true
	}
	return nil, false
}

// Enabled reports whether objects may be packed: not while client-go's
// cache mutation detector (KUBE_CACHE_MUTATION_DETECTOR) is on.
func Enabled() bool {
	on, _ := strconv.ParseBool(os.Getenv("KUBE_CACHE_MUTATION_DETECTOR"))
	return !on
}

// Transform packs unstructured objects and passes any other through next
// (nil: unchanged). It is a cache transform function
// (toolscache.TransformFunc). While KUBE_CACHE_MUTATION_DETECTOR is on it
// only calls next: the detector compares each object with its
// DeepCopyObject, which for a packed Object is another type.
func Transform(next func(any) (any, error)) func(any) (any, error) {
	if !Enabled() {
		if next == nil {
			return func(in any) (any, error) { return in, nil }
		}
		return next
	}
	return func(in any) (any, error) {
		if u, ok := in.(*unstructured.Unstructured); ok {
			return Pack(u)
		}
		if next == nil {
			return in, nil
		}
		return next(in)
	}
}
