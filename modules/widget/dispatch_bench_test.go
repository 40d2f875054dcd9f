package main

import (
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/modules/internal/guestbench"
)

// benchRequest is the 2.4 KB Widget request of the language benchmarks,
// like the host's JSON benchmark.
func benchRequest() []byte { return guestbench.Request() }

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
