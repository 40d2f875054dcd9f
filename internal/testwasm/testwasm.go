// Package testwasm builds guest modules from the repository's modules/ tree
// for host tests, so tests always run the current guest sources. Builds go
// through the Go build cache, so a module already built costs a link step.
package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	built  = map[string][]byte{}
	outDir string
)

// RepoRoot is the root of the wasmreconcile checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build compiles the Go package pkg of the modules/ module (e.g. "./widget" or
// "./internal/testguests/misbehave") to a wasip1 reactor and returns its bytes.
// It fails the test if the build fails.
func Build(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := build(pkg)
	if err != nil {
		tb.Fatalf("building guest %s: %v", pkg, err)
	}
	return b
}

// BuildFile is Build, returning the path of the built .wasm file instead.
func BuildFile(tb testing.TB, pkg string) string {
	tb.Helper()
	if _, err := build(pkg); err != nil {
		tb.Fatalf("building guest %s: %v", pkg, err)
	}
	return outPath(pkg)
}

func outPath(pkg string) string {
	return filepath.Join(outDir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg)+".wasm")
}

func build(pkg string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	if outDir == "" {
		d, err := os.MkdirTemp("", "wasmreconcile-testwasm-")
		if err != nil {
			return nil, err
		}
		outDir = d
	}
	out := outPath(pkg)
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = filepath.Join(RepoRoot(), "modules")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, &buildError{err: err, output: string(msg)}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	built[pkg] = b
	return b, nil
}

type buildError struct {
	err    error
	output string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.output }
