package source

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFetchFileAndURL covers the sources that need no cluster (the
// ConfigMap and Secret sources are covered against the real API server by
// the operator's TestReconcileModuleLifecycle): raw and gzip'd bytes, and every bad input
// with an error that says what to do.
func TestFetchFileAndURL(t *testing.T) {
	wasm := append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte{0}, 100)...)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/m.wasm.gz":
			_, _ = w.Write(gzipped(t, wasm))
		case "/slow":
			<-r.Context().Done() // until the client gives up
		case "/big.wasm":
			_, _ = w.Write(append(wasm, make([]byte, 2000)...))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	opts := Options{MaxBytes: 1500}
	for _, tc := range []struct {
		name    string
		source  Fetcher
		wantErr string
	}{
		{"raw file", File(write("raw.wasm", wasm), opts), ""},
		{"gzip'd file", File(write("gz.wasm", gzipped(t, wasm)), opts), ""},
		{"gzip'd url", URL(srv.Client(), srv.URL+"/m.wasm.gz", 0, opts), ""},
		{"missing file", File(filepath.Join(dir, "nope.wasm"), opts), "mount the volume"},
		{"neither wasm nor gzip", File(write("text.wasm", []byte("hello")), opts), "neither wasm nor gzip'd wasm"},
		{"corrupt gzip", File(write("bad.wasm", []byte{0x1f, 0x8b, 1, 2, 3}), opts), "gunzip"},
		{"too large", URL(srv.Client(), srv.URL+"/big.wasm", 0, opts), "larger than 1500 bytes"},
		{"too large file", File(write("big.wasm", append(wasm, make([]byte, 2000)...)), opts), "larger than 1500 bytes"},
		{"gzip bomb", File(write("bomb.wasm", gzipped(t, append(wasm, make([]byte, 1<<20)...))), opts), "gunzip: module is larger than 1500 bytes"},
		{"http error", URL(srv.Client(), srv.URL+"/missing", 0, opts), "HTTP 404"},
		{"http timeout", URL(srv.Client(), srv.URL+"/slow", time.Millisecond, opts), "deadline exceeded"},
		{"in memory", Bytes("test bytes", wasm), ""},
	} {
		got, err := tc.source.Fetch(context.Background())
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr == "" && !bytes.Equal(got, wasm):
			t.Errorf("%s: got %d bytes, want the module's %d", tc.name, len(got), len(wasm))
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
