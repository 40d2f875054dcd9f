package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file holds the new bytes with mode 0644, and neither a
// success nor a failure leaves a temporary file in the directory.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(dest, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(dest, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dest); err != nil || string(b) != "new" {
		t.Fatalf("content %q, %v", b, err)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if err := Write(filepath.Join(dir, "no-such-dir", "x"), []byte("x")); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want only the file", len(entries))
	}
}
