package gatetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
)

// TestExactListHonoursTheSelector: a list at a past resourceVersion
// (resourceVersionMatch Exact) with a member's selector returns that
// member's objects as they were then: none created after it, none of
// another member's. A reshard that lists only the slots it gains, at the
// resourceVersion its watch has reached, rests on this.
func TestExactListHonoursTheSelector(t *testing.T) {
	cs, _ := clients(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	var namespaces []string
	create := func(ns, name string) {
		t.Helper()
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"run": run}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		ns := fmt.Sprintf("exact-%s-%d", run, i)
		namespaces = append(namespaces, ns)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		create(ns, "before")
	}
	then, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "run=" + run})
	if err != nil {
		t.Fatal(err)
	}
	rv := then.ResourceVersion
	for _, ns := range namespaces {
		create(ns, "after")
	}
	space, err := shard.NewSpace(16)
	if err != nil {
		t.Fatal(err)
	}
	a := shard.Assign(space, []string{"replica-0", "replica-1"})
	seen := 0
	for _, member := range a.Members() {
		sel := a.NamespaceSelector(member, namespaces)
		if sel == "" {
			continue
		}
		list, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{ShardSelector: sel, LabelSelector: "run=" + run,
			ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatalf("%s: a list at resourceVersion %s with its selector: %v", member, rv, err)
		}
		if list.ShardInfo == nil || list.ShardInfo.Selector != sel {
			t.Errorf("%s: the list's shardInfo is %+v, want the selector echoed", member, list.ShardInfo)
		}
		for _, cm := range list.Items {
			seen++
			if cm.Name != "before" {
				t.Errorf("%s: %s/%s, created after resourceVersion %s, came back", member, cm.Namespace, cm.Name, rv)
			}
			if owner := a.OwnerOf(shard.ByNamespace, cm.Namespace); owner != member {
				t.Errorf("%s: %s/%s came back; package shard places it with %s", member, cm.Namespace, cm.Name, owner)
			}
		}
	}
	if seen != len(namespaces) {
		t.Errorf("the members' exact lists returned %d ConfigMaps, want the %d that existed then", seen, len(namespaces))
	}
}
