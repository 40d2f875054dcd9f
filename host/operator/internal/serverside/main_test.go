package serverside_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against one real kube-apiserver, with
// the ShardedListAndWatch feature gate on, and etcd (optest.Main).
func TestMain(m *testing.M) {
	os.Exit(optest.Main(m, testenv.MainOptions{FeatureGates: []string{"ShardedListAndWatch=true"}}))
}
