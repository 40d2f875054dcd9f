package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/modules/internal/guestbench"
)

// buildWasm builds this module for wasip1, as `make modules` does.
func buildWasm(b *testing.B) []byte {
	out := filepath.Join(b.TempDir(), "widget.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the guest: %v\n%s", err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return wasm
}

// BenchmarkGuestVsNative runs the same code, guest.Dispatch on the 2.4 KB
// Widget request (decode, reconcile, encode), natively and compiled to
// wasm under wazero's compiler, interleaved call by call in one process,
// and reports the ratio against issue 13's goal of at most 5x. The guest
// runs unmetered here; the engine's metering adds 4-8% on top
// (BenchmarkMeteringJSONReconcile in host/engine).
func BenchmarkGuestVsNative(b *testing.B) {
	req := benchRequest()
	g, err := guestbench.NewGuest(context.Background(), buildWasm(b))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	got, err := g.Call(req)
	if err != nil {
		b.Fatal(err)
	}
	if want := guest.Dispatch(req); !bytes.Equal(got, want) {
		b.Fatalf("the guest answers\n%s\nnatively\n%s", got, want)
	}
	guest.TakeLogs()
	guestbench.Interleave(b, "Go", 5, req, func() {
		if len(guest.Dispatch(req)) == 0 {
			b.Fatal("empty response")
		}
		// Natively, the SDK keeps log lines for unit tests: drop them,
		// as the host does per call.
		guest.TakeLogs()
	}, func() {
		if _, err := g.Call(req); err != nil {
			b.Fatal(err)
		}
	})
}
