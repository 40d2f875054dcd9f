//go:build rustnative

package native

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/modules/internal/guestbench"
)

// wasmPath is the Rust widget as make modules-rust builds it.
var wasmPath = filepath.Join("..", "..", "..", "bin", "modules", "widget-rust.wasm")

func guest(tb testing.TB) *guestbench.Guest {
	tb.Helper()
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		tb.Fatalf("%v; make modules-rust builds it", err)
	}
	g, err := guestbench.NewGuest(context.Background(), wasm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// TestNativeAnswersAsTheGuest: the native build answers every request as
// the wasm build does, a response larger than the buffer included.
func TestNativeAnswersAsTheGuest(t *testing.T) {
	g := guest(t)
	for _, req := range []string{
		string(guestbench.Request()),
		`{"object":{"metadata":{"generation":1},"spec":{}},"now":"T"}`,
		`{"object":{"metadata":{"generation":2},"spec":{"size":1000}},"now":"T"}`,
		`{"object":{"metadata":{"generation":5},"spec":{"size":2},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"OLD"}]}},"now":"T"}`,
		`[1,2`,
	} {
		want, err := g.Call([]byte(req))
		if err != nil {
			t.Fatal(err)
		}
		got := Reconcile([]byte(req), make([]byte, 0, 16))
		if string(got) != string(want) {
			t.Errorf("%s\nnative %s\n  wasm %s", req, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: not JSON: %s", req, got)
		}
	}
}

// BenchmarkRustGuestVsNative runs the Rust widget natively (a staticlib
// through cgo) and compiled to wasm by rustc under wazero's compiler,
// interleaved call by call in one process, on the 2.4 KB Widget request,
// against issue 26's goal of at most 1.5x. The guest runs unmetered; the
// engine's metering adds to it.
func BenchmarkRustGuestVsNative(b *testing.B) {
	guestVsNative(b, "Rust", guestbench.Request())
}

// BenchmarkRustGuestVsNativeSmall is BenchmarkRustGuestVsNative on a
// 60-byte request: the floor of a call, where the per-call costs of each
// side (entering the guest and copying in and out; the cgo call) weigh
// most. If the ratio holds here as on the 2.4 KB request, the guest's
// speed, not the request's size or the SDK's parsing, sets it.
func BenchmarkRustGuestVsNativeSmall(b *testing.B) {
	guestVsNative(b, "Rust, 60-byte request,", []byte(`{"object":{"metadata":{"generation":1},"spec":{}},"now":"T"}`))
}

// guestVsNative checks that both builds answer req alike, then times them
// interleaved against issue 26's goal of at most 1.5x.
func guestVsNative(b *testing.B, label string, req []byte) {
	g := guest(b)
	buf := make([]byte, 0, 4096)
	want, err := g.Call(req)
	if err != nil {
		b.Fatal(err)
	}
	if got := Reconcile(req, buf); string(got) != string(want) {
		b.Fatalf("the guest answers\n%s\nnatively\n%s", want, got)
	}
	guestbench.Interleave(b, label, 1.5, req, func() { buf = Reconcile(req, buf) }, func() {
		if _, err := g.Call(req); err != nil {
			b.Fatal(err)
		}
	})
}
