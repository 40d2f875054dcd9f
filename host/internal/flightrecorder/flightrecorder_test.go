package flightrecorder

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/redact"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

func secret(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name, "namespace": "ns"},
		"data": map[string]any{"password": "c2VjcmV0"}, "stringData": map[string]any{"token": "t0ken"}}
}

// TestScrubRequest: every Secret of a recorded request (object, children,
// related) loses its values, a value copied elsewhere (a ConfigMap child,
// the config) is replaced too, and the caller's maps are untouched.
func TestScrubRequest(t *testing.T) {
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "v", "copy": "t0ken"}}
	orig := secret("child")
	in := abi.Request{Object: obj, Children: []map[string]any{orig}, Related: []map[string]any{secret("read")}, Config: map[string]any{"x": "secret"}}
	out := scrubRequest(scrubberOf(in, nil), in)
	for _, s := range append(out.Children, out.Related...) {
		if s["data"].(map[string]any)["password"] != redact.RedactedBase64 || s["stringData"].(map[string]any)["token"] != redact.Redacted {
			t.Errorf("not redacted: %v", s)
		}
	}
	if d := out.Object["data"].(map[string]any); d["k"] != "v" || d["copy"] != redact.Redacted {
		t.Errorf("the ConfigMap: %v, want k kept and the copied token redacted", d)
	}
	if out.Config["x"] != redact.Redacted {
		t.Errorf("config: %v, want the decoded password redacted", out.Config)
	}
	if orig["data"].(map[string]any)["password"] != "c2VjcmV0" || obj["data"].(map[string]any)["copy"] != "t0ken" {
		t.Error("the input's own maps were modified")
	}
}

// TestForget: a removed module's records are freed, and a call of it
// still waiting for its replay is not kept after.
func TestForget(t *testing.T) {
	r := &Recorder{opts: Options{}.withDefaults(), modules: map[string]*store{}, forgotten: map[string]time.Time{}}
	before := time.Now().UTC()
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, At: before, size: 10})
	r.Forget("m")
	if recs := r.Records("m"); recs != nil {
		t.Fatalf("records after Forget: %v", recs)
	}
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, At: before, size: 10}) // queued before the removal
	if recs := r.Records("m"); recs != nil {
		t.Errorf("a call made before the removal was kept: %v", recs)
	}
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, At: time.Now().UTC().Add(time.Second), size: 10}) // the module came back
	if recs := r.Records("m"); len(recs) != 1 {
		t.Errorf("a call made after the module came back: %d records, want 1", len(recs))
	}
}

// TestHandlerServesOnlyReadableRecords: a client that may read the kind in
// one namespace gets that namespace's records and a count of the others;
// one that may read none gets 403; the module list shows only modules with
// a readable record.
func TestHandlerServesOnlyReadableRecords(t *testing.T) {
	r := &Recorder{opts: Options{}.withDefaults(), modules: map[string]*store{}, forgotten: map[string]time.Time{}}
	widget := func(ns string) abi.Request {
		return abi.Request{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": ns}}}
	}
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, Input: widget("a"), size: 10})
	r.keep(Record{Module: "m", Kind: protocol.FuelExhausted, Input: widget("b"), size: 10})
	get := func(allowed string, query string) (int, map[string]any) {
		h := r.Handler(HandlerOptions{MayRead: func(_ *http.Request, gvk schema.GroupVersionKind, ns string) (bool, error) {
			return gvk.Kind == "Widget" && ns == allowed, nil
		}})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Path+query, nil))
		var body map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		return w.Code, body
	}
	code, body := get("a", "?module=m")
	if cases, _ := body["cases"].([]any); code != 200 || len(cases) != 1 || body["withheld"] != float64(1) {
		t.Errorf("may read a: %d %v, want one case and one withheld", code, body)
	}
	if code, body := get("c", "?module=m"); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(body["error"]), "Widget in namespace a") {
		t.Errorf("may read neither: %d %v, want 403 naming what it may not read", code, body)
	}
	if _, body := get("c", ""); fmt.Sprint(body["modules"]) != "[]" {
		t.Errorf("module list for a client that may read nothing: %v", body)
	}
	if _, body := get("b", ""); fmt.Sprint(body["modules"]) != "[m]" {
		t.Errorf("module list: %v", body)
	}
}

func TestBounds(t *testing.T) {
	r := &Recorder{opts: Options{Failures: 3, Successes: 2, SampleEvery: 10, MaxBytes: 1000}.withDefaults(), modules: map[string]*store{}, forgotten: map[string]time.Time{}}
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
	// Sampling: the first success, then one in SampleEvery, at most one
	// per SampleInterval (10 s by default): 25 calls a second apart.
	t0 := time.Now()
	var kept []int
	for i := 0; i < 25; i++ {
		if r.wants("s", false, t0.Add(time.Duration(i)*time.Second)) {
			kept = append(kept, i+1)
		}
	}
	if fmt.Sprint(kept) != "[1 11 21]" || !r.Wants("s", true) {
		t.Errorf("sampled successes %v of 25 one second apart, want [1 11 21]; failures always", kept)
	}
	// 25 calls in the same second: only the first, however many in 10.
	kept = nil
	for i := 0; i < 25; i++ {
		if r.wants("burst", false, t0) {
			kept = append(kept, i+1)
		}
		if r.wants("burst", true, t0) == false {
			t.Fatal("a failure not kept")
		}
	}
	if fmt.Sprint(kept) != "[1]" {
		t.Errorf("a burst: sampled %v, want [1]", kept)
	}
	// Negative: no cap.
	r.opts.SampleInterval = -1
	kept = nil
	for i := 0; i < 25; i++ {
		if r.wants("nocap", false, t0) {
			kept = append(kept, i+1)
		}
	}
	if fmt.Sprint(kept) != "[1 11 21]" {
		t.Errorf("SampleInterval -1: sampled %v, want [1 11 21]", kept)
	}
}
