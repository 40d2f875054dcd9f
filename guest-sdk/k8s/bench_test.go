package k8s

import (
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// BenchmarkChildrenTypedVsMaps builds the children of each scenario and
// encodes them as the SDK encodes a response's children, with maps and
// with this package's types, interleaved call by call in one run, and
// reports each one's time and the ratio typed/maps (the goal: at most 1).
// Run it in wasm, where maps cost most, with
//
//	GOOS=wasip1 GOARCH=wasm go test -c -o k8s.wasm . && wazero run k8s.wasm -test.run '^$' -test.bench TypedVsMaps
func BenchmarkChildrenTypedVsMaps(b *testing.B) {
	for _, s := range scenarios {
		b.Run(s.name, func(b *testing.B) {
			buf := make([]byte, 0, 8192)
			var maps, typed time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, err := jsontree.Append(buf[:0], s.maps("shop"))
				mid := time.Now()
				if err != nil || len(out) == 0 {
					b.Fatal(err)
				}
				out, err = jsontree.Append(buf[:0], s.typed("shop"))
				end := time.Now()
				if err != nil || len(out) == 0 {
					b.Fatal(err)
				}
				maps, typed = maps+mid.Sub(start), typed+end.Sub(mid)
			}
			b.ReportMetric(float64(maps.Nanoseconds())/float64(b.N), "maps-ns")
			b.ReportMetric(float64(typed.Nanoseconds())/float64(b.N), "typed-ns")
			b.ReportMetric(float64(typed)/float64(maps), "typed/maps")
		})
	}
}

// BenchmarkChildren is the same work, one way at a time, for allocations.
func BenchmarkChildren(b *testing.B) {
	for _, s := range scenarios {
		for _, way := range []struct {
			name  string
			build func(string) []map[string]any
		}{{"maps", s.maps}, {"typed", s.typed}} {
			b.Run(s.name+"/"+way.name, func(b *testing.B) {
				b.ReportAllocs()
				buf := make([]byte, 0, 8192)
				for i := 0; i < b.N; i++ {
					out, err := jsontree.Append(buf[:0], way.build("shop"))
					if err != nil || len(out) == 0 {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
