package reconciler

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// listReader is a client.Reader over a slice of the reconciled kind's
// objects: it honours InNamespace, and MatchingFields on a trigger's field
// index the way the cache's index does (by fieldNames).
type listReader struct{ objs []*unstructured.Unstructured }

func (l listReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return fmt.Errorf("not used")
}

func (l listReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	ul := list.(*unstructured.UnstructuredList)
	for _, obj := range l.objs {
		if o.Namespace != "" && obj.GetNamespace() != o.Namespace {
			continue
		}
		if o.FieldSelector != nil && !o.FieldSelector.Empty() {
			reqs := o.FieldSelector.Requirements()
			field := strings.TrimPrefix(reqs[0].Field, TriggerIndexPrefix)
			if !contains(fieldNames(obj.Object, strings.Split(field, ".")), reqs[0].Value) {
				continue
			}
		}
		ul.Items = append(ul.Items, *obj.DeepCopy())
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func responder(ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.wasmreconcile.io/v1", "kind": "Responder",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

func related(kind, ns, name string, labels map[string]any, owners ...map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	if labels != nil {
		md["labels"] = labels
	}
	if owners != nil {
		refs := make([]any, len(owners))
		for i, o := range owners {
			refs[i] = o
		}
		md["ownerReferences"] = refs
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind, "metadata": md}}
}

// TestTriggerTargets checks each mapping of a related object to the
// reconciled objects, including the ones that must not match: another
// namespace, another owner kind, a selector that does not match, a field
// of the wrong type.
func TestTriggerTargets(t *testing.T) {
	cm := abi.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	nsKind := abi.GroupVersionKind{Version: "v1", Kind: "Namespace"} // cluster-scoped
	owners := []*unstructured.Unstructured{
		responder("a", "by-name", map[string]any{"target": "cfg"}),
		responder("a", "by-list", map[string]any{"target": []any{"other", "cfg"}}),
		responder("a", "wrong-type", map[string]any{"target": int64(3)}),
		responder("b", "by-name-b", map[string]any{"target": "cfg"}),
		responder("a", "labels", map[string]any{"selector": map[string]any{"app": "web"}}),
		responder("a", "match-labels", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}}}),
		responder("a", "expressions", map[string]any{"selector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "tier", "operator": "In", "values": []any{"front", "back"}}}}}),
		responder("a", "empty-selector", map[string]any{"selector": map[string]any{}}),
		responder("a", "other-labels", map[string]any{"selector": map[string]any{"app": "db"}}),
	}
	r := &Reconciler{declared: declared{name: "t", gvk: schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Responder"}},
		objects: newObjects(policy.Storm{}), sources: newSourceDamper(policy.Storm{}), opts: Options{Scopes: protocol.Builtin, Policy: policy.Policy{}.WithDefaults()}}
	owner := func(apiVersion, kind, name string) map[string]any {
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": "u-" + name}
	}
	for _, tc := range []struct {
		name    string
		trigger abi.Trigger
		related *unstructured.Unstructured
		want    []string
	}{
		{"field: a string or a list holding the name, in the related object's namespace",
			abi.Trigger{Kind: cm, Field: "spec.target"}, related("ConfigMap", "a", "cfg", nil), []string{"a/by-list", "a/by-name"}},
		{"field: no owner names it",
			abi.Trigger{Kind: cm, Field: "spec.target"}, related("ConfigMap", "a", "nobody", nil), nil},
		{"field: a cluster-scoped related object is looked for in every namespace",
			abi.Trigger{Kind: nsKind, Field: "spec.target"}, related("Namespace", "", "cfg", nil), []string{"a/by-list", "a/by-name", "b/by-name-b"}},
		{"owner reference: only references to the reconciled kind, in the related object's namespace",
			abi.Trigger{Kind: cm, OwnerReference: true}, related("ConfigMap", "a", "child", nil,
				owner("test.wasmreconcile.io/v1", "Responder", "by-name"),
				owner("test.wasmreconcile.io/v2", "Responder", "other-version"),
				owner("apps/v1", "Responder", "other-group"),
				owner("test.wasmreconcile.io/v1", "Widget", "other-kind")),
			[]string{"a/by-name", "a/other-version"}},
		{"selector: plain labels, matchLabels and matchExpressions; empty matches nothing",
			abi.Trigger{Kind: cm, Selector: "spec.selector"}, related("ConfigMap", "a", "x", map[string]any{"app": "web", "tier": "front"}),
			[]string{"a/expressions", "a/labels", "a/match-labels"}},
		{"selector: in the related object's namespace only",
			abi.Trigger{Kind: cm, Selector: "spec.selector"}, related("ConfigMap", "b", "x", map[string]any{"app": "web"}), nil},
		{"selector: an unlabelled object matches no selector",
			abi.Trigger{Kind: cm, Selector: "spec.selector"}, related("ConfigMap", "a", "x", nil), nil},
		{"all: every object in the namespace",
			abi.Trigger{Kind: cm, All: true}, related("ConfigMap", "b", "x", nil), []string{"b/by-name-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := r.newTrigger(nil, 0, tc.trigger)
			tr.reader = listReader{objs: owners}
			keys, err := tr.targets(context.Background(), tc.related)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range keys {
				got = append(got, k.String())
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("targets %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTriggerForgetsMemo checks that a triggered object is enqueued with
// its unchanged memo forgotten (the related object is not part of what the
// memo compares, so a remembered call would answer it without the guest),
// that both sides of an update are mapped, and that the initial list and
// resyncs enqueue nothing.
func TestTriggerForgetsMemo(t *testing.T) {
	cm := abi.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	r := &Reconciler{declared: declared{name: "t", gvk: schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Responder"}},
		objects: newObjects(policy.Storm{}), sources: newSourceDamper(policy.Storm{}), opts: Options{Scopes: protocol.Builtin, Policy: policy.Policy{}.WithDefaults()}}
	tr := r.newTrigger(nil, 0, abi.Trigger{Kind: cm, Field: "spec.target"})
	tr.reader = listReader{objs: []*unstructured.Unstructured{
		responder("a", "old", map[string]any{"target": "cfg-old"}),
		responder("a", "new", map[string]any{"target": "cfg-new"}),
	}}
	for _, k := range []string{"old", "new"} {
		r.objects.setMemo(types.NamespacedName{Namespace: "a", Name: k}, memo{digest: "d"})
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := tr.handler()
	ctx := context.Background()

	h.Create(ctx, event.CreateEvent{Object: related("ConfigMap", "a", "cfg-new", nil), IsInInitialList: true}, q)
	oldObj, newObj := related("ConfigMap", "a", "cfg-old", nil), related("ConfigMap", "a", "cfg-new", nil)
	oldObj.SetResourceVersion("1")
	newObj.SetResourceVersion("1")
	h.Update(ctx, event.UpdateEvent{ObjectOld: oldObj, ObjectNew: newObj}, q) // a resync: same resourceVersion
	if q.Len() != 0 {
		t.Fatalf("initial list and resync enqueued %d objects, want none", q.Len())
	}
	newObj.SetResourceVersion("2")
	h.Update(ctx, event.UpdateEvent{ObjectOld: oldObj, ObjectNew: newObj}, q)
	if q.Len() != 2 {
		t.Fatalf("an update enqueued %d objects, want 2 (the old and the new side's)", q.Len())
	}
	for _, k := range []string{"old", "new"} {
		if _, ok := r.objects.memoOf(types.NamespacedName{Namespace: "a", Name: k}); ok {
			t.Fatalf("%s's memo survived its trigger", k)
		}
	}
}

// TestTriggerMaxFanOut: one related object's event reconciles at most
// Options.Policy.TriggerMaxFanOut owners; the rest are counted as dropped.
func TestTriggerMaxFanOut(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{declared: declared{name: "t", gvk: schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Responder"}},
		objects: newObjects(policy.Storm{}), sources: newSourceDamper(policy.Storm{}), opts: Options{Scopes: protocol.Builtin, Policy: policy.Policy{TriggerMaxFanOut: 3}, Metrics: m}}
	tr := r.newTrigger(nil, 0, abi.Trigger{Kind: abi.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, All: true})
	var owners []*unstructured.Unstructured
	for i := range 5 {
		owners = append(owners, responder("a", fmt.Sprint("r", i), nil))
	}
	tr.reader = listReader{objs: owners}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	tr.handler().Create(context.Background(), event.CreateEvent{Object: related("ServiceAccount", "a", "sa", nil)}, q)
	if q.Len() != 3 {
		t.Errorf("%d owners enqueued, want the cap of 3", q.Len())
	}
	if got := testutil.ToFloat64(m.TriggerFanOutDropped.WithLabelValues("t")); got != 2 {
		t.Errorf("dropped %v, want 2", got)
	}
}
