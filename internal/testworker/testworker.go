// Package testworker builds a compile worker for tests: the host's tests
// run under -race, whose binaries cannot run as compile workers under the
// workers' data limit, so a test's engine.SelfCompileWorker runs this
// non-race build instead (engine.CompileWorkerPathEnv). The worker is the
// same module's code, so it compiles with the same wazero, and the
// compilation cache answers the test's engine.
package testworker

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
)

var (
	once sync.Once
	path string
	err  error
)

// Build builds the worker once per process (once per `make test`, through
// testshare) and returns its path.
func Build() (string, error) {
	once.Do(func() {
		// The worker must file its code in the compilation cache under the
		// test binary's wazero version, which a test binary, having no
		// module information, reports as "dev".
		path, err = testshare.GoBinary("compile-worker-"+engine.WazeroVersion(), "./internal/testworker/worker",
			"-X github.com/tetratelabs/wazero/internal/version.version="+engine.WazeroVersion(), "")
	})
	return path, err
}

// Use builds the worker and sets engine.CompileWorkerPathEnv to it, so that
// engine.SelfCompileWorker starts it. Call it from TestMain.
func Use() error {
	p, err := Build()
	if err != nil {
		return err
	}
	return os.Setenv(engine.CompileWorkerPathEnv, p)
}

// Environ is this process's environment without the variable Use sets:
// for the operator binaries a test starts, which run themselves as their
// compile workers.
func Environ() []string {
	var out []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, engine.CompileWorkerPathEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}

// With is w with its Command set to this process's compile worker
// (engine.SelfCompileWorker; TestMain calls Use and
// engine.MaybeRunCompileWorker): a worker with the test's own limits. It
// fails the test when no worker can be found.
func With(t testing.TB, w engine.CompileWorker) *engine.CompileWorker {
	t.Helper()
	self, err := engine.SelfCompileWorker()
	if err != nil {
		t.Fatal(err)
	}
	w.Command = self.Command
	return &w
}
