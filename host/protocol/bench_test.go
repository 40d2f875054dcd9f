package protocol_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// cachedWidget is a Widget as the informer cache holds it (integers as
// int64), about 2.4 KB encoded, with the status the widget module writes.
func cachedWidget() map[string]any {
	ann := map[string]any{}
	for i := 0; i < 40; i++ {
		ann[fmt.Sprintf("example.com/note-%02d", i)] = strings.Repeat("v", 40)
	}
	return map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "bench", "namespace": "default", "generation": int64(3),
			"uid": "0b6c7a5e-2c1e-4a57-9d0f-6f1f8f8f8f8f", "resourceVersion": "123456",
			"creationTimestamp": "2026-01-01T00:00:00Z",
			"labels":            map[string]any{"app": "bench"}, "annotations": ann},
		"spec": map[string]any{"size": int64(3), "color": "blue"},
		"status": map[string]any{"observedGeneration": int64(3), "summary": "3 x blue", "conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "widget v1",
				"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(3)}}},
	}
}

// widgetResponse is what the widget module answers for cachedWidget.
const widgetResponse = `{"status":{"observedGeneration":3,"summary":"3 x blue","conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"widget v1","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":3}]}}`

// BenchmarkHostWork is the host's own work per reconcile of a Widget,
// outside the guest: encoding the request from the cached object and
// decoding and checking the response (issue 13: 24–27 µs measured end to
// end before this benchmark existed).
func BenchmarkHostWork(b *testing.B) {
	obj := cachedWidget()
	rules := protocol.RulesFor(abi.Manifest{Name: "widget", For: abi.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}}, protocol.Builtin, protocol.Limits{})
	out := []byte(widgetResponse)
	b.Run("encode", func(b *testing.B) {
		// Interleaved with encoding/json, which EncodeRequest used before
		// and whose bytes it reproduces: the ratio is from one run.
		req := abi.Request{Object: obj, Now: "2026-01-01T00:00:00Z"}
		var ours, std time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			got, err := protocol.EncodeRequest(req)
			mid := time.Now()
			want, _ := json.Marshal(req)
			end := time.Now()
			ours, std = ours+mid.Sub(start), std+end.Sub(mid)
			if err != nil || len(got) < 2400 || len(got) != len(want) {
				b.Fatalf("%d bytes (encoding/json: %d), %v", len(got), len(want), err)
			}
		}
		b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns/encode")
		b.ReportMetric(float64(std.Nanoseconds())/float64(b.N), "ns/encoding-json")
		b.ReportMetric(float64(std)/float64(ours), "speedup")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := rules.Decode("bench", obj, 2400, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
