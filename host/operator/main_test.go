package operator_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against the run's shared control
// plane, or one of its own when there is none (optest.Main). Each test
// works in a namespace of its own with an operator that sees only that
// namespace, so they run in parallel; the tests that cannot are in the
// packages under internal/ (see optest). The embedding Example needs a
// cluster even under -short (ForExamples).
func TestMain(m *testing.M) { os.Exit(optest.Main(m, testenv.MainOptions{ForExamples: true})) }
