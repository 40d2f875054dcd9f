package clusterhardening_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against one real kube-apiserver and
// etcd of its own (optest.Main): cluster-scoped objects every operator
// watching ReconcileModules would see.
func TestMain(m *testing.M) { os.Exit(optest.Main(m, testenv.MainOptions{OwnControlPlane: true})) }
