package clientside_test

import (
	"os"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestMain runs the package's tests against one real kube-apiserver (its
// default feature gates: no sharded lists) with the audit log the chaos
// test checks, and etcd (optest.Main).
func TestMain(m *testing.M) {
	os.Exit(optest.Main(m, testenv.MainOptions{AuditPolicy: optest.ChaosAuditPolicy}))
}

// TestChaos is optest.Chaos in the client-side mode.
func TestChaos(t *testing.T) {
	optest.Chaos(t, optest.NewEnv(t), testenv.Shared(t).AuditLog(), operator.ShardModeClientSide, shard.ByNamespace)
}

// TestChaosByUID is optest.Chaos with --shard-key=uid, which runs
// client-side whatever the API server offers: each Widget is placed, moves
// and is audited by its own uid, so the Widgets of one namespace spread
// over the replicas.
func TestChaosByUID(t *testing.T) {
	optest.Chaos(t, optest.NewEnv(t), testenv.Shared(t).AuditLog(), operator.ShardModeClientSide, shard.ByUID)
}
