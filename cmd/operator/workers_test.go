//go:build !runonly

package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// TestMain gives the operators a test runs in process (run, dev) a compile
// worker: engine.SelfCompileWorker would start this test binary, which may
// be -race and cannot run under a worker's data limit, so a build of the
// worker of its own (testworker) runs instead.
func TestMain(m *testing.M) {
	if err := testworker.Use(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var err error
	if compiled, err = testshare.CompilationCacheDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// compiled is the compilation cache of the in-process runs of invoke, test
// and replay (testshare): each guest is compiled once for every test.
var compiled string
