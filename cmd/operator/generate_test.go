//go:build !runonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerateWritesAndChecksDecoders(t *testing.T) {
	dir := t.TempDir()
	types := filepath.Join(dir, "types.go")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(types, []byte("package v1\n\n"+src+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gen := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runGenerate(args, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	write("type ShopSpec struct {\n\tMessage string `json:\"message\"`\n}")
	if _, err := gen("--check", dir); err == nil || !strings.Contains(err.Error(), "missing or out of date") {
		t.Errorf("--check before any generate: %v, want it to fail", err)
	}
	if out, err := gen(dir); err != nil || !strings.Contains(out, "zz_generated.decode.go: written") {
		t.Fatalf("generate: %v\n%s", err, out)
	}
	src, _ := os.ReadFile(filepath.Join(dir, "zz_generated.decode.go"))
	if !strings.Contains(string(src), "func DecodeShopSpec(v any, path string) (ShopSpec, error)") || !strings.Contains(string(src), `m["message"]`) {
		t.Errorf("generated:\n%s", src)
	}
	if out, err := gen("--check", dir); err != nil || !strings.Contains(out, "up to date") {
		t.Errorf("--check after generate: %v\n%s", err, out)
	}
	write("type ShopSpec struct {\n\tMessage string `json:\"message\"`\n\tPort int32 `json:\"port\"`\n}")
	if _, err := gen("--check", dir); err == nil || !strings.Contains(err.Error(), "zz_generated.decode.go") {
		t.Errorf("--check after the types changed: %v, want it to name the stale file", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "zz_generated.decode.go"))
	if !bytes.Equal(after, src) {
		t.Error("--check wrote the file")
	}
	write("type ShopSpec struct {\n\tPort uint16\n}")
	if _, err := gen(dir); err == nil || !strings.Contains(err.Error(), "field Port has type uint16") {
		t.Errorf("generate on an undecodable type: %v", err)
	}
	if _, err := gen(); err == nil || !strings.Contains(err.Error(), "want one or more package directories") {
		t.Errorf("generate with no directory: %v", err)
	}
}
