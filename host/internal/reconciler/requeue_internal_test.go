package reconciler

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// storeCache is a cache.Cache whose only informer is inf.
type storeCache struct {
	cache.Cache
	inf cache.Informer
}

func (c storeCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return c.inf, nil
}

// storeless hides its informer's store, as an informer over several
// namespaces does.
type storeless struct{ cache.Informer }

// TestRequeueAllSendsTheStoresObjects: RequeueAll sends the very objects
// of the kind's informer store, without a copy (and so without decoding a
// packed object); with an informer that hides its store it lists through
// the client instead.
func TestRequeueAllSendsTheStoresObjects(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	obj := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace("ns")
		u.SetName(name)
		return u
	}
	inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &unstructured.Unstructured{}, 0, toolscache.Indexers{})
	stored := map[client.Object]bool{}
	for _, name := range []string{"a", "b", "c"} {
		o := obj(name)
		if err := inf.GetStore().Add(o); err != nil {
			t.Fatal(err)
		}
		stored[o] = true
	}
	listed := fake.NewClientBuilder().WithObjects(obj("x"), obj("y")).Build()
	collect := func(r *Reconciler) []client.Object {
		ch := make(chan event.GenericEvent, 10)
		if err := r.RequeueAll(context.Background(), ch); err != nil {
			t.Fatal(err)
		}
		close(ch)
		var got []client.Object
		for e := range ch {
			got = append(got, e.Object)
		}
		return got
	}

	r := &Reconciler{declared: declared{name: "m", gvk: gvk}, opts: Options{Client: listed}}
	var c cache.Cache = storeCache{inf: inf}
	r.cache.Store(&c)
	got := collect(r)
	if len(got) != len(stored) {
		t.Fatalf("from the store: %d objects sent, want %d", len(got), len(stored))
	}
	for _, o := range got {
		if !stored[o] {
			t.Errorf("%s sent is not the store's own object", o.GetName())
		}
	}

	c = storeCache{inf: storeless{inf}}
	r.cache.Store(&c)
	names := map[string]bool{}
	for _, o := range collect(r) {
		names[o.GetName()] = true
	}
	if len(names) != 2 || !names["x"] || !names["y"] {
		t.Errorf("through the client: sent %v, want x and y", names)
	}
}

// TestRequeueWhereKeepsOnlyItsObjects: RequeueWhere sends only what keep
// accepts, from the store and through the client alike (a replica that
// acquired slots requeues their objects, not every object it holds), and
// EachStored sees every object either way.
func TestRequeueWhereKeepsOnlyItsObjects(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	obj := func(ns, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &unstructured.Unstructured{}, 0, toolscache.Indexers{})
	all := []*unstructured.Unstructured{obj("in", "a"), obj("out", "b"), obj("in", "c")}
	var objs []client.Object
	for _, o := range all {
		if err := inf.GetStore().Add(o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o.DeepCopy())
	}
	keep := func(namespace string, _ types.UID) bool { return namespace == "in" }
	r := &Reconciler{declared: declared{name: "m", gvk: gvk}, opts: Options{Client: fake.NewClientBuilder().WithObjects(objs...).Build()}}
	for _, c := range []cache.Cache{storeCache{inf: inf}, storeCache{inf: storeless{inf}}} {
		r.cache.Store(&c)
		ch := make(chan event.GenericEvent, 10)
		if err := r.RequeueWhere(context.Background(), ch, keep); err != nil {
			t.Fatal(err)
		}
		close(ch)
		var got []string
		for e := range ch {
			got = append(got, e.Object.GetNamespace()+"/"+e.Object.GetName())
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"in/a", "in/c"}) {
			t.Errorf("%T: sent %v, want in/a and in/c", c.(storeCache).inf, got)
		}
		n := 0
		if !r.EachStored(context.Background(), func(string, types.UID) { n++ }) || n != 3 {
			t.Errorf("%T: EachStored saw %d objects, want 3", c.(storeCache).inf, n)
		}
	}
}
