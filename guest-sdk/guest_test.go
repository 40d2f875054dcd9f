package guest

import (
	"encoding/json"
	"strings"
	"testing"
)

// withHandler registers h for one test and restores the previous state.
func withHandler(t *testing.T, h HandlerFunc) {
	prevM, prevS := manifest, serve
	manifest, serve = Manifest{Name: "t", For: GVK("g", "v1", "K")}, nil
	Handle(manifest, h)
	t.Cleanup(func() { manifest, serve = prevM, prevS })
}

func decode(t *testing.T, b []byte) Response {
	t.Helper()
	var r Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return r
}

func TestDispatchRoundTrip(t *testing.T) {
	withHandler(t, func(req *Request) *Response {
		return &Response{Status: map[string]any{"name": Object(req.Object).Name(), "attempt": req.Attempt}, RequeueAfterSeconds: 7}
	})
	r := decode(t, Dispatch([]byte(`{"object":{"metadata":{"name":"x"}},"attempt":2,"now":"2026-01-01T00:00:00Z"}`)))
	if r.Status["name"] != "x" || r.Status["attempt"] != float64(2) || r.RequeueAfterSeconds != 7 || r.Error != nil {
		t.Errorf("got %+v", r)
	}
}

func TestDispatchErrors(t *testing.T) {
	withHandler(t, func(req *Request) *Response {
		if Object(req.Object).Name() == "panic" {
			panic("boom")
		}
		return nil
	})
	if r := decode(t, Dispatch([]byte(`{not json`))); r.Error == nil || !r.Error.Terminal || !strings.Contains(r.Error.Message, "decoding request") {
		t.Errorf("bad JSON: %+v", r.Error)
	}
	if r := decode(t, Dispatch([]byte(`{"object":{"metadata":{"name":"panic"}}}`))); r.Error == nil || r.Error.Terminal || !strings.Contains(r.Error.Message, "boom") {
		t.Errorf("panic: %+v", r.Error)
	}
	if r := decode(t, Dispatch([]byte(`{"object":{}}`))); r.Error != nil || r.Status != nil {
		t.Errorf("nil response should encode as empty: %+v", r)
	}
}

func TestDispatchWithoutHandler(t *testing.T) {
	prevM, prevS := manifest, serve
	serve = nil
	defer func() { manifest, serve = prevM, prevS }()
	if r := decode(t, Dispatch([]byte(`{}`))); r.Error == nil || !strings.Contains(r.Error.Message, "no handler registered") {
		t.Errorf("got %+v", r.Error)
	}
}

func TestHandleTwicePanics(t *testing.T) {
	withHandler(t, func(*Request) *Response { return nil })
	defer func() {
		if recover() == nil {
			t.Error("second Handle did not panic")
		}
	}()
	Handle(Manifest{}, func(*Request) *Response { return nil })
}

func TestErrorHelpers(t *testing.T) {
	if r := Errorf("x %d", 1); r.Error.Message != "x 1" || r.Error.Terminal {
		t.Errorf("Errorf: %+v", r.Error)
	}
	if r := TerminalErrorf("y"); !r.Error.Terminal {
		t.Errorf("TerminalErrorf: %+v", r.Error)
	}
}

func TestLogsAreCapturedNatively(t *testing.T) {
	TakeLogs()
	Infof("hello %s", "world")
	Warnf("careful")
	logs := TakeLogs()
	if len(logs) != 2 || logs[0].Message != "hello world" || logs[1].Level != 2 {
		t.Errorf("logs = %+v", logs)
	}
	if len(TakeLogs()) != 0 {
		t.Error("TakeLogs did not clear")
	}
}
