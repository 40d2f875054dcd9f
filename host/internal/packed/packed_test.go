package packed_test

import (
	"encoding/json"
	"reflect"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

// widget is a Widget as the API server serves it, managedFields included.
const widget = `{"apiVersion":"example.wasmreconcile.io/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-12-03T18:40:00Z","deletionTimestamp":"2026-12-03T18:41:00Z","deletionGracePeriodSeconds":0,"generation":4,"name":"w-1","generateName":"w-","namespace":"bench","resourceVersion":"123456","uid":"0b6a3c1e-4d5f-4a8b-9c7d-1e2f3a4b5c6d","labels":{"team":"a"},"annotations":{"note":"ünï \"q\""},"finalizers":["wasmreconcile.io/widget"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"cm","uid":"u-1","controller":true}],"managedFields":[{"manager":"kubectl","operation":"Update","fieldsV1":{"f:spec":{}}}]},"spec":{"color":"blue","size":5,"ratio":0.25,"big":12345678901234567890,"none":null,"list":[1,"two",{"three":3.5},[]],"empty":{}},"status":{"conditions":[{"lastTransitionTime":"2026-12-03T18:40:01Z","message":"5 x blue","observedGeneration":4,"reason":"Reconciled","status":"True","type":"Ready"}],"observedGeneration":4,"summary":"5 x blue"}}`

// small is the Widget of make bench-e2e, reconciled, as the API server
// serves it with managedFields cut.
const small = `{"apiVersion":"example.wasmreconcile.io/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-12-03T18:40:00Z","generation":1,"name":"widget-001234","namespace":"bench","resourceVersion":"123456","uid":"0b6a3c1e-4d5f-4a8b-9c7d-1e2f3a4b5c6d"},"spec":{"color":"blue","size":5},"status":{"conditions":[{"lastTransitionTime":"2026-12-03T18:40:01Z","message":"5 x blue","observedGeneration":1,"reason":"Reconciled","status":"True","type":"Ready"}],"observedGeneration":1,"summary":"5 x blue"}}`

// decode decodes JSON as client-go decodes an unstructured object.
func decode(t testing.TB, data []byte) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestPackKeepsTheObject: a packed object's typed metadata is its
// metadata, and it unpacks to the object it was packed from without
// managedFields: integers stay int64, other numbers float64.
func TestPackKeepsTheObject(t *testing.T) {
	u := decode(t, []byte(widget))
	want := decode(t, []byte(widget))
	unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
	p, err := packed.Pack(u)
	if err != nil {
		t.Fatal(err)
	}
	var meta metav1.ObjectMeta
	md, _ := json.Marshal(want.Object["metadata"])
	if err := json.Unmarshal(md, &meta); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.ObjectMeta, meta) {
		t.Errorf("packed metadata:\n%+v\nwant\n%+v", p.ObjectMeta, meta)
	}
	if p.GroupVersionKind() != want.GroupVersionKind() {
		t.Errorf("packed kind %v, want %v", p.GroupVersionKind(), want.GroupVersionKind())
	}
	got, err := p.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Object, want.Object) {
		t.Errorf("unpacked:\n%#v\nwant\n%#v", got.Object, want.Object)
	}
	if _, isInt := got.Object["spec"].(map[string]any)["size"].(int64); !isInt {
		t.Errorf("spec.size unpacked as %T", got.Object["spec"].(map[string]any)["size"])
	}
}

// TestDeepCopyObjectIsAFreshUnstructuredObject: the cache's reader copies
// with DeepCopyObject; each copy is a decoded object of its own, and a
// change to one reaches neither the packed object nor the next copy.
func TestDeepCopyObjectIsAFreshUnstructuredObject(t *testing.T) {
	p, err := packed.Pack(decode(t, []byte(widget)))
	if err != nil {
		t.Fatal(err)
	}
	first, ok := p.DeepCopyObject().(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("DeepCopyObject returned %T", p.DeepCopyObject())
	}
	first.SetLabels(map[string]string{"changed": "yes"})
	unstructured.SetNestedField(first.Object, "red", "spec", "color")
	second := p.DeepCopyObject().(*unstructured.Unstructured)
	if second.GetLabels()["team"] != "a" || p.Labels["team"] != "a" {
		t.Errorf("a copy's change reached the packed object: %v, %v", second.GetLabels(), p.Labels)
	}
	if c, _, _ := unstructured.NestedString(second.Object, "spec", "color"); c != "blue" {
		t.Errorf("spec.color of a later copy: %q", c)
	}
}

// TestContent: an unstructured object's own map, a packed object's
// decoded content, nothing for a typed object.
func TestContent(t *testing.T) {
	u := decode(t, []byte(widget))
	if c, ok := packed.Content(u); !ok || reflect.ValueOf(c).Pointer() != reflect.ValueOf(u.Object).Pointer() {
		t.Errorf("unstructured: %v, not its own map", ok)
	}
	p, err := packed.Pack(decode(t, []byte(widget)))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := packed.Content(p); !ok || c["spec"].(map[string]any)["color"] != "blue" {
		t.Errorf("packed: %v, %v", ok, c)
	}
	if _, ok := packed.Content(&corev1.ConfigMap{}); ok {
		t.Error("a typed object has content")
	}
}

