package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rewriteFiles lists the cached rewrites under the compilation cache dir.
func rewriteFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, rewritesDir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, filepath.Join(dir, rewritesDir, e.Name()))
	}
	return names
}

// loadName loads wasm on a new interpreter engine over the cache dir and
// returns the name its manifest gives.
func loadName(t *testing.T, dir string, wasm []byte, l Limits) string {
	t.Helper()
	ctx := context.Background()
	e, err := New(Options{CompilationCacheDir: dir, Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, "m", wasm, l)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	return m.Name()
}

// TestRewritesAreCachedBesideTheCode proves that a load reads the rewrite
// back instead of instrumenting again: a cached file is what runs, a damaged
// one is replaced by a fresh rewrite, other limits use another file, and
// refused bytes leave none.
func TestRewritesAreCachedBesideTheCode(t *testing.T) {
	t.Parallel()
	echo, grow := readTestdata(t, "echo.wasm"), readTestdata(t, "grow.wasm")
	dir := t.TempDir()

	if got := loadName(t, dir, echo, Limits{}); got != "echo" {
		t.Fatalf("first load: manifest name %q, want echo", got)
	}
	files := rewriteFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("after one load: %d cached rewrites %v, want 1", len(files), files)
	}
	echoEntry, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}

	// The rewrite of another module, intact, under echo's name: what loads
	// is what the cache holds, so the input was not instrumented again.
	other := t.TempDir()
	if got := loadName(t, other, grow, Limits{}); got != "grow" {
		t.Fatalf("grow: manifest name %q", got)
	}
	growEntry, err := os.ReadFile(rewriteFiles(t, other)[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], growEntry, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := loadName(t, dir, echo, Limits{}); got != "grow" {
		t.Fatalf("with grow's rewrite cached under echo's key: manifest name %q, want grow (the cache was not read)", got)
	}

	// A damaged entry is not trusted: echo is instrumented again and its
	// entry written back whole.
	damaged := append([]byte(nil), growEntry...)
	damaged[len(damaged)-1] ^= 0xff
	if err := os.WriteFile(files[0], damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := loadName(t, dir, echo, Limits{}); got != "echo" {
		t.Fatalf("with a damaged entry: manifest name %q, want echo", got)
	}
	if b, err := os.ReadFile(files[0]); err != nil || string(b) != string(echoEntry) {
		t.Fatalf("the damaged entry was not replaced by echo's rewrite (err %v, %d bytes, want %d)", err, len(b), len(echoEntry))
	}

	// Limits the instrumenter reads name another entry.
	if got := loadName(t, dir, echo, Limits{MaxCallDepth: 500}); got != "echo" {
		t.Fatalf("MaxCallDepth 500: manifest name %q", got)
	}
	if n := len(rewriteFiles(t, dir)); n != 2 {
		t.Fatalf("after a load with another call depth: %d cached rewrites, want 2", n)
	}

	// Bytes the engine refuses are never cached.
	bad := t.TempDir()
	e, err := New(Options{CompilationCacheDir: bad, Interpreter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if _, err := e.Load(context.Background(), "bad", append([]byte("\x00asm\x01\x00\x00\x00"), 0x01, 0x7f), Limits{}); err == nil ||
		!strings.Contains(err.Error(), "not a valid WebAssembly module") {
		t.Fatalf("Load(garbage) = %v, want not a valid WebAssembly module", err)
	}
	if files := rewriteFiles(t, bad); len(files) != 0 {
		t.Fatalf("refused bytes left cached rewrites: %v", files)
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
