package guest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

func TestEncodeResponseMatchesEncodingJSON(t *testing.T) {
	cond := Condition{Type: "Ready", Status: "True"}
	for i, r := range []*Response{
		{},
		{Status: map[string]any{"n": int64(3), "s": "<x>", "l": []any{1.5, true, nil}}, RequeueAfterSeconds: 7},
		{Error: &Error{Message: "m", Terminal: true}, Finalized: true},
		{Events: []Event{{Type: "Normal", Reason: "R", Message: "é & \u2028"}}, Children: []map[string]any{{"kind": "ConfigMap"}}},
		{Status: map[string]any{"struct": cond, "conds": []any{cond, &cond}}}, // Condition encodes itself
		{Status: map[string]any{"c": Condition{Type: "T", ObservedGeneration: -3, Message: "<&>"}}},
		{Children: NoChildren()}, // [] deletes every child: it must be sent
	} {
		got, err := encodeResponse(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(r)
		// The same JSON value: key order differs (sorted against field order).
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("response %d: fast output is not JSON: %v: %s", i, err, got)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("response %d: fast %s, encoding/json %s", i, got, want)
		}
	}
}

func TestDecodeRequestMatchesEncodingJSON(t *testing.T) {
	in := `{"object":{"metadata":{"name":"w","generation":2},"spec":{"size":3}},"children":[{"kind":"ConfigMap"}],` +
		`"related":[],"finalizing":true,"config":{"a":"b"},"attempt":4,"now":"2026-01-01T00:00:00Z","unknown":1,` +
		`"childFailures":[{"apiVersion":"v1","kind":"ConfigMap","namespace":"ns","name":"c","reason":"Conflict","message":"taken"}]}`
	got, err := decodeRequest([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var want Request
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("fast %+v\nencoding/json %+v", *got, want)
	}
	for _, bad := range []string{`[]`, `{"attempt":"x"}`, `{"attempt":1.5}`, `{"object":[]}`, `{"children":[1]}`, `{"childFailures":[1]}`, `{"childFailures":{}}`, `{"finalizing":"yes"}`, `{"now":3}`, `{`} {
		if _, err := decodeRequest([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		} else if json.Unmarshal([]byte(bad), &want) == nil && !strings.Contains(bad, "1.5") {
			t.Errorf("%s: refused by the fast codec (%v) but accepted by encoding/json", bad, err)
		}
	}
}

type point struct{ X, Y int }

// TestEncodeResponseUnsupported: a value the SDK does not encode fails the
// call with an error that names its type and what to do, unless package
// stdjson set encoding/json as the fallback; then the bytes are
// encoding/json's.
func TestEncodeResponseUnsupported(t *testing.T) {
	r := &Response{Status: map[string]any{"p": point{1, 2}, "n": 1.0}}
	_, err := encodeResponse(nil, r)
	if !errors.Is(err, jsontree.ErrUnsupported) || !strings.Contains(err.Error(), "guest.point") || !strings.Contains(err.Error(), "guest-sdk/stdjson") {
		t.Fatalf("got %v, want an unsupported-value error naming guest.point and stdjson", err)
	}

	jsontree.SetFallback(json.Marshal)
	t.Cleanup(func() { jsontree.SetFallback(nil) })
	got, err := encodeResponse(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"status":{"n":1,"p":{"X":1,"Y":2}}}`; string(got) != want {
		t.Errorf("with the fallback: %s, want %s", got, want)
	}
}

// TestAppendMatchesEncodingJSON: the manifest, the cache request and the
// request (for Lazy) are encoded by hand; encoding/json is the reference.
func TestAppendMatchesEncodingJSON(t *testing.T) {
	gvk := GVK("example.io", "v1", "Wid\"get")
	manifests := []Manifest{
		{},
		{Name: "w", For: gvk},
		{Name: "w", For: gvk, Owns: []GroupVersionKind{GVK("", "v1", "ConfigMap"), GVK("apps", "v1", "Deployment")},
			Reads: []GroupVersionKind{GVK("", "v1", "Secret")}, Finalizer: true,
			Triggers: []Trigger{{Kind: GVK("", "v1", "Secret"), OwnerReference: true}, {Kind: gvk, Field: "spec.x", Selector: "spec.s", All: true}, {}},
			Limits:   &ManifestLimits{Fuel: 1 << 40, TimeoutMillis: 250, MemoryPages: 17}},
		{Name: "<é>", For: gvk, Limits: &ManifestLimits{}},
		{Name: "w", For: gvk, Limits: &ManifestLimits{TimeoutMillis: -1}},
		{Name: "w", For: gvk, Limits: &ManifestLimits{MemoryPages: 1}},
	}
	for _, m := range manifests {
		want, _ := json.Marshal(m)
		if got := appendManifest(nil, &m); string(got) != string(want) {
			t.Errorf("manifest:\n got %s\nwant %s", got, want)
		}
	}
	for _, r := range []abi.CacheRequest{{}, {Op: "get", APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "n"}, {Op: "list", Kind: "K", LabelSelector: "a=b,c!=\"d\""}} {
		want, _ := json.Marshal(r)
		if got := appendCacheRequest(nil, &r); string(got) != string(want) {
			t.Errorf("cache request:\n got %s\nwant %s", got, want)
		}
	}
	for _, r := range []Request{
		{},
		{Object: map[string]any{"a": 1.0}, Attempt: -2, Now: "now"},
		{Object: map[string]any{}, Children: []map[string]any{{"k": "v"}}, Related: []map[string]any{{}}, Finalizing: true,
			Config: map[string]any{"c": []any{"x"}}, Attempt: 3, Now: "t",
			ChildFailures: []ChildFailure{{APIVersion: "v1", Kind: "ConfigMap", Name: "c", Reason: "Conflict", Message: "m"}, {Namespace: "ns"}}},
	} {
		want, _ := json.Marshal(r)
		got, err := appendRequest(nil, &r)
		if err != nil || string(got) != string(want) {
			t.Errorf("request:\n got %s (%v)\nwant %s", got, err, want)
		}
	}
}