// TestTransform packs unstructured objects only, hands the others to next,
// and packs nothing while client-go's cache mutation detector is on.
func TestTransform(t *testing.T) {
	var passed []any
	next := func(in any) (any, error) { passed = append(passed, in); return in, nil }
	tr := packed.Transform(next)
	out, err := tr(decode(t, []byte(widget)))
	if _, ok := out.(*packed.Object); !ok || err != nil {
		t.Errorf("unstructured became %T, %v", out, err)
	}
	cm := &corev1.ConfigMap{}
	if out, err := tr(cm); out != cm || err != nil || len(passed) != 1 || passed[0] != cm {
		t.Errorf("typed: %T %v, passed %v", out, err, passed)
	}
	if out, err := packed.Transform(nil)(cm); out != cm || err != nil {
		t.Errorf("typed, no next: %T %v", out, err)
	}

	t.Setenv("KUBE_CACHE_MUTATION_DETECTOR", "true")
	u := decode(t, []byte(widget))
	if out, _ := packed.Transform(next)(u); out != u {
		t.Errorf("packed under the mutation detector: %T", out)
	}
	if out, _ := packed.Transform(nil)(u); out != u {
		t.Errorf("packed under the mutation detector, no next: %T", out)
	}
}

// FuzzRoundTrip: any object as the API server serves it (which decodes
// and encodes JSON by the same rules: 1.0 comes out as 1) unpacks, once
// packed, to exactly the map client-go decodes from it.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(widget))
	f.Add([]byte(`{"kind":"X","apiVersion":"v1","metadata":{"name":"a"},"n":1.0,"m":-0,"e":1e400,"g":1e21}`))
	f.Add([]byte(`{"kind":"X","apiVersion":"v1","s":"\u0000\ud800 <&>\u2028","f":1.5e-300,"i":-9223372036854775808}`))
	f.Add([]byte(`{"":20000000000000110.0,"big":12345678901234567890}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if err := utiljson.Unmarshal(data, &m); err != nil || m == nil {
			return
		}
		served, err := json.Marshal(m)
		if err != nil {
			return
		}
		u := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(served, &u.Object); err != nil {
			t.Fatalf("the served object does not decode: %v", err)
		}
		if md, ok := u.Object["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		want := u.DeepCopy().Object
		p, err := packed.Pack(u)
		if err != nil {
			t.Fatalf("pack: %v", err)
		}
		got, err := p.Unpack()
		if err != nil {
			t.Fatalf("unpack: %v", err)
		}
		if !reflect.DeepEqual(got.Object, want) {
			t.Fatalf("round trip of %s:\n%#v\nwant\n%#v", served, got.Object, want)
		}
	})
}

// BenchmarkMemory reports the heap an object costs in the cache, as an
// unstructured map and packed: the bench-e2e Widget (small) and one with
// labels, annotations, an owner and more spec (rich).
func BenchmarkMemory(b *testing.B) {
	for _, c := range []struct{ name, json string }{{"small", small}, {"rich", widget}} {
		b.Run(c.name, func(b *testing.B) { memory(b, []byte(c.json)) })
	}
}

func memory(b *testing.B, data []byte) {
	const n = 10000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	keep := make([]any, n)
	for b.Loop() {
		clear(keep)
		before := heap()
		for i := range keep {
			keep[i] = decode(b, data)
		}
		b.ReportMetric(float64(heap()-before)/n, "unstructured-B/object")
		clear(keep)
		before = heap()
		for i := range keep {
			p, err := packed.Pack(decode(b, data))
			if err != nil {
				b.Fatal(err)
			}
			keep[i] = p
		}
		b.ReportMetric(float64(heap()-before)/n, "packed-B/object")
	}
	runtime.KeepAlive(keep)
}

// BenchmarkRead compares a read from the cache, an unstructured object's
// DeepCopy against a packed object's decode, and times a pack.
func BenchmarkRead(b *testing.B) {
	for _, c := range []struct{ name, json string }{{"small", small}, {"rich", widget}} {
		b.Run(c.name, func(b *testing.B) { read(b, []byte(c.json)) })
	}
}

func read(b *testing.B, data []byte) {
	u := decode(b, data)
	p, err := packed.Pack(decode(b, data))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("unstructured", func(b *testing.B) {
		for b.Loop() {
			u.DeepCopyObject()
		}
	})
	b.Run("packed", func(b *testing.B) {
		for b.Loop() {
			p.DeepCopyObject()
		}
	})
	b.Run("pack", func(b *testing.B) {
		for b.Loop() {
			if _, err := packed.Pack(u); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPackLargeObjectAndLookalikes: an object larger than the pooled
// buffers packs and unpacks whole, twice in a row (the second pack gets
// no buffer the first grew), and a managedFields that is not the object's
// own metadata's is data, kept.
func TestPackLargeObjectAndLookalikes(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "big", "namespace": "ns", "managedFields": []any{map[string]any{"manager": "m"}}},
		"data":     map[string]any{"big": big, "managedFields": "kept"},
		"spec":     map[string]any{"template": map[string]any{"metadata": map[string]any{"managedFields": []any{"kept"}}}},
	}}
	want := u.DeepCopy()
	unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
	for i := range 2 {
		p, err := packed.Pack(u.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Object, want.Object) {
			t.Fatalf("pack %d: the unpacked object differs (data %d bytes, spec %v)", i, len(got.Object["data"].(map[string]any)["big"].(string)), got.Object["spec"])
		}
	}
}
