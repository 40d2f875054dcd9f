package packed_test

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

// same fails unless p holds what Pack makes of the same JSON decoded by
// client-go: the same typed metadata and kind, and the same object when
// unpacked.
func same(t *testing.T, p *packed.Object, data string) {
	t.Helper()
	want, err := packed.Pack(decode(t, []byte(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.ObjectMeta, want.ObjectMeta) || p.TypeMeta != want.TypeMeta {
		t.Errorf("decoded %+v %+v\nwant %+v %+v", p.TypeMeta, p.ObjectMeta, want.TypeMeta, want.ObjectMeta)
	}
	got, err := p.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	w, _ := want.Unpack()
	if !reflect.DeepEqual(got.Object, w.Object) {
		t.Errorf("unpacked:\n%v\nwant\n%v", got.Object, w.Object)
	}
}

// TestDecodeIsPack: an object decoded straight from its JSON is the object
// Pack makes of client-go's decoding, for a small object, one with every
// metadata field, and one whose managedFields were not cut (decoded in full
// and packed, so they are dropped all the same).
func TestDecodeIsPack(t *testing.T) {
	withoutManaged := strings.Replace(widget, `,"managedFields":[{"manager":"kubectl","operation":"Update","fieldsV1":{"f:spec":{}}}]`, "", 1)
	if withoutManaged == widget {
		t.Fatal("the fixture has no managedFields to cut")
	}
	for name, data := range map[string]string{"small": small, "every field": withoutManaged, "managedFields": widget, "escaped kind": strings.Replace(small, `"kind":"Widget"`, `"kind":"W\u0069dget"`, 1)} {
		t.Run(name, func(t *testing.T) {
			p, err := packed.Decode([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			same(t, p, data)
			if p.Kind != "Widget" {
				t.Errorf("kind %q", p.Kind)
			}
		})
	}
}

// TestDecodeKeepsACopy: the decoded object does not share the caller's
// bytes, which a stream reuses.
func TestDecodeKeepsACopy(t *testing.T) {
	data := []byte(small)
	p, err := packed.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	copy(data, strings.Repeat("x", len(data)))
	same(t, p, small)
}

// TestDecodeRefuses: what client-go's unstructured decoder refuses is
// refused, with what is wrong.
func TestDecodeRefuses(t *testing.T) {
	for name, c := range map[string]struct{ data, want string }{
		"no kind":          {`{"apiVersion":"v1","metadata":{"name":"a"}}`, "'Kind' is missing"},
		"no apiVersion":    {`{"kind":"ConfigMap","metadata":{"name":"a"}}`, "'apiVersion' is missing"},
		"kind not string":  {`{"apiVersion":"v1","kind":3}`, "'Kind' is missing"},
		"truncated":        {small[:len(small)-3], "unexpected end of JSON input"},
		"bad number":       {strings.Replace(small, `"size":5`, `"size":5x`, 1), "invalid character 'x'"},
		"array":            {`[{"apiVersion":"v1","kind":"ConfigMap"}]`, "not a JSON object"},
		"two values":       {small + small, "invalid character '{' after top-level value"},
		"bad metadata":     {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":7}}`, "decoding the metadata of ConfigMap"},
		"bad timestamp":    {`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"creationTimestamp":"yesterday"}}`, "decoding the metadata of ConfigMap"},
		"string, not JSON": {`"Widget"`, "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := packed.Decode([]byte(c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestDecodeList: a list's metadata, and each item as Decode decodes it;
// client-go's list helpers read the items.
func TestDecodeList(t *testing.T) {
	body := `{"apiVersion":"example.wasmreconcile.io/v1","kind":"WidgetList","metadata":{"resourceVersion":"77","continue":"tok","remainingItemCount":5},"items":[` + small + ",\n " + widget + `]}`
	l, err := packed.DecodeList([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "77" || l.Continue != "tok" || l.RemainingItemCount == nil || *l.RemainingItemCount != 5 || l.Kind != "WidgetList" {
		t.Errorf("list metadata %+v %+v", l.TypeMeta, l.ListMeta)
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || meta.LenList(l) != 2 {
		t.Fatalf("%d items, LenList %d", len(items), meta.LenList(l))
	}
	same(t, items[0].(*packed.Object), small)
	same(t, items[1].(*packed.Object), widget)
	acc, err := meta.ListAccessor(l)
	if err != nil || acc.GetResourceVersion() != "77" || acc.GetContinue() != "tok" {
		t.Errorf("ListAccessor: %v %v", acc, err)
	}
	c := l.DeepCopyObject().(*packed.List)
	c.Items[0] = nil
	c.ResourceVersion = "1"
	if l.Items[0] == nil || l.ResourceVersion != "77" {
		t.Error("a copy's change reached the list")
	}

	// A built-in kind's list leaves apiVersion and kind out of its items;
	// client-go's unstructured decoder gives them the list's, and so does
	// DecodeList.
	typed := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"n"},"data":{"k":"v"}},{}]}`
	l, err = packed.DecodeList([]byte(typed))
	if err != nil {
		t.Fatal(err)
	}
	ul := &unstructured.UnstructuredList{}
	if err := ul.UnmarshalJSON([]byte(typed)); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 2 || len(ul.Items) != 2 {
		t.Fatalf("%d items, client-go %d", len(l.Items), len(ul.Items))
	}
	for i := range ul.Items {
		p := l.Items[i].(*packed.Object)
		got, err := p.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Object, ul.Items[i].Object) || p.GroupVersionKind() != ul.Items[i].GroupVersionKind() {
			t.Errorf("item %d: %s %v, client-go %v", i, p.GroupVersionKind(), got.Object, ul.Items[i].Object)
		}
	}

	for name, data := range map[string]string{"empty": `{"apiVersion":"v1","kind":"List","metadata":{},"items":[]}`, "null items": `{"kind":"List","items":null}`} {
		l, err := packed.DecodeList([]byte(data))
		if err != nil || len(l.Items) != 0 {
			t.Errorf("%s: %v %v", name, l, err)
		}
	}
	for name, c := range map[string]struct{ data, want string }{
		"bad item":      {`{"kind":"WidgetList","items":[{"kind":"Widget"}]}`, "'apiVersion' is missing"},
		"items object":  {`{"kind":"WidgetList","items":{"a":1}}`, "not a JSON array"},
		"bad meta":      {`{"kind":"WidgetList","metadata":{"resourceVersion":5}}`, "decoding the metadata of WidgetList"},
		"not an object": {`[]`, "not a JSON object"},
	} {
		if _, err := packed.DecodeList([]byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}

// values is a ValueReader over fixed values, then err.
type values struct {
	v      []string
	err    error
	closed bool
}

func (v *values) Next() ([]byte, error) {
	if len(v.v) == 0 {
		return nil, v.err
	}
	next := v.v[0]
	v.v = v.v[1:]
	return []byte(next), nil
}

func (v *values) Close() error { v.closed = true; return nil }

// TestWatchDecoder: each event type as client-go's reflector needs it; an
// object of another kind skipped; the stream's end passed on; and what
// client-go's watch decoder refuses, refused.
func TestWatchDecoder(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.wasmreconcile.io", Version: "v1", Kind: "Widget"}
	bookmark := `{"kind":"Widget","apiVersion":"example.wasmreconcile.io/v1","metadata":{"resourceVersion":"99","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}`
	gone := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (50)","reason":"Expired","code":410}`
	other := strings.Replace(small, `"kind":"Widget"`, `"kind":"Gadget"`, 1)
	src := &values{v: []string{
		`{"type":"ADDED","object":` + small + `}`,
		`{"type":"MODIFIED","object":` + other + `}`,
		`{"object":` + small + `,"type":"DELETED"}`,
		`{"type":"BOOKMARK","object":` + bookmark + `}`,
		`{"type":"ERROR","object":` + gone + `}`,
	}, err: io.ErrUnexpectedEOF}
	d := packed.NewWatchDecoder(src, gvk)
	want := []watch.EventType{watch.Added, watch.Deleted, watch.Bookmark, watch.Error}
	for i, wt := range want {
		typ, obj, err := d.Decode()
		if err != nil || typ != wt {
			t.Fatalf("event %d: %s %v, want %s", i, typ, err, wt)
		}
		switch wt {
		case watch.Added, watch.Deleted:
			same(t, obj.(*packed.Object), small)
		case watch.Bookmark:
			acc, err := meta.Accessor(obj)
			if err != nil || acc.GetResourceVersion() != "99" || acc.GetAnnotations()["k8s.io/initial-events-end"] != "true" {
				t.Errorf("bookmark %+v %v", obj, err)
			}
		case watch.Error:
			st, ok := obj.(*metav1.Status)
			if !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
				t.Errorf("error event object %#v", obj)
			}
		}
	}
	if _, _, err := d.Decode(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("at the end: %v", err)
	}
	d.Close()
	if !src.closed {
		t.Error("Close did not close the stream")
	}

	for name, c := range map[string]struct{ event, want string }{
		"bad type":     {`{"type":"RENAMED","object":` + small + `}`, "got invalid watch event type: RENAMED"},
		"bad object":   {`{"type":"ADDED","object":{"kind":"Widget"}}`, "unable to decode watch event"},
		"no object":    {`{"type":"ADDED"}`, "unable to decode watch event"},
		"not an event": {`[1,2]`, "not a JSON object"},
		"bad status":   {`{"type":"ERROR","object":{"code":"x"}}`, "unable to decode watch event"},
	} {
		_, _, err := packed.NewWatchDecoder(&values{v: []string{c.event}, err: io.EOF}, gvk).Decode()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}

// BenchmarkDecode compares decoding a watch event's object straight into a
// packed object with what the cache did before: client-go's unstructured
// decoding, then Pack.
func BenchmarkDecode(b *testing.B) {
	data := []byte(small)
	b.Run("straight", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := packed.Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unstructured+Pack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(data); err != nil {
				b.Fatal(err)
			}
			if _, err := packed.Pack(u); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeSharesTheKind: objects of a watch or a list share their
// apiVersion and kind strings instead of holding a copy each.
func TestDecodeSharesTheKind(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "example.wasmreconcile.io", Version: "v1", Kind: "Widget"}
	ev := `{"type":"ADDED","object":` + small + `}`
	d := packed.NewWatchDecoder(&values{v: []string{ev, ev}, err: io.EOF}, gvk)
	var kinds, versions []*byte
	for range 2 {
		_, obj, err := d.Decode()
		if err != nil {
			t.Fatal(err)
		}
		o := obj.(*packed.Object)
		kinds, versions = append(kinds, unsafe.StringData(o.Kind)), append(versions, unsafe.StringData(o.APIVersion))
	}
	l, err := packed.DecodeList([]byte(`{"apiVersion":"example.wasmreconcile.io/v1","kind":"WidgetList","items":[` + small + "," + small + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range l.Items {
		o := it.(*packed.Object)
		kinds, versions = append(kinds, unsafe.StringData(o.Kind)), append(versions, unsafe.StringData(o.APIVersion))
	}
	if kinds[0] != kinds[1] || versions[0] != versions[1] || kinds[2] != kinds[3] || versions[2] != versions[3] {
		t.Error("objects of one watch or list hold copies of their kind")
	}
}
