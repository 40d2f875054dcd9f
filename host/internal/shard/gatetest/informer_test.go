package gatetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

// TestInformersCacheTheirShare runs a controller-runtime cache whose
// informers come from package informer with sharding on, and moves its
// share: from nothing, to replica-0's namespaces, to replica-1's, and back
// to nothing. After each move (Informers.Resharded) the cache holds
// exactly the ConfigMaps of the share; a ConfigMap created in the share
// after the move arrives by the watch, and one created outside it before
// that does not (a watch delivers in resourceVersion order, so once the
// later one arrived the earlier one would have). It fails if lists or
// watches ignore the selector, or if a watch outlives its selection.
func TestInformersCacheTheirShare(t *testing.T) {
	cs, _ := clients(t)
	cfg := testenv.Shared(t).Config
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	space, err := shard.NewSpace(16)
	if err != nil {
		t.Fatal(err)
	}
	a := shard.Assign(space, []string{"replica-0", "replica-1"})
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	byMember := map[string][]string{}
	var namespaces []string
	for i := 0; len(byMember["replica-0"]) < 3 || len(byMember["replica-1"]) < 3; i++ {
		ns := fmt.Sprintf("inf-%s-%d", run, i)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Labels: map[string]string{"run": run}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		namespaces = append(namespaces, ns)
		owner := a.OwnerOf(shard.ByNamespace, ns)
		byMember[owner] = append(byMember[owner], ns)
	}

	reg := prometheus.NewRegistry()
	infs, err := informer.New(informer.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	configMaps := schema.GroupKind{Kind: "ConfigMap"}
	infs.SetSharding(informer.Sharding{Sharded: func(gk schema.GroupKind) (bool, error) { return gk == configMaps, nil }})
	c, err := cache.New(cfg, cache.Options{
		NewInformer: infs.NewInformer,
		ByObject:    map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{"run": run})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	resharded := func(gen uint64) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		defer rcancel()
		if err := infs.Resharded(rctx, gen); err != nil {
			t.Fatal(err)
		}
	}
	cached := func() []string {
		var list corev1.ConfigMapList
		if err := c.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cm := range list.Items {
			out = append(out, cm.Namespace)
		}
		sort.Strings(out)
		return slices.Compact(out)
	}
	if got := cached(); len(got) != 0 {
		t.Fatalf("before any Shard, the cache holds ConfigMaps of %v; want none", got)
	}
	// An informer built but never started (a module still loading) is not
	// waited for, and must not stall the wait.
	_ = infs.NewInformer(&toolscache.ListWatch{}, &corev1.ConfigMap{}, 0, nil)

	cmIn := func(ns, name string) {
		t.Helper()
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": run}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for step, member := range []string{"replica-0", "replica-1"} {
		mine := slices.Sorted(slices.Values(byMember[member])) // as cached() sorts
		resharded(infs.Shard(a.NamespaceSelector(member, namespaces), false))
		// The list is in the informer's queue: the cache holds the share
		// once its queue is drained.
		deadline := time.Now().Add(30 * time.Second)
		for !slices.Equal(cached(), mine) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the cache holds ConfigMaps of %v; want exactly %v", member, cached(), mine)
			}
			time.Sleep(20 * time.Millisecond)
		}
		var other string
		for _, ns := range namespaces {
			if !slices.Contains(mine, ns) {
				other = ns
				break
			}
		}
		outside := fmt.Sprintf("outside-%d", step)
		cmIn(other, outside)
		cmIn(mine[0], "barrier")
		deadline = time.Now().Add(30 * time.Second)
		for {
			var cm corev1.ConfigMap
			err := c.Get(ctx, client.ObjectKey{Namespace: mine[0], Name: "barrier"}, &cm)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: a ConfigMap created in its namespace %s never reached the cache: %v", member, mine[0], err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: outside}, &cm); err == nil {
			t.Errorf("%s: the watch carried %s/%s from another replica's namespace", member, other, outside)
		}
		var all corev1.ConfigMapList
		if err := c.List(ctx, &all); err != nil {
			t.Fatal(err)
		}
		if n := testutil.ToFloat64(infs.Metrics().Objects.WithLabelValues("ConfigMap")); int(n) != len(all.Items) {
			t.Errorf("%s: wasmreconcile_informer_objects says %v ConfigMaps, the cache holds %d", member, n, len(all.Items))
		}
		if err := cs.CoreV1().ConfigMaps(mine[0]).Delete(ctx, "barrier", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	resharded(infs.Shard("", true))
	deadline := time.Now().Add(30 * time.Second)
	for len(cached()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("owning nothing, the cache still holds ConfigMaps of %v", cached())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := testutil.ToFloat64(infs.Metrics().WatchRestarts.WithLabelValues("ConfigMap", "resharded")); n < 3 {
		t.Errorf("watch restarts for resharding: %v; want at least 3 (one per move)", n)
	}
}
