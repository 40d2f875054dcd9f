package clusterscoped_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestShardRebalanceEvents: when a replica joins a shard group, the
// elected replica records a Rebalanced Event on every ReconcileModule,
// naming the members and the slots that moved.
func TestShardRebalanceEvents(t *testing.T) {
	e := optest.NewEnv(t)
	const slots = 16
	start := func(id string) *operator.Operator {
		mo := e.OperatorOptions()
		mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace = true, "rebalance-"+e.NS, e.NS
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = 4*time.Second, 3*time.Second, 250*time.Millisecond
		return optest.Start(t, e.Cfg, mo, operator.Options{
			ReconcileModules: true,
			Registerer:       prometheus.NewRegistry(),
			Sharding: operator.ShardingOptions{Enabled: true, Identity: id, Slots: slots, Group: "rebalance",
				LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond},
		})
	}
	a := start("op-a")
	testenv.Eventually(t, 2*time.Minute, "op-a to run every slot", func() error {
		if active, _ := optest.ShardActive(a); len(active) != slots {
			return fmt.Errorf("op-a runs %d slots", len(active))
		}
		return nil
	})
	// A module whose source is missing: it is not loaded, and still gets
	// the group's Events.
	rm := optest.CreateModule(t, e.C, "rebalance-"+fmt.Sprint(time.Now().UnixNano()%1e6),
		v1alpha1.Source{SHA256: strings.Repeat("0", 64), ConfigMap: &v1alpha1.KeyRef{Namespace: e.NS, Name: "absent"}})
	start("op-b")
	msg := optest.WaitModuleEvent(t, e.C, rm.UID, operator.ReasonRebalanced)
	for _, want := range []string{"shard group rebalance rebalanced", "op-a=", "op-b=", "slots moved"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Rebalanced Event %q does not say %q", msg, want)
		}
	}
}
