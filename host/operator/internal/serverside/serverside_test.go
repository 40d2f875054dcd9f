package serverside_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

const widgetLabel = "Widget.examples.wasmreconcile.io"

// TestServerSideReplicasCacheTheirShare: two operators with sharding on,
// on an API server that filters by shard, each cache only the Widgets of
// the namespaces they own (wasmreconcile_informer_objects) and reconcile
// only those; a namespace created while they run joins its owner's share;
// when one stops, the other caches and reconciles every Widget. It fails
// if the informers ignore the selection, if a namespace created later is
// left out of it, or if a replica keeps its old share.
func TestServerSideReplicasCacheTheirShare(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	const slots = 16
	a := optest.ShardPair(t, slots)
	var namespaces []string
	owned := map[string][]string{}
	newNamespace := func(i int) string {
		ns := fmt.Sprintf("%s-s%d", e.NS, i)
		if err := e.C.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.C.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		})
		for j := range 3 {
			if err := e.C.Create(ctx, optest.Widget(ns, fmt.Sprintf("w%d", j), int64(j+1))); err != nil {
				t.Fatal(err)
			}
		}
		namespaces = append(namespaces, ns)
		owner := a.OwnerOf(shard.ByNamespace, ns)
		owned[owner] = append(owned[owner], ns)
		return ns
	}
	i := 0
	for ; len(owned["op-a"]) < 2 || len(owned["op-b"]) < 2; i++ {
		if i > 64 {
			t.Fatal("no namespaces split between two operators")
		}
		newNamespace(i)
	}
	module := testwasm.BuildFile(t, "./widget")
	regs := map[string]*prometheus.Registry{}
	ops := map[string]*operator.Operator{}
	stops := map[string]func(){}
	admitted := optest.NewSeen(optest.ByNamespace)
	start := func(id string) {
		mo := e.OperatorOptions()
		mo.Namespaces = nil // the whole cluster, as deployed
		sharding := optest.Sharded(e, &mo, "serverside", id, slots)
		sharding.Mode, sharding.NamespaceDebounce = operator.ShardModeServerSide, 200*time.Millisecond
		regs[id] = prometheus.NewRegistry()
		ops[id], stops[id] = optest.StartStoppable(t, e.Cfg, mo, operator.Options{
			Modules:    []string{module},
			Registerer: regs[id],
			Sharding:   sharding,
		})
		optest.ShardAdmitted(ops[id], admitted.Hook(id))
	}
	// cached is what an operator's informers hold of Widgets.
	cached := func(id string) float64 {
		return optest.Gather(t, regs[id], "wasmreconcile_informer_objects", map[string]string{"kind": widgetLabel})
	}
	converged := func(namespaces []string) {
		t.Helper()
		for _, ns := range namespaces {
			for j := range 3 {
				testenv.Eventually(t, 2*time.Minute, "every Widget to converge", func() error {
					w := &unstructured.Unstructured{}
					w.SetGroupVersionKind(optest.Widget(ns, "", 0).GroupVersionKind())
					if err := e.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("w%d", j)}, w); err != nil {
						return err
					}
					if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == "" {
						return fmt.Errorf("%s/w%d has no summary", ns, j)
					}
					return nil
				})
			}
		}
	}

	start("op-a")
	testenv.Eventually(t, 2*time.Minute, "op-a to run every slot and cache every Widget", func() error {
		if active, _ := optest.ShardActive(ops["op-a"]); len(active) != slots {
			return fmt.Errorf("op-a runs %d slots", len(active))
		}
		if n, want := cached("op-a"), 3*len(namespaces); n != float64(want) {
			return fmt.Errorf("op-a caches %v Widgets, want %d", n, want)
		}
		return nil
	})
	if r := optest.ShardReport(ops["op-a"]); !strings.Contains(r, "sharding server-side") {
		t.Errorf("op-a's /readyz/modules says %q; want the server-side mode", r)
	}
	converged(namespaces)

	start("op-b")
	testenv.Eventually(t, 2*time.Minute, "each operator to cache only its namespaces' Widgets", func() error {
		for _, id := range []string{"op-a", "op-b"} {
			if active, _ := optest.ShardActive(ops[id]); len(active) != len(a.Owned(id)) {
				return fmt.Errorf("%s runs %d slots, want %d", id, len(active), len(a.Owned(id)))
			}
			if n, want := cached(id), 3*len(owned[id]); n != float64(want) {
				return fmt.Errorf("%s caches %v Widgets, want %d (of %v)", id, n, want, owned[id])
			}
		}
		return nil
	})
	// A namespace created now joins its owner's share.
	admitted.Clear()
	late := newNamespace(i)
	converged([]string{late})
	lateOwner := a.OwnerOf(shard.ByNamespace, late)
	testenv.Eventually(t, time.Minute, "the late namespace's Widgets in its owner's cache", func() error {
		if n, want := cached(lateOwner), 3*len(owned[lateOwner]); n != float64(want) {
			return fmt.Errorf("%s caches %v Widgets, want %d", lateOwner, n, want)
		}
		return nil
	})
	// Every Widget is touched; each namespace's are reconciled by its owner
	// alone.
	for _, ns := range namespaces {
		for j := range 3 {
			w := optest.Widget(ns, fmt.Sprintf("w%d", j), 0)
			if err := e.C.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":9}}`))); err != nil {
				t.Fatal(err)
			}
		}
	}
	testenv.Eventually(t, 2*time.Minute, "every namespace's Widgets reconciled again", func() error {
		for _, ns := range namespaces {
			if len(admitted.In(ns)) == 0 {
				return fmt.Errorf("%s: not reconciled yet", ns)
			}
		}
		return nil
	})
	for _, ns := range namespaces {
		if got, want := admitted.In(ns), a.OwnerOf(shard.ByNamespace, ns); len(got) != 1 || !got[want] {
			t.Errorf("%s, %s's: reconciled by %v", ns, want, got)
		}
	}

	// op-b stops: op-a caches every Widget again.
	stops["op-b"]()
	testenv.Eventually(t, 2*time.Minute, "op-a to cache every Widget after op-b stopped", func() error {
		if n, want := cached("op-a"), 3*len(namespaces); n != float64(want) {
			return fmt.Errorf("op-a caches %v Widgets, want %d", n, want)
		}
		return nil
	})
	w := optest.Widget(owned["op-b"][0], "after", 4)
	if err := e.C.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, owned["op-b"][0], "after", "4 x grey")
}

