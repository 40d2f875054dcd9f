package guest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const lazyRequest = `{
 "object": {"apiVersion":"examples.wasmreconcile.io/v1alpha1","kind":"Widget",
   "metadata":{"name":"w","namespace":"ns","uid":"u-1","resourceVersion":"42","generation":3,
     "labels":{"app":"a","n":1},"annotations":{"k\u00e9y":"v\"q","big":"` + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + `"}},
   "spec":{"size":3,"color":"blue","size":4,"nested":{"list":[1,2.5,"s",null,true]}},
   "status":{"conditions":[{"type":"Other","status":"False"},
     {"type":"Ready","status":"True","reason":"R","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":2}]}},
 "children":[{"kind":"ConfigMap","metadata":{"name":"c1"}},{"kind":"ConfigMap","metadata":{"name":"c2"}}],
 "config":{"mode":"fast"},
 "finalizing":true, "attempt":2, "now":"2026-02-02T00:00:00Z",
 "childFailures":[{"apiVersion":"v1","kind":"ConfigMap","namespace":"ns","name":"x","reason":"Conflict","message":"taken"}]
}`

// TestLazyMatchesDecoding: every accessor of a LazyRequest answers what
// the eagerly decoded Request does, duplicate keys and escapes included.
func TestLazyMatchesDecoding(t *testing.T) {
	lazy, err := ParseLazy([]byte(lazyRequest))
	if err != nil {
		t.Fatal(err)
	}
	eager, err := decodeRequest([]byte(lazyRequest))
	if err != nil {
		t.Fatal(err)
	}
	obj, lo := Object(eager.Object), lazy.Object()
	if got, want := lo.Meta(), (Meta{Name: obj.Name(), Namespace: obj.Namespace(), UID: obj.UID(), ResourceVersion: "42", Generation: obj.Generation()}); got != want {
		t.Errorf("Meta = %+v, want %+v", got, want)
	}
	if n, _ := lo.Get("spec", "size").Int64(); n != 4 {
		t.Errorf("spec.size = %d, want 4 (the last of a duplicated key, as decoding)", n)
	}
	for _, path := range [][]string{{"spec", "color"}, {"metadata", "annotations", "k\u00e9y"}, {"metadata", "annotations", "big"}, {"kind"}, {"nope"}, {"spec", "size", "deeper"}} {
		if got, want := lo.Get(path...).String(), obj.NestedString(path...); got != want {
			t.Errorf("%v = %q, want %q", path, got, want)
		}
	}
	whole, err := lo.Get("spec", "nested").Decode()
	if want, _ := obj.NestedField("spec", "nested"); err != nil || !reflect.DeepEqual(whole, want) {
		t.Errorf("spec.nested decodes to %#v (%v), want %#v", whole, err, want)
	}
	if got, want := lo.Labels(), obj.Labels(); !reflect.DeepEqual(got, want) {
		t.Errorf("Labels = %v, want %v", got, want)
	}
	if got, want := lo.Annotations(), obj.Annotations(); !reflect.DeepEqual(got, want) {
		t.Errorf("Annotations = %v, want %v", got, want)
	}
	for _, typ := range []string{"Ready", "Other", "Missing"} {
		gc, gok := lo.Condition(typ)
		wc, wok := obj.Condition(typ)
		if gc != wc || gok != wok {
			t.Errorf("Condition(%s) = %+v %v, want %+v %v", typ, gc, gok, wc, wok)
		}
	}
	c := Condition{Type: "Ready", Status: "True", Reason: "R2"}
	if got, want := lo.SetCondition(c, "later"), obj.SetCondition(c, "later"); !reflect.DeepEqual(got, want) {
		t.Errorf("SetCondition = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(map[string]any(lo.Object()), eager.Object) {
		t.Error("Object() differs from the decoded object")
	}
	if len(lazy.Children()) != len(eager.Children) || lazy.Children()[1].Meta().Name != "c2" {
		t.Errorf("children %d, want %d", len(lazy.Children()), len(eager.Children))
	}
	if lazy.Config().Get("mode").String() != "fast" || lazy.Attempt() != eager.Attempt || lazy.Now() != eager.Now || lazy.Finalizing() != eager.Finalizing {
		t.Error("config, attempt, now or finalizing differ")
	}
	if !reflect.DeepEqual(lazy.ChildFailures(), eager.ChildFailures) {
		t.Errorf("ChildFailures = %+v, want %+v", lazy.ChildFailures(), eager.ChildFailures)
	}
	if lazy.Related() != nil {
		t.Error("related present")
	}
}

// TestParseLazyRefusesWhatDecodingRefuses: wrong field types are refused
// with the same errors, and malformed JSON is refused anywhere in it.
func TestParseLazyRefusesWhatDecodingRefuses(t *testing.T) {
	for _, in := range []string{
		`{"object":[]}`, `{"config":"x"}`, `{"children":{}}`, `{"attempt":1.5}`, `{"attempt":"1"}`,
		`{"now":3}`, `{"finalizing":"yes"}`, `[]`, `{"object":{"a":}}`, `{"object":{}} x`, `{"object":{"a":1}`,
	} {
		if _, err := ParseLazy([]byte(in)); err == nil {
			t.Errorf("%s: accepted", in)
		} else if _, derr := decodeRequest([]byte(in)); derr == nil {
			t.Errorf("%s: refused lazily (%v), accepted when decoded", in, err)
		}
	}
	if _, err := ParseLazy([]byte(`{"object":null,"attempt":null,"unknown":[1]}`)); err != nil {
		t.Errorf("nulls and unknown fields: %v", err)
	}
}

// TestHandleLazyDispatch: a lazy handler serves Dispatch, and its panics
// are recovered as for Handle.
func TestHandleLazyDispatch(t *testing.T) {
	defer func(s func([]byte) (*Response, error)) { serve = s }(serve)
	serve = nil
	HandleLazy(Manifest{Name: "lazy"}, func(req *LazyRequest) *Response {
		if req.Object().Meta().Name == "boom" {
			panic("boom")
		}
		return &Response{Status: map[string]any{"name": req.Object().Meta().Name, "attempt": req.Attempt()}}
	})
	var resp Response
	if err := json.Unmarshal(Dispatch([]byte(`{"object":{"metadata":{"name":"w"}},"attempt":1}`)), &resp); err != nil || resp.Status["name"] != "w" {
		t.Fatalf("response %+v (%v)", resp, err)
	}
	if err := json.Unmarshal(Dispatch([]byte(`{"object":{"metadata":{"name":"boom"}}}`)), &resp); err != nil || resp.Error == nil || !strings.Contains(resp.Error.Message, "panicked") {
		t.Fatalf("panic: %+v (%v)", resp, err)
	}
	if err := json.Unmarshal(Dispatch([]byte(`{"object":7}`)), &resp); err != nil || resp.Error == nil || !resp.Error.Terminal {
		t.Fatalf("bad request: %+v (%v)", resp, err)
	}
	// Lazy turns a Request into a LazyRequest, for unit tests of a handler.
	r, err := Lazy(&Request{Object: map[string]any{"metadata": map[string]any{"name": "x"}}})
	if err != nil || r.Object().Meta().Name != "x" {
		t.Fatalf("Lazy: %v", err)
	}
}
