package sdkarchive

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// tree writes files (path: content) under a new directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestArchiveCarriesWhatAModuleBuildsOn(t *testing.T) {
	root := tree(t, map[string]string{
		"go.mod":                 "module x\n",
		"guest.go":               "package guest\n",
		"guest_test.go":          "package guest\n",
		"k8s/core.go":            "package k8s\n",
		"k8s/testdata/fixture":   "x",
		"internal/f/testdata/fz": "x",
		"rust/src/lib.rs":        "// rust\n",
		"rust/target/big.rlib":   "built",
		".git/config":            "x",
		"_scratch/x.go":          "x",
	})
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"go.mod", "guest.go", "k8s/core.go", "rust/src/lib.rs"}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("Files = %v, want %v", files, want)
	}

	var a, b bytes.Buffer
	if err := Pack(&a, root); err != nil {
		t.Fatal(err)
	}
	// The same tree gives the same bytes, whatever the files' times.
	later := filepath.Join(root, "guest.go")
	if err := os.Chtimes(later, time.Unix(1e9, 0), time.Unix(1e9, 0)); err != nil {
		t.Fatal(err)
	}
	if err := Pack(&b, root); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || Digest(a.Bytes()) != Digest(b.Bytes()) {
		t.Error("two archives of one tree differ")
	}

	out := filepath.Join(t.TempDir(), "sdk")
	if err := Extract(a.Bytes(), out); err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		got, err := os.ReadFile(filepath.Join(out, f))
		orig, _ := os.ReadFile(filepath.Join(root, f))
		if err != nil || !bytes.Equal(got, orig) {
			t.Errorf("extracted %s = %q, %v; want %q", f, got, err, orig)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "guest_test.go")); err == nil {
		t.Error("a test file was extracted")
	}
}

func TestPackRefusesWhatIsNotTheSDK(t *testing.T) {
	err := Pack(&bytes.Buffer{}, tree(t, map[string]string{"a.go": "package a\n"}))
	if err == nil || !strings.Contains(err.Error(), "is not the guest SDK") {
		t.Errorf("Pack on a tree without go.mod: %v", err)
	}
}

func TestExtractRefusesEntriesOutsideItsRoot(t *testing.T) {
	for _, name := range []string{"../escape", "/etc/passwd", "a/../../b", `a\..\b`, "./a"} {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create(name)
		w.Write([]byte("x"))
		zw.Close()
		root := t.TempDir()
		dir := filepath.Join(root, "sdk")
		err := Extract(buf.Bytes(), dir)
		if err == nil || !strings.Contains(err.Error(), "outside its root") {
			t.Errorf("Extract of entry %q: %v, want a refusal", name, err)
		}
		if _, err := os.Stat(filepath.Join(root, "escape")); err == nil {
			t.Errorf("entry %q was written outside the directory", name)
		}
	}
	if err := Extract([]byte("not a zip"), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a zip") {
		t.Errorf("Extract of garbage: %v", err)
	}
}

func TestExtractRefusesABomb(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("big")
	w.Write(bytes.Repeat([]byte{0}, maxFileBytes+1))
	zw.Close()
	if buf.Len() > 100<<10 {
		t.Fatalf("the bomb is %d bytes compressed", buf.Len())
	}
	if err := Extract(buf.Bytes(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("Extract of a %d-byte file: %v, want a refusal", maxFileBytes+1, err)
	}
}
