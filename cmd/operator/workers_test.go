package main

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// TestMain makes the test binary a compile worker when operator run or dev,
// run in process by a test, starts one (engine.SelfCompileWorker re-runs
// the executable), as main does for the operator binary.
func TestMain(m *testing.M) {
	engine.MaybeRunCompileWorker()
	os.Exit(m.Run())
}
