// Command worker is a compile worker for tests (package testworker): the
// host's tests run under -race, and a race-enabled binary cannot run as a
// compile worker (ThreadSanitizer maps its shadow memory at start, past
// any data limit worth setting). This one is built without -race.
package main

import (
	"fmt"
	"os"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

func main() {
	engine.MaybeRunCompileWorker()
	fmt.Fprintln(os.Stderr, "worker: not started as a compile worker; set", engine.CompileWorkerEnv)
	os.Exit(2)
}
