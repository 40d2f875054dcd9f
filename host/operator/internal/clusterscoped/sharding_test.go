package clusterscoped_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestShardRebalanceEvents: when a replica joins a shard group, the
// elected replica records a Rebalanced Event on every ReconcileModule,
// naming the members and the slots that moved.
func TestShardRebalanceEvents(t *testing.T) {
	e := optest.NewEnv(t)
	const slots = 16
	start := func(id string) *operator.Operator {
		mo := e.OperatorOptions()
		sharding := optest.Sharded(e, &mo, "rebalance", id, slots)
		return optest.Start(t, e.Cfg, mo, operator.Options{
			ReconcileModules: true,
			Registerer:       prometheus.NewRegistry(),
			Sharding:         sharding,
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

// TestShardedShadowCountsAddUp: two sharded replicas each shadow the
// candidate on their own share of the Widgets; the elected one's status
// of the ReconcileModule counts both replicas' agreements (each publishes
// its counts in its shard Lease), not its own alone.
func TestShardedShadowCountsAddUp(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	const slots = 16
	a := optest.ShardPair(t, slots)
	namespaces, owned := optest.ShardNamespaces(t, e, a, "s", 1)
	mine := map[string]string{"op-a": owned["op-a"][0], "op-b": owned["op-b"][0]}
	regs := map[string]*prometheus.Registry{}
	for _, id := range []string{"op-a", "op-b"} {
		mo := e.OperatorOptions()
		mo.Namespaces = append([]string{e.NS}, namespaces...)
		sharding := optest.Sharded(e, &mo, "counts", id, slots)
		regs[id] = prometheus.NewRegistry()
		optest.Start(t, e.Cfg, mo, operator.Options{
			ReconcileModules: true,
			Registerer:       regs[id],
			ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond},
			Sharding:         sharding,
		})
	}
	dir := t.TempDir()
	src := func(b []byte, file string) v1alpha1.Source {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return v1alpha1.Source{SHA256: supervisor.Digest(b), File: p}
	}
	v1 := testwasm.BuildVersion(t, "./widget", "1")
	same := testwasm.BuildFlags(t, "./widget", "-tags=eager", "-ldflags=-X main.Version=1")
	const name = "widget" // its manifest's name
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ReconcileModuleSpec{
		Source: src(v1, "v1.wasm"), Candidate: &v1alpha1.Candidate{Source: src(same, "same.wasm")},
	}}
	if err := e.C.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.C.Delete(context.Background(), rm); err != nil {
			t.Error(err)
			return
		}
		testenv.Eventually(t, time.Minute, "ReconcileModule widget gone", func() error {
			if err := e.C.Get(context.Background(), client.ObjectKeyFromObject(rm), &v1alpha1.ReconcileModule{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
	})
	optest.ModuleCondition(t, e.C, name, "Ready", metav1.ConditionTrue, "Loaded")
	optest.WaitModule(t, e.C, name, "the candidate running", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; r == nil || r.Candidate == nil || r.Candidate.Digest != supervisor.Digest(same) {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	for _, id := range []string{"op-a", "op-b"} {
		for i := range 2 {
			if err := e.C.Create(ctx, optest.Widget(mine[id], fmt.Sprintf("w%d", i), int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	agree := func(id string) float64 {
		return optest.Gather(t, regs[id], "wasmreconcile_shadow_comparisons_total", map[string]string{"module": name, "result": "agree"})
	}
	// Each replica installs the candidate when it loads the module, at its
	// own pace: a replica that has not compared yet gets its Widget
	// changed again.
	size := int64(3)
	testenv.Eventually(t, 2*time.Minute, "both replicas to shadow their share", func() error {
		var missing []string
		for _, id := range []string{"op-a", "op-b"} {
			if agree(id) == 0 {
				missing = append(missing, id)
				size++
				resize(t, e.C, mine[id], "w0", size)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no agreement counted by %v yet", missing)
		}
		return nil
	})
	optest.WaitModule(t, e.C, name, "status to count both replicas' agreements", func(rm *v1alpha1.ReconcileModule) error {
		sum := agree("op-a") + agree("op-b")
		if r := rm.Status.Rollout; r == nil || r.Candidate == nil || float64(r.Candidate.Agreements) != sum {
			return fmt.Errorf("rollout %+v; the replicas counted %v agreements", rm.Status.Rollout, sum)
		}
		return nil
	})
}
