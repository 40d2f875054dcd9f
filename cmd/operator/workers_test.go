package main

import (
	"fmt"
	"os"
	"testing"

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
	os.Exit(m.Run())
}
