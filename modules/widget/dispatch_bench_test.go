package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// benchRequest is a 2.4 KB Widget request, like the host's JSON benchmark.
func benchRequest() []byte {
	ann := map[string]any{}
	obj := map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "bench", "namespace": "default", "generation": 3,
			"labels": map[string]any{"app": "bench"}, "annotations": ann},
		"spec": map[string]any{"size": 3, "color": "blue"},
	}
	req, _ := json.Marshal(guest.Request{Object: obj, Now: "2026-01-01T00:00:00Z"})
	for i := 0; len(req) < 2400; i++ {
		ann[fmt.Sprintf("example.com/note-%02d", i)] = strings.Repeat("v", 40)
		req, _ = json.Marshal(guest.Request{Object: obj, Now: "2026-01-01T00:00:00Z"})
	}
	return req
}

// BenchmarkDispatchNative runs the widget's whole hot path natively: decode
// the request, reconcile, encode the response. Compare with the host's
// BenchmarkMeteringJSONReconcile, which runs the same bytes in the guest.
func BenchmarkDispatchNative(b *testing.B) {
	req := benchRequest()
	b.ReportMetric(float64(len(req)), "request-bytes")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if out := guest.Dispatch(req); len(out) == 0 {
			b.Fatal("empty response")
		}
		// Natively, the SDK keeps log lines for unit tests (TakeLogs):
		// drop them, as the host does per call, so that they do not
		// accumulate over the run.
		guest.TakeLogs()
	}
}
