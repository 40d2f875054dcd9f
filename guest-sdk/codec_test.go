package guest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeResponseMatchesEncodingJSON(t *testing.T) {
	cond := Condition{Type: "Ready", Status: "True"}
	for i, r := range []*Response{
		{},
		{Status: map[string]any{"n": int64(3), "s": "<x>", "l": []any{1.5, true, nil}}, RequeueAfterSeconds: 7},
		{Error: &Error{Message: "m", Terminal: true}, Finalized: true},
		{Events: []Event{{Type: "Normal", Reason: "R", Message: "é & \u2028"}}, Children: []map[string]any{{"kind": "ConfigMap"}}},
		{Status: map[string]any{"struct": cond}}, // falls back to encoding/json
		{Children: NoChildren()},                 // [] deletes every child: it must be sent
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
