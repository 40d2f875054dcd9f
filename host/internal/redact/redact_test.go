package redact

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

const plain = "hunter2-the-password"

var encoded = base64.StdEncoding.EncodeToString([]byte(plain))

func secret() map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "ns", "annotations": map[string]any{
			"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"` + encoded + `"}}`, "team": "a"}},
		"data": map[string]any{"password": encoded}, "stringData": map[string]any{"token": "tok-3456"}}
}

// TestObjectLeavesNoValue: every form a Secret's value can take after a
// guest copied it (plain, base64, inside a longer string, as a map key,
// JSON-escaped in a string, in the last-applied annotation) is gone from
// the scrubbed copy, which keeps everything else; the input is untouched.
func TestObjectLeavesNoValue(t *testing.T) {
	sc := &Scrubber{}
	sc.Learn(secret())
	status := map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"status": map[string]any{
			"plain": plain, "base64": encoded, "inside": "url=postgres://u:" + plain + "@db",
			"token": "tok-3456", "keyed": map[string]any{plain: "x"}, "json": `{"p":"` + plain + `"}`, "kept": "ready",
		},
		"children": []any{secret()},
	}
	out := sc.Object(status)
	b, _ := json.Marshal(out)
	for _, v := range []string{plain, encoded, "tok-3456", base64.StdEncoding.EncodeToString([]byte("tok-3456"))} {
		if strings.Contains(string(b), v) {
			t.Errorf("%q is still in %s", v, b)
		}
	}
	if !strings.Contains(string(b), `"kept":"ready"`) || !strings.Contains(string(b), `"team":"a"`) {
		t.Errorf("other values were changed: %s", b)
	}
	if strings.Contains(string(b), "last-applied-configuration") {
		t.Errorf("the last-applied annotation was kept: %s", b)
	}
	if status["status"].(map[string]any)["plain"] != plain {
		t.Error("the input was modified")
	}
}

// TestShortValues: a value under MinSubstring bytes is replaced where it
// is a whole string only.
func TestShortValues(t *testing.T) {
	sc := &Scrubber{}
	sc.Learn(map[string]any{"apiVersion": "v1", "kind": "Secret", "stringData": map[string]any{"n": "1"}})
	if got := sc.String("1"); got != Redacted {
		t.Errorf("whole short value: %q", got)
	}
	if got := sc.String("replicas 10"); got != "replicas 10" {
		t.Errorf("a short value inside a string was replaced: %q", got)
	}
}

// TestNotASecret: a kind named Secret in another group teaches nothing.
func TestNotASecret(t *testing.T) {
	sc := &Scrubber{}
	s := secret()
	s["apiVersion"] = "example.com/v1"
	sc.Learn(s)
	if !sc.Empty() {
		t.Error("learned from a Secret of another group")
	}
}

// TestJSON scrubs a JSON document and leaves bytes that are not JSON.
func TestJSON(t *testing.T) {
	sc := &Scrubber{}
	sc.Learn(secret())
	out := sc.JSON([]byte(`{"status":{"msg":"the password is ` + plain + `"}}`))
	if strings.Contains(string(out), plain) {
		t.Errorf("JSON kept the value: %s", out)
	}
	if got := sc.JSON([]byte("not json " + plain)); string(got) != "not json "+plain {
		t.Errorf("not JSON: %q", got)
	}
}