// TestServerSideReadsOtherNamespacesLive: a guest granted reads in another
// namespace (--module-read-namespaces) reads there although that
// namespace belongs to the other replica's share, which this replica does
// not cache: the read goes to the API server. It fails if reads outside
// the share come from the cache (the Secret is not found).
func TestServerSideReadsOtherNamespacesLive(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	const slots = 16
	a := optest.ShardPair(t, slots)
	_, owned := optest.ShardNamespaces(t, e, a, "r", 1)
	mine := map[string]string{"op-a": owned["op-a"][0], "op-b": owned["op-b"][0]}
	theirs := mine["op-b"]
	if err := e.C.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: theirs, Name: "s"}, StringData: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	module := testwasm.BuildFile(t, "./internal/testguests/claim")
	ops := map[string]*operator.Operator{}
	regs := map[string]*prometheus.Registry{}
	for _, id := range []string{"op-a", "op-b"} {
		mo := e.OperatorOptions()
		mo.Namespaces = nil
		regs[id] = prometheus.NewRegistry()
		sharding := optest.Sharded(e, &mo, "reads", id, slots)
		sharding.Mode = operator.ShardModeServerSide
		ops[id] = optest.Start(t, e.Cfg, mo, operator.Options{
			Modules:              []string{module},
			Registerer:           regs[id],
			ModuleReadNamespaces: map[string][]string{"claim": {theirs}},
			Sharding:             sharding,
		})
	}
	testenv.Eventually(t, 2*time.Minute, "the operators to split the slots", func() error {
		for id, op := range ops {
			if active, _ := optest.ShardActive(op); len(active) != len(a.Owned(id)) {
				return fmt.Errorf("%s runs %d slots, want %d", id, len(active), len(a.Owned(id)))
			}
		}
		return nil
	})
	// The only Secret is in op-b's namespace: op-a's cache lets it go once
	// it listed with its share alone (op-a may have cached it while it ran
	// every slot).
	testenv.Eventually(t, time.Minute, "op-a's cache to hold only its share", func() error {
		if n := optest.Gather(t, regs["op-a"], "wasmreconcile_informer_objects", map[string]string{"kind": "Secret"}); n != 0 {
			return fmt.Errorf("op-a caches %v Secrets", n)
		}
		if n := optest.Gather(t, regs["op-b"], "wasmreconcile_informer_objects", map[string]string{"kind": "Secret"}); n != 1 {
			return fmt.Errorf("op-b caches %v Secrets", n)
		}
		return nil
	})
	r := optest.Responder(mine["op-a"], "reader", map[string]any{"status": map[string]any{"phase": "read"}})
	_ = unstructured.SetNestedField(r.Object, map[string]any{"apiVersion": "v1", "kind": "Secret", "namespace": theirs, "name": "s"}, "spec", "read")
	if err := e.C.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	status := optest.WaitPhase(t, optest.Env{Cfg: e.Cfg, C: e.C, NS: mine["op-a"]}, "reader", "read")
	if status["read"] != "found" {
		t.Errorf("op-a's guest reading a Secret of op-b's namespace: %v, want found", status["read"])
	}

}
