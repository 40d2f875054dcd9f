package operator_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain shares one real kube-apiserver and etcd among the package's
// tests (optest.Main). Each test works in a namespace of its own with an
// operator that sees only that namespace, so they run in parallel; the
// tests that cannot are in the packages under internal/ (see optest).
func TestMain(m *testing.M) { os.Exit(optest.Main(m)) }
