// Package testshare lets the test binaries of one `make test` share what is
// costly to make: built guests, the test compile worker and compiled code.
//
// go test runs every package as a process of its own, so an in-process
// cache is rebuilt by each of them. When WASMRECONCILE_TEST_SHARE names a
// directory (the Makefile sets it to bin/test-share and empties its builds
// at the start of every `make test`), Build makes each artifact once for all
// of the run's processes: the first to ask builds it under a file lock, the
// others wait for it and read the result. Without the variable, each
// process has a temporary directory of its own, as plain `go test` expects.
package testshare

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Env names the directory the test processes of one run share.
const Env = "WASMRECONCILE_TEST_SHARE"

var (
	mu      sync.Mutex
	private string
)

// Dir returns the directory sub of the shared directory (or, without Env,
// of this process's own temporary one), creating it.
func Dir(sub string) (string, error) {
	root := os.Getenv(Env)
	if root == "" {
		mu.Lock()
		defer mu.Unlock()
		if private == "" {
			d, err := os.MkdirTemp("", "wasmreconcile-test-")
			if err != nil {
				return "", err
			}
			private = d
		}
		root = private
	}
	dir := filepath.Join(root, sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("test share: %w", err)
	}
	return dir, nil
}

// Build returns the path of the file name in Dir(sub), calling build(path)
// to make it when no process of the run has yet. build must write path
// completely or fail; Build holds an exclusive lock on name+".lock" while
// it runs, so two processes never build the same file at once, and a file
// that exists was built whole (a failed build leaves none behind).
func Build(sub, name string, build func(path string) error) (string, error) {
	dir, err := Dir(sub)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("test share: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("test share: locking %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := build(tmp); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("test share: %w", err)
	}
	return path, nil
}

// GoBinary returns a build of the Go main package pkg (relative to the
// module root, such as "./cmd/operator") under name in Dir("bin"), built
// once per run: statically (CGO_ENABLED=0), without the test's -race or any
// other GOFLAGS, with ldflags and the build tags in tags (comma-separated;
// "runonly" for the operator's run build, as make image builds it). Every binary a test builds this way shares
// the compiled packages of `make operator`, which builds the same way.
func GoBinary(name, pkg, ldflags, tags string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	return Build("bin", name, func(out string) error {
		args := []string{"build", "-o", out}
		if ldflags != "" {
			args = append(args, "-ldflags="+ldflags)
		}
		if tags != "" {
			args = append(args, "-tags="+tags)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		env := []string{}
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "GOFLAGS=") && !strings.HasPrefix(e, "CGO_ENABLED=") {
				env = append(env, e)
			}
		}
		cmd.Env = append(env, "GOWORK=off", "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
		}
		return nil
	})
}

// CompilationCacheDir is the compilation cache (engine.Options'
// CompilationCacheDir) the tests share: wazero files compiled code under a
// key of the module's bytes and its own version, so a module compiled by
// one test, package or run answers every later load of the same bytes.
// Tests that measure compiling use a directory of their own.
//
// When CompiledEnv names a directory, that is the cache: make test points
// it outside the checkout, beside the control plane's binaries, so that a
// fresh clone starts with the code earlier runs compiled.
func CompilationCacheDir() (string, error) {
	if dir := os.Getenv(CompiledEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("%s=%s: %w", CompiledEnv, dir, err)
		}
		return dir, nil
	}
	return Dir("compiled")
}

// CompiledEnv names the environment variable that may hold the directory
// of CompilationCacheDir.
const CompiledEnv = "WASMRECONCILE_TEST_COMPILED"

// Cleanup removes this process's own temporary directory, if it made one
// (none when Env names a shared directory). Call it from TestMain after
// m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if private != "" {
		_ = os.RemoveAll(private)
		private = ""
	}
}
