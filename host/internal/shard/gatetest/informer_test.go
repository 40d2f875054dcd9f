package gatetest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

// shardedCache is a controller-runtime cache whose ConfigMap informers
// come from package informer with sharding on, over 4 ConfigMaps (label
// run) in each of namespaces, at least 3 of which each of replica-0 and
// replica-1 owns under a (16 slots), listed in pages of 5. Nothing is
// selected yet.
type shardedCache struct {
	cs         kubernetes.Interface
	a          shard.Assignment
	byMember   map[string][]string
	namespaces []string
	run        string
	infs       *informer.Informers
	c          cache.Cache
	resharded  func(gen uint64) // waits until every informer listed with selection gen
}

func newShardedCache(t *testing.T, ctx context.Context) *shardedCache {
	t.Helper()
	cs, _ := clients(t)
	cfg := testenv.Shared(t).Config
	space, err := shard.NewSpace(16)
	if err != nil {
		t.Fatal(err)
	}
	f := &shardedCache{cs: cs, a: shard.Assign(space, []string{"replica-0", "replica-1"}), byMember: map[string][]string{},
		run: fmt.Sprintf("%d", time.Now().UnixNano()%1e6)}
	for i := 0; len(f.byMember["replica-0"]) < 3 || len(f.byMember["replica-1"]) < 3; i++ {
		ns := fmt.Sprintf("inf-%s-%d", f.run, i)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Labels: map[string]string{"run": f.run}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		f.namespaces = append(f.namespaces, ns)
		owner := f.a.OwnerOf(shard.ByNamespace, ns)
		f.byMember[owner] = append(f.byMember[owner], ns)
	}
	// Pages of 5 objects: every list, and every reshard's, takes several.
	if f.infs, err = informer.New(informer.Options{Registerer: prometheus.NewRegistry(), PageSize: 5}); err != nil {
		t.Fatal(err)
	}
	configMaps := schema.GroupKind{Kind: "ConfigMap"}
	f.infs.SetSharding(informer.Sharding{Sharded: func(gk schema.GroupKind) (bool, error) { return gk == configMaps, nil }})
	if f.c, err = cache.New(cfg, cache.Options{
		NewInformer: f.infs.NewInformer,
		ByObject:    map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{"run": f.run})}},
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.c.Start(ctx) }()
	if _, err := f.c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if !f.c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	f.resharded = func(gen uint64) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		defer rcancel()
		if err := f.infs.Resharded(rctx, gen); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newShardedCache(t, ctx)
	cs, a, byMember, namespaces, run, infs, c, resharded := f.cs, f.a, f.byMember, f.namespaces, f.run, f.infs, f.c, f.resharded
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

// TestReshardSendsOnlyTheDifference: widening a share sends the
// informer's handlers the objects that joined it, and nothing for the
// objects it held unchanged (before, each got an update, and each was
// reconciled again); narrowing it deletes only those that left.
func TestReshardSendsOnlyTheDifference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newShardedCache(t, ctx)
	inf, err := f.c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{} // "add ns/name", "update ns/name", "delete ns/name"
	note := func(what string, obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			mu.Lock()
			seen[what+" "+cm.Namespace+"/"+cm.Name]++
			mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note("add", o) },
		UpdateFunc: func(_, o any) { note("update", o) },
		DeleteFunc: func(o any) { note("delete", o) },
	}); err != nil {
		t.Fatal(err)
	}
	zero, one := f.byMember["replica-0"], f.byMember["replica-1"]
	// barrier creates a ConfigMap in ns and waits for its add: the watch
	// delivers in order, so every event of the reshard before it arrived.
	barrier := func(ns, name string) {
		t.Helper()
		if _, err := f.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": f.run}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, "the barrier "+name, func() error {
			mu.Lock()
			defer mu.Unlock()
			if seen["add "+ns+"/"+name] == 0 {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	count := func(what string, namespaces []string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k, v := range seen {
			for _, ns := range namespaces {
				if strings.HasPrefix(k, what+" "+ns+"/cm-") {
					n += v
				}
			}
		}
		return n
	}
	f.resharded(f.infs.Shard(f.a.NamespaceSelector("replica-0", f.namespaces), false))
	barrier(zero[0], "barrier-0")
	if got, want := count("add", zero), 4*len(zero); got != want {
		t.Fatalf("replica-0's share: %d adds, want %d", got, want)
	}
	// Widen to both shares.
	both := func(int) bool { return true }
	sel, _ := f.a.Space().NamespaceSelector(f.namespaces, both)
	f.resharded(f.infs.Shard(sel, false))
	barrier(zero[0], "barrier-1")
	if got, want := count("add", one), 4*len(one); got != want {
		t.Errorf("widened: %d adds of replica-1's ConfigMaps, want %d", got, want)
	}
	if got := count("update", zero); got != 0 {
		t.Errorf("widened: %d updates of replica-0's ConfigMaps, held unchanged; want none", got)
	}
	// Narrow back to replica-1's: replica-0's leave, replica-1's stay
	// without an update.
	f.resharded(f.infs.Shard(f.a.NamespaceSelector("replica-1", f.namespaces), false))
	barrier(one[0], "barrier-2")
	if got, want := count("delete", zero), 4*len(zero); got != want {
		t.Errorf("narrowed: %d deletes of replica-0's ConfigMaps, want %d", got, want)
	}
	if got := count("update", one) + count("delete", one); got != 0 {
		t.Errorf("narrowed: %d updates or deletes of replica-1's ConfigMaps, held unchanged; want none", got)
	}
}
