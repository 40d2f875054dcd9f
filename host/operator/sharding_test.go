package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestShardedReplicasSplitTheWork: two operators with sharding (and
// leader election, as it requires) split the slots between them, each
// working on a disjoint half that covers every slot, and Widgets in
// namespaces of both halves all converge, each operator reconciling some.
func TestShardedReplicasSplitTheWork(t *testing.T) {
	t.Parallel()
	e := optest.NewEnv(t)
	const slots = 16
	a := optest.ShardPair(t, slots)
	// Namespaces until each operator owns two.
	namespaces, _ := optest.ShardNamespaces(t, e, a, "s", 2)
	module := testwasm.BuildFile(t, "./widget")
	regs := map[string]*prometheus.Registry{}
	ops := map[string]*operator.Operator{}
	for _, id := range []string{"op-a", "op-b"} {
		if id == "op-b" {
			// op-a first runs every slot alone, so that op-b's slots move.
			testenv.Eventually(t, 2*time.Minute, "op-a to run every slot", func() error {
				if active, _ := optest.ShardActive(ops["op-a"]); len(active) != slots {
					return fmt.Errorf("op-a runs %d slots", len(active))
				}
				return nil
			})
		}
		mo := e.OperatorOptions()
		mo.Namespaces = append([]string{e.NS}, namespaces...)
		sharding := optest.Sharded(e, &mo, "sharded", id, slots)
		regs[id] = prometheus.NewRegistry()
		ops[id] = optest.Start(t, e.Cfg, mo, operator.Options{
			Modules:    []string{module},
			Registerer: regs[id],
			Sharding:   sharding,
		})
	}
	admitted := optest.NewSeen(optest.ByNamespace)
	for id, op := range ops {
		optest.ShardAdmitted(op, admitted.Hook(id))
	}
	testenv.Eventually(t, 2*time.Minute, "the operators to split the slots", func() error {
		var all []int
		for id, op := range ops {
			active, ok := optest.ShardActive(op)
			if !ok {
				return fmt.Errorf("%s does not shard", id)
			}
			for _, s := range active {
				if owner := a.Owner(s); owner != id {
					return fmt.Errorf("%s works on slot %d, which is %s's", id, s, owner)
				}
			}
			all = append(all, active...)
		}
		slices.Sort(all)
		if len(all) != slots || len(slices.Compact(all)) != slots {
			return fmt.Errorf("slots worked on: %v", all)
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "both operators to be ready", func() error {
		for id, op := range ops {
			if err := op.Ready(); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
	for _, ns := range namespaces {
		for i := range 2 {
			if err := e.C.Create(context.Background(), optest.Widget(ns, fmt.Sprintf("w%d", i), int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ns := range namespaces {
		for i := range 2 {
			testenv.Eventually(t, 2*time.Minute, "every Widget to converge", func() error {
				w := &unstructured.Unstructured{}
				w.SetGroupVersionKind(optest.Widget(ns, "", 0).GroupVersionKind())
				if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("w%d", i)}, w); err != nil {
					return err
				}
				if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == "" {
					return fmt.Errorf("%s/w%d has no summary", ns, i)
				}
				return nil
			})
		}
	}
	// Membership did not change after the split: each namespace's Widgets
	// were reconciled by its owner alone.
	for _, ns := range namespaces {
		if got, want := admitted.In(ns), a.OwnerOf(shard.ByNamespace, ns); len(got) != 1 || !got[want] {
			t.Errorf("%s, %s's: reconciled by %v", ns, want, got)
		}
	}
	slotsSeen := 0.0
	for id, reg := range regs {
		if n := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"}); n == 0 {
			t.Errorf("%s reconciled nothing", id)
		}
		if n := optest.Gather(t, reg, "wasmreconcile_shard_members", nil); n != 2 {
			t.Errorf("%s: wasmreconcile_shard_members %v, want 2", id, n)
		}
		slotsSeen += optest.Gather(t, reg, "wasmreconcile_shard_slots", nil)
	}
	if slotsSeen != slots {
		t.Errorf("wasmreconcile_shard_slots sum to %v, want %d", slotsSeen, slots)
	}
	// op-a gave op-b its slots when it joined, and op-b timed each handover.
	if moves, want := optest.Gather(t, regs["op-a"], "wasmreconcile_shard_slot_moves_total", nil), len(a.Owned("op-b")); moves != float64(want) {
		t.Errorf("op-a counted %v slot moves, want op-b's %d", moves, want)
	}
	if n, want := optest.Gather(t, regs["op-b"], "wasmreconcile_shard_handover_seconds", nil), len(a.Owned("op-b")); n != float64(want) {
		t.Errorf("op-b timed %v handovers, want %d", n, want)
	}
}

// TestShardedByUIDSplitsOneNamespace: with ShardingOptions.Key "uid", two
// operators split the Widgets of one namespace, which sharding by
// namespace would give to one of them: each Widget is reconciled by the
// owner of its uid's slot alone, both operators reconcile some, and the
// mode is client-side whatever the API server offers, saying why. The
// other operator drops each Widget's events before its queue (Admits):
// its gate never has to refuse a reconcile of one.
func TestShardedByUIDSplitsOneNamespace(t *testing.T) {
	t.Parallel()
	e := optest.NewEnv(t)
	const slots = 16
	a := optest.ShardPair(t, slots)
	ops, admitted, refused := byUIDPair(t, e, "by-uid", slots, operator.Options{Modules: []string{testwasm.BuildFile(t, "./widget")}})
	waitSplit(t, ops, a, slots)
	for id, op := range ops {
		if r := optest.ShardReport(op); !strings.Contains(r, "client-side (sharding by uid") {
			t.Errorf("%s: /readyz/modules says %q, want the client-side mode and why", id, r)
		}
	}
	// Widgets in the one namespace until each operator owns two by uid.
	owners := map[string]string{} // Widget name -> the owner of its uid
	count := map[string]int{}
	for i := 0; count["op-a"] < 2 || count["op-b"] < 2; i++ {
		if i > 64 {
			t.Fatalf("64 Widgets do not give each operator two: %v", count)
		}
		w := optest.Widget(e.NS, fmt.Sprintf("u%d", i), int64(i%5+1))
		if err := e.C.Create(context.Background(), w); err != nil {
			t.Fatal(err)
		}
		owner := a.OwnerOf(shard.ByUID, string(w.GetUID()))
		owners[w.GetName()] = owner
		count[owner]++
	}
	for name := range owners {
		testenv.Eventually(t, 2*time.Minute, "every Widget to converge", func() error {
			w := &unstructured.Unstructured{}
			w.SetGroupVersionKind(optest.Widget(e.NS, "", 0).GroupVersionKind())
			if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: e.NS, Name: name}, w); err != nil {
				return err
			}
			if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == "" {
				return fmt.Errorf("%s has no summary", name)
			}
			return nil
		})
	}
	for name, owner := range owners {
		if got := admitted.In(name); len(got) != 1 || !got[owner] {
			t.Errorf("%s, %s's by uid: reconciled by %v", name, owner, got)
		}
		// Created after the slots settled, so no handover refuses it: a
		// refusal means the other operator queued it.
		if got := refused.In(name); len(got) != 0 {
			t.Errorf("%s, %s's by uid: queued and refused at the gate by %v, not dropped before the queue", name, owner, got)
		}
	}
}

// TestShardedByUIDOwnedChildren: the events of owned children are placed
// by their controller owner's uid (Admits), so the operator that does not
// own a WebApp drops its children's events before its queue, as it drops
// the WebApp's own: its gate never refuses a reconcile of a WebApp whose
// children it saw created and changed. Each operator runs one worker, so
// that its own WebApp's reconcile, after a change of the other's child
// that came first on the same watch, proves that change was handled.
func TestShardedByUIDOwnedChildren(t *testing.T) {
	t.Parallel()
	e := optest.NewEnv(t)
	ctx := context.Background()
	const slots = 16
	a := optest.ShardPair(t, slots)
	ops, admitted, refused := byUIDPair(t, e, "children-by-uid", slots, operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./webapp")},
		Policy:  policy.Policy{MaxConcurrentReconciles: 1},
	})
	// Split as the pair's assignment says, not merely covered: the first
	// operator up works on every slot until the second joins, and a WebApp
	// created then would be queued by the one that hands it over.
	waitSplit(t, ops, a, slots)
	// A WebApp for each operator, by uid, in the one namespace.
	apps := map[string]string{} // operator -> the WebApp whose uid it owns
	for i := 0; len(apps) < 2; i++ {
		if i > 64 {
			t.Fatalf("64 WebApps do not give each operator one: %v", apps)
		}
		app := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
			"metadata": map[string]any{"name": fmt.Sprintf("app%d", i), "namespace": e.NS},
			"spec":     map[string]any{"image": "nginx:1.27"},
		}}
		if err := e.C.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		owner := a.OwnerOf(shard.ByUID, string(app.GetUID()))
		if _, ok := apps[owner]; !ok {
			apps[owner] = app.GetName()
		} else if err := e.C.Delete(ctx, app); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range apps {
		testenv.Eventually(t, 3*time.Minute, "the WebApps' children", func() error {
			if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: name}, &corev1.Service{}); err != nil {
				return err
			}
			return e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: name + "-config"}, &corev1.ConfigMap{})
		})
	}
	touch := func(name string, n int) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := &corev1.ConfigMap{}
			if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: name + "-config"}, cm); err != nil {
				return err
			}
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["test-touch"] = fmt.Sprint(n)
			return e.C.Update(ctx, cm)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for n, id := range []string{"op-a", "op-b"} {
		other := "op-b"
		if id == other {
			other = "op-a"
		}
		// The other's child changes, then this operator's own: once this
		// operator reconciled its own WebApp again, its one worker has
		// taken whatever the first change queued.
		admitted.Clear()
		touch(apps[other], n)
		touch(apps[id], n)
		testenv.Eventually(t, 2*time.Minute, id+" to reconcile its WebApp after its child changed", func() error {
			if !admitted.In(apps[id])[id] {
				return fmt.Errorf("%s not reconciled by %s yet", apps[id], id)
			}
			return nil
		})
	}
	for id, name := range apps {
		if got := refused.In(name); len(got) != 0 {
			t.Errorf("%s, %s's by uid: queued and refused at the gate by %v, not dropped before the queue", name, id, got)
		}
	}
}

