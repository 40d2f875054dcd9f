//go:build !runonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testregistry"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestPushPull pushes a built module to a real registry that requires a
// password (the CNCF distribution registry on loopback) and pulls it back,
// by tag and by digest.
func TestPushPull(t *testing.T) {
	reg, err := testregistry.Start(testregistry.Options{Username: "ci", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, reg.DockerConfigJSON("ci", "pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", filepath.Join(dir, "no-such-dir")) // no ambient credentials
	widget := testwasm.BuildFile(t, "./widget")
	want, err := os.ReadFile(widget)
	if err != nil {
		t.Fatal(err)
	}
	ref := "oci://" + reg.Host + "/modules/widget:v1"

	var out, errOut bytes.Buffer
	if err := run([]string{"push", widget, ref}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "wants credentials") {
		t.Fatalf("push without credentials: %v", err)
	}
	out.Reset()
	if err := run([]string{"push", "--registry-config", cfg, widget, ref}, &out, &errOut); err != nil {
		t.Fatalf("push: %v\n%s", err, errOut.String())
	}
	pinned := strings.TrimSpace(out.String())
	if !strings.HasPrefix(pinned, ref+"@sha256:") || len(pinned) != len(ref)+len("@sha256:")+64 {
		t.Fatalf("push printed %q, want %s@sha256:DIGEST", pinned, ref)
	}
	if !strings.Contains(errOut.String(), "pushed module widget") {
		t.Fatalf("push said %q", errOut.String())
	}

	for _, from := range []string{ref, pinned} {
		dest := filepath.Join(dir, "pulled.wasm")
		out.Reset()
		if err := run([]string{"pull", "--registry-config", cfg, "-o", dest, from}, &out, &errOut); err != nil {
			t.Fatalf("pull %s: %v\n%s", from, err, errOut.String())
		}
		if got := strings.TrimSpace(out.String()); got != pinned {
			t.Fatalf("pull %s printed %q, want %q", from, got, pinned)
		}
		got, err := os.ReadFile(dest)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("pull %s wrote %d bytes (%v), want the %d pushed", from, len(got), err, len(want))
		}
		os.Remove(dest)
	}

	// A wrong digest is refused, and nothing is written.
	wrong := "oci://" + reg.Host + "/modules/widget@sha256:" + strings.Repeat("0", 64)
	dest := filepath.Join(dir, "wrong.wasm")
	if err := run([]string{"pull", "--registry-config", cfg, "-o", dest, wrong}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "no such repository or digest") {
		t.Fatalf("pull of a wrong digest: %v", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a refused pull wrote %s", dest)
	}

	// What is not a reconcile module is refused before anything is sent.
	notModule := filepath.Join(dir, "not.wasm")
	if err := os.WriteFile(notModule, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"push", "--registry-config", cfg, notModule, "oci://" + reg.Host + "/modules/not:v1"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "push only a reconcile module") {
		t.Fatalf("push of a non-module: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", widget}, "want MODULE.wasm and oci://"},
		{[]string{"push", widget, reg.Host + "/modules/widget:v1"}, "not an oci:// reference"},
		{[]string{"push", widget, "oci://" + reg.Host + "/modules/widget"}, "names no tag"},
		{[]string{"pull"}, "want one reference"},
		{[]string{"pull", "oci://widget:v1"}, "names no registry"},
	} {
		if err := run(c.args, &out, &errOut); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}
