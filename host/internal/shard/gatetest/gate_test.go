package gatetest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.MainOptions{FeatureGates: []string{"ShardedListAndWatch=true"}}))
}

func clients(t *testing.T) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cp := testenv.Shared(t)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dyn
}

func TestProbeWithTheGate(t *testing.T) {
	cs, dyn := clients(t)
	for what, list := range map[string]func(context.Context, metav1.ListOptions) (runtime.Object, error){
		"typed": func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().Namespaces().List(ctx, o)
		},
		"unstructured": func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).List(ctx, o)
		},
	} {
		for _, key := range []shard.Key{shard.ByUID, shard.ByNamespace} {
			on, err := shard.Probe(context.Background(), key, list)
			if err != nil || !on {
				t.Errorf("%s, %s: Probe = %v, %v; want true with the gate on", what, key, on, err)
			}
		}
	}
}

// TestListsSplitAsPlaced: 36 ConfigMaps in 12 namespaces, listed across
// namespaces once per member with its selector, by namespace and by uid:
// every ConfigMap comes back to exactly one member, the one package shard
// places it with, and nothing comes back to another.
func TestListsSplitAsPlaced(t *testing.T) {
	cs, _ := clients(t)
	ctx := context.Background()
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	want := map[string]corev1.ConfigMap{} // by namespace/name
	var namespaces []string
	for i := range 12 {
		ns := fmt.Sprintf("split-%s-%d", run, i)
		namespaces = append(namespaces, ns)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Labels: map[string]string{"run": run}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want[ns+"/"+cm.Name] = *cm
		}
	}
	space, err := shard.NewSpace(64)
	if err != nil {
		t.Fatal(err)
	}
	a := shard.Assign(space, []string{"replica-0", "replica-1", "replica-2"})
	for _, key := range []shard.Key{shard.ByNamespace, shard.ByUID} {
		got := map[string]string{} // namespace/name -> member
		for _, member := range a.Members() {
			var sel string
			if key == shard.ByUID {
				var all bool
				if sel, all = a.UIDSelector(member); all || sel == "" {
					t.Fatalf("%s owns all or nothing of 64 slots", member)
				}
			} else if sel = a.NamespaceSelector(member, namespaces); sel == "" {
				continue // none of the 12 namespaces is its
			}
			list, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{ShardSelector: sel, LabelSelector: "run=" + run})
			if err != nil {
				t.Fatal(err)
			}
			if list.ShardInfo == nil || list.ShardInfo.Selector != sel {
				t.Errorf("%s: the list's shardInfo is %+v, want the selector echoed", member, list.ShardInfo)
			}
			for _, cm := range list.Items {
				k := cm.Namespace + "/" + cm.Name
				if other, dup := got[k]; dup {
					t.Errorf("%s: %s came to %s and %s", key, k, other, member)
				}
				got[k] = member
				value := cm.Namespace
				if key == shard.ByUID {
					value = string(cm.UID)
				}
				if owner := a.OwnerOf(key, value); owner != member {
					t.Errorf("%s: %s came to %s, package shard places it with %s", key, k, member, owner)
				}
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: %s came to no member", key, k)
			}
		}
	}
}

// TestWatchSplitsAsPlaced: a watch with a member's selector sees the
// ConfigMaps created in its namespaces and none of the others'. The last
// ConfigMap is created in one of its namespaces after all the others; once
// it arrives, every event the watch would carry has arrived (a watch
// delivers in resourceVersion order).
func TestWatchSplitsAsPlaced(t *testing.T) {
	cs, _ := clients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	space, err := shard.NewSpace(16)
	if err != nil {
		t.Fatal(err)
	}
	a := shard.Assign(space, []string{"replica-0", "replica-1"})
	const member = "replica-0"
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	var mine, theirs []string
	for i := 0; len(mine) < 4 || len(theirs) < 4; i++ {
		ns := fmt.Sprintf("watch-%s-%d", run, i)
		if a.OwnerOf(shard.ByNamespace, ns) == member {
			mine = append(mine, ns)
		} else {
			theirs = append(theirs, ns)
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sel := a.NamespaceSelector(member, append(append([]string{}, mine...), theirs...))
	start, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{ShardSelector: sel, LabelSelector: "run=" + run, ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	create := func(ns, name string) {
		t.Helper()
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": run}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		create(mine[i], "cm")
		create(theirs[i], "cm")
	}
	create(mine[0], "barrier")
	var seen []string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %v", seen)
			}
			if ev.Type != watch.Added {
				t.Fatalf("event %s %v", ev.Type, ev.Object)
			}
			cm := ev.Object.(*corev1.ConfigMap)
			if owner := a.OwnerOf(shard.ByNamespace, cm.Namespace); owner != member {
				t.Errorf("%s's watch carried %s/%s, which is %s's", member, cm.Namespace, cm.Name, owner)
			}
			seen = append(seen, cm.Namespace+"/"+cm.Name)
			if cm.Name != "barrier" {
				continue
			}
			for _, ns := range mine[:4] {
				if !slices.Contains(seen, ns+"/cm") {
					t.Errorf("%s's watch missed %s/cm", member, ns)
				}
			}
			return
		case <-ctx.Done():
			t.Fatalf("no barrier event; saw %v", seen)
		}
	}
}