// waitSplit waits until ops work on the slots as a assigns them: each on
// its own, and every slot by one.
func waitSplit(t *testing.T, ops map[string]*operator.Operator, a shard.Assignment, slots int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "the operators to split the slots", func() error {
		n := 0
		for id, op := range ops {
			active, _ := optest.ShardActive(op)
			for _, s := range active {
				if owner := a.Owner(s); owner != id {
					return fmt.Errorf("%s works on slot %d, which is %s's", id, s, owner)
				}
			}
			n += len(active)
		}
		if n != slots {
			return fmt.Errorf("%d slots worked on", n)
		}
		return nil
	})
}

// byUIDPair starts operators op-a and op-b, each with opts, sharding by uid
// in group over slots (optest.ShardPair's assignment), and returns them
// with what their gates admitted and refused, by object name.
func byUIDPair(t *testing.T, e optest.Env, group string, slots int, opts operator.Options) (map[string]*operator.Operator, *optest.Seen, *optest.Seen) {
	t.Helper()
	ops := map[string]*operator.Operator{}
	admitted, refused := optest.NewSeen(optest.ByName), optest.NewSeen(optest.ByName)
	for _, id := range []string{"op-a", "op-b"} {
		mo := e.OperatorOptions()
		o := opts
		o.Sharding = optest.Sharded(e, &mo, group, id, slots)
		o.Sharding.Key = "uid"
		o.Registerer = prometheus.NewRegistry()
		ops[id] = optest.Start(t, e.Cfg, mo, o)
		optest.ShardAdmitted(ops[id], admitted.Hook(id))
		optest.ShardRefused(ops[id], refused.Hook(id))
	}
	return ops, admitted, refused
}

