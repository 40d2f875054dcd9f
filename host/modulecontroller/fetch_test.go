package modulecontroller

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
// TestReconcileModuleLifecycle): raw and gzip'd bytes, and every bad input
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
		case "/big.wasm":
			_, _ = w.Write(append(wasm, make([]byte, 2000)...))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := &Controller{opts: Options{MaxModuleBytes: 1500, HTTPClient: srv.Client()}.withDefaults()}
	spec := func(file, url string) Spec {
		var s Spec
		s.Source.File, s.Source.URL = file, url
		return s
	}
	for _, tc := range []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"raw file", spec(write("raw.wasm", wasm), ""), ""},
		{"gzip'd file", spec(write("gz.wasm", gzipped(t, wasm)), ""), ""},
		{"gzip'd url", spec("", srv.URL+"/m.wasm.gz"), ""},
		{"missing file", spec(filepath.Join(dir, "nope.wasm"), ""), "mount the volume"},
		{"neither wasm nor gzip", spec(write("text.wasm", []byte("hello")), ""), "neither wasm nor gzip'd wasm"},
		{"corrupt gzip", spec(write("bad.wasm", []byte{0x1f, 0x8b, 1, 2, 3}), ""), "gunzip"},
		{"too large", spec("", srv.URL+"/big.wasm"), "larger than 1500 bytes"},
		{"gzip bomb", spec(write("bomb.wasm", gzipped(t, append(wasm, make([]byte, 1<<20)...))), ""), "gunzip: module is larger than 1500 bytes"},
		{"http error", spec("", srv.URL+"/missing"), "HTTP 404"},
		{"no source", Spec{}, "no source set"},
	} {
		got, _, err := c.fetch(context.Background(), tc.spec)
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
