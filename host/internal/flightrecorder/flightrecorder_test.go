package flightrecorder

import (
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

func secret(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name, "namespace": "ns"},
		"data": map[string]any{"password": "c2VjcmV0"}, "stringData": map[string]any{"token": "t0ken"}}
}

func TestRedact(t *testing.T) {
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "v"}}
	orig := secret("child")
	in := abi.Request{Object: obj, Children: []map[string]any{orig}, Related: []map[string]any{secret("read")}}
	out, redacted := Redact(in)
	if !redacted {
		t.Fatal("nothing redacted")
	}
	for _, s := range append(out.Children, out.Related...) {
		if s["data"].(map[string]any)["password"] != redactedBase64 || s["stringData"].(map[string]any)["token"] != Redacted {
			t.Errorf("not redacted: %v", s)
		}
	}
	if out.Object["data"].(map[string]any)["k"] != "v" {
		t.Errorf("a ConfigMap was changed: %v", out.Object)
	}
	if orig["data"].(map[string]any)["password"] != "c2VjcmV0" {
		t.Error("the input's own Secret was modified")
	}
	// A kind named Secret in another group is not a core Secret.
	other := secret("x")
	other["apiVersion"] = "example.com/v1"
	if _, redacted := Redact(abi.Request{Object: other}); redacted {
		t.Error("a Secret of another group was redacted")
	}
	// Reads are redacted too, unless KeepSecrets.
	if got := redactAll([]map[string]any{secret("r")}, true)[0]["stringData"].(map[string]any)["token"]; got != Redacted {
		t.Errorf("read not redacted: %v", got)
	}
	if got := redactAll([]map[string]any{secret("r")}, false)[0]["stringData"].(map[string]any)["token"]; got != "t0ken" {
		t.Errorf("KeepSecrets redacted a read: %v", got)
	}
}

func TestBounds(t *testing.T) {
	r := &Recorder{opts: Options{Failures: 3, Successes: 2, SampleEvery: 10, MaxBytes: 1000}.withDefaults(), modules: map[string]*store{}}
	for i := 0; i < 10; i++ {
		r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, Object: string(rune('a' + i)), size: 10})
		r.keep(Record{Module: "m", Kind: protocol.Success, Object: string(rune('a' + i)), size: 10})
	}
	recs := r.Records("m")
	var objs []string
	for _, rec := range recs {
		objs = append(objs, string(rec.Kind)+":"+rec.Object)
	}
	if got := strings.Join(objs, " "); got != "FuelExhausted:h FuelExhausted:i FuelExhausted:j Success:i Success:j" {
		t.Errorf("kept %s", got)
	}
	// Over MaxBytes, successes go first, then the oldest failures.
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, Object: "big", size: 975})
	objs = nil
	for _, rec := range r.Records("m") {
		objs = append(objs, rec.Object)
	}
	if got := strings.Join(objs, " "); got != "i j big" { // both successes went, then no more was needed
		t.Errorf("after a big record, kept %s", got)
	}
	// Sampling: the first success, then one in SampleEvery.
	n := 0
	for i := 0; i < 25; i++ {
		if r.Wants("s", false) {
			n++
		}
	}
	if n != 3 || !r.Wants("s", true) {
		t.Errorf("sampled %d of 25 successes, want 3 (the 1st, 11th, 21st); failures always", n)
	}
}