// TestShardsBalanceByLoad: two replicas whose rendezvous owners give op-a
// six times op-b's Widgets balance them by load: the elected replica
// moves slots of op-a's to op-b until neither holds more than the mean by
// the tolerance, both follow the plan (the slots worked on are disjoint
// and cover every slot), and a Widget of a namespace that moved is
// reconciled by op-b afterwards; restarted with no balancing of their
// own, both follow the plan their Leases kept. It fails when no plan is
// made (with BalanceTolerance negative).
func TestShardsBalanceByLoad(t *testing.T) {
	t.Parallel()
	e := optest.NewEnv(t)
	const slots = 16
	a := optest.ShardPair(t, slots)
	namespaces, all := optest.ShardNamespaces(t, e, a, "l", 4)
	// Two namespaces of each, in slots of their own: 6 Widgets in each of
	// op-a's and 1 in each of op-b's, which one plan balances to 7 and 7
	// whatever the namespaces' names hash to.
	byMember := map[string][]string{}
	for id, nss := range all {
		for _, ns := range nss {
			slot := a.Space().SlotOf(shard.ByNamespace, ns)
			if len(byMember[id]) < 2 && !slices.ContainsFunc(byMember[id], func(o string) bool { return a.Space().SlotOf(shard.ByNamespace, o) == slot }) {
				byMember[id] = append(byMember[id], ns)
			}
		}
		if len(byMember[id]) < 2 {
			t.Fatalf("%s's namespaces %v are not in two slots", id, nss)
		}
	}
	count := map[string]int{}
	for _, ns := range append(slices.Clone(byMember["op-a"]), byMember["op-b"]...) {
		n := 1
		if a.OwnerOf(shard.ByNamespace, ns) == "op-a" {
			n = 6
		}
		count[ns] = n
		for i := range n {
			if err := e.C.Create(context.Background(), optest.Widget(ns, fmt.Sprintf("w%d", i), 1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	total := 0
	for _, n := range count {
		total += n
	}
	module := testwasm.BuildFile(t, "./widget")
	regs := map[string]*prometheus.Registry{}
	ops := map[string]*operator.Operator{}
	stops := map[string]func(){}
	admitted := optest.NewSeen(optest.ByNamespace)
	start := func(interval time.Duration) {
		for _, id := range []string{"op-a", "op-b"} {
			mo := e.OperatorOptions()
			mo.Namespaces = append([]string{e.NS}, namespaces...)
			sharding := optest.Sharded(e, &mo, "balance", id, slots)
			sharding.BalanceTolerance, sharding.BalanceInterval = 0.1, interval
			regs[id] = prometheus.NewRegistry()
			ops[id], stops[id] = optest.StartStoppable(t, e.Cfg, mo, operator.Options{Modules: []string{module}, Registerer: regs[id], Sharding: sharding})
			optest.ShardAdmitted(ops[id], admitted.Hook(id))
		}
	}
	start(time.Second)
	loads := func() (map[string]float64, error) {
		out := map[string]float64{}
		sum := 0.0
		for id, reg := range regs {
			out[id] = optest.Gather(t, reg, "wasmreconcile_shard_load", nil)
			sum += out[id]
		}
		if sum != float64(total) {
			return out, fmt.Errorf("loads %v add up to %v of %d Widgets", out, sum, total)
		}
		return out, nil
	}
	balanced := func() error {
		l, err := loads()
		if err != nil {
			return err
		}
		mean := float64(total) / 2
		if l["op-a"] > mean*1.1 || l["op-b"] > mean*1.1 {
			return fmt.Errorf("loads %v, mean %v", l, mean)
		}
		var all []int
		for _, op := range ops {
			active, _ := optest.ShardActive(op)
			all = append(all, active...)
		}
		slices.Sort(all)
		if len(all) != slots || len(slices.Compact(all)) != slots {
			return fmt.Errorf("slots worked on: %v", all)
		}
		return nil
	}
	testenv.Eventually(t, 2*time.Minute, "the replicas' loads within 10% of the mean, every slot worked on once", balanced)
	moves := optest.Gather(t, regs["op-a"], "wasmreconcile_shard_balance_moves_total", nil) + optest.Gather(t, regs["op-b"], "wasmreconcile_shard_balance_moves_total", nil)
	if moves < 1 {
		t.Errorf("wasmreconcile_shard_balance_moves_total adds up to %v", moves)
	}
	for id, op := range ops {
		if r := optest.ShardReport(op); !strings.Contains(r, "for load") || strings.Contains(r, "no slots moved for load") {
			t.Errorf("%s's /readyz/modules does not name the plan: %s", id, r)
		}
	}
	// A namespace of op-a's that op-b now works on: its Widget changes,
	// and op-b reconciles it.
	activeB, _ := optest.ShardActive(ops["op-b"])
	var moved string
	for _, ns := range byMember["op-a"] {
		if slices.Contains(activeB, a.Space().SlotOf(shard.ByNamespace, ns)) {
			moved = ns
		}
	}
	if moved == "" {
		t.Fatalf("op-b works on none of op-a's namespaces %v (slots %v)", byMember["op-a"], activeB)
	}
	admitted.Clear()
	if err := e.C.Patch(context.Background(), optest.Widget(moved, "w0", 0), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":7}}`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the moved namespace's Widget to converge", func() error {
		w := optest.Widget(moved, "w0", 0)
		if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: moved, Name: "w0"}, w); err != nil {
			return err
		}
		if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); !strings.HasPrefix(s, "7 x") {
			return fmt.Errorf("summary %q", s)
		}
		return nil
	})
	if got := admitted.In(moved); !got["op-b"] || got["op-a"] {
		t.Errorf("%s, moved to op-b, reconciled by %v", moved, got)
	}

	// Both stop and start again, checking loads only once an hour: they
	// follow the plan they left off with (their Leases, released, keep
	// it), balanced from the start with no plan of their own.
	for _, id := range []string{"op-a", "op-b"} {
		stops[id]()
	}
	start(time.Hour)
	testenv.Eventually(t, 2*time.Minute, "the restarted replicas to follow the plan they left off with", func() error {
		active, _ := optest.ShardActive(ops["op-b"])
		if !slices.Contains(active, a.Space().SlotOf(shard.ByNamespace, moved)) {
			return fmt.Errorf("op-b works on slots %v, not %s's", active, moved)
		}
		return nil
	})
	for id, reg := range regs {
		if n := optest.Gather(t, reg, "wasmreconcile_shard_balance_moves_total", nil); n != 0 {
			t.Errorf("restarted %s made plans moving %v slots", id, n)
		}
	}
}
