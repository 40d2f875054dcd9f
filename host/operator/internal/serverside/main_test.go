package serverside_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against one real kube-apiserver, with
// the ShardedListAndWatch feature gate on and the audit log the chaos test
// checks, and etcd (optest.Main).
func TestMain(m *testing.M) {
	os.Exit(optest.Main(m, testenv.MainOptions{FeatureGates: []string{"ShardedListAndWatch=true"}, AuditPolicy: optest.ChaosAuditPolicy}))
}

// TestChaos is optest.Chaos in the server-side mode.
func TestChaos(t *testing.T) {
	optest.Chaos(t, optest.NewEnv(t), testenv.Shared(t).AuditLog(), operator.ShardModeServerSide, shard.ByNamespace)
}
