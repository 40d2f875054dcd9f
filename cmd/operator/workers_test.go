//go:build !runonly

package main

import (
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"

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
	// The process's controller-runtime logger, set before any test runs:
	// only the first ctrl.SetLogger of a process takes effect, and
	// controller-runtime sets a null one itself when something logs 30 s
	// after the process started with none set (a slow first test under
	// load), after which operator dev's logs, which TestDev reads, would
	// go nowhere.
	ctrl.SetLogger((&logFlags{}).logger(devLog))
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// compiled is the compilation cache of the in-process runs of invoke, test
// and replay (testshare): each guest is compiled once for every test.
var compiled string
