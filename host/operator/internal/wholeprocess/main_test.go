package wholeprocess_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against the run's shared control
// plane, or one of its own when there is none (optest.Main).
func TestMain(m *testing.M) { os.Exit(optest.Main(m, testenv.MainOptions{})) }
