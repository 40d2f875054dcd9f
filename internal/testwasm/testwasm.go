// Package testwasm builds guest modules from the repository's modules/ tree
// for host tests, so tests always run the current guest sources. Builds go
// through the Go build cache, so a module already built costs a link step,
// and through testshare, so the test processes of one `make test` link each
// guest once between them.
package testwasm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
)

var (
	mu    sync.Mutex
	built = map[string][]byte{}
	paths = map[string]string{}
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

// BuildVersion is Build with `-ldflags=-X main.Version=version`: the same
// module, a different build, for hot-reload tests.
func BuildVersion(tb testing.TB, pkg, version string) []byte {
	tb.Helper()
	b, err := build(pkg, "-ldflags=-X main.Version="+version)
	if err != nil {
		tb.Fatalf("building guest %s version %s: %v", pkg, version, err)
	}
	return b
}

// BuildLdflags is Build with `-ldflags=ldflags`, for builds that set
// variables with -X.
func BuildLdflags(tb testing.TB, pkg, ldflags string) []byte {
	tb.Helper()
	b, err := build(pkg, "-ldflags="+ldflags)
	if err != nil {
		tb.Fatalf("building guest %s with %s: %v", pkg, ldflags, err)
	}
	return b
}

// BuildFlags is Build with more `go build` flags, such as "-tags=eager" and
// "-ldflags=-X main.Version=2".
func BuildFlags(tb testing.TB, pkg string, flags ...string) []byte {
	tb.Helper()
	b, err := build(pkg, flags...)
	if err != nil {
		tb.Fatalf("building guest %s with %q: %v", pkg, flags, err)
	}
	return b
}

// BuildCommand builds pkg as a WASI command (`go build` without
// -buildmode=c-shared, as an author who forgets the flag would): the module
// exports _start instead of _initialize, and the host refuses it.
func BuildCommand(tb testing.TB, pkg string) []byte {
	tb.Helper()
	b, err := build(pkg, "-buildmode=default") // the last -buildmode wins
	if err != nil {
		tb.Fatalf("building guest %s as a command: %v", pkg, err)
	}
	return b
}

func fileName(pkg string, flags ...string) string {
	return strings.NewReplacer("/", "_", ".", "_", "=", "_", " ", "_", "-", "_").Replace(pkg+strings.Join(flags, "")) + ".wasm"
}

func outPath(pkg string, flags ...string) string {
	mu.Lock()
	defer mu.Unlock()
	return paths[pkg+" "+strings.Join(flags, " ")]
}

func build(pkg string, flags ...string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	key := pkg + " " + strings.Join(flags, " ")
	if b, ok := built[key]; ok {
		return b, nil
	}
	out, err := testshare.Build("guests", fileName(pkg, flags...), func(out string) error {
		args := append([]string{"build", "-buildmode=c-shared", "-o", out}, flags...)
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = filepath.Join(RepoRoot(), "modules")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return &buildError{err: err, output: string(msg)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	built[key] = b
	paths[key] = out
	return b, nil
}

type buildError struct {
	err    error
	output string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.output }

// BuildPath builds pkg like BuildFile and returns the path of the .wasm
// file, for callers with no testing.TB: TestMain and examples.
func BuildPath(pkg string) (string, error) {
	if _, err := build(pkg); err != nil {
		return "", err
	}
	return outPath(pkg), nil
}

// SpecRoot returns wazero's internal/integration_test/spectest directory in
// the module cache, for the wazero version in go.mod: the WebAssembly spec
// suite, as JSON commands and .wasm files per proposal.
func SpecRoot(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tetratelabs/wazero")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m github.com/tetratelabs/wazero: %v\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatalf("go list -m github.com/tetratelabs/wazero reported no directory (vendored or not downloaded?)")
	}
	root := filepath.Join(dir, "internal", "integration_test", "spectest")
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("wazero spec test suite not found: %v", err)
	}
	return root
}
