package operator_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestCacheHoldsPackedObjects: against the real API server, the operator's
// cache stores the reconciled kind packed (package packed), and its client
// still reads each object as the unstructured object the API server serves,
// managedFields cut: the same map, a new one on every read.
func TestCacheHoldsPackedObjects(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{testwasm.BuildFile(t, "./widget")}})
	ctx := context.Background()
	w := optest.Widget(e.NS, "w", 3)
	w.SetLabels(map[string]string{"team": "a"})
	w.SetAnnotations(map[string]string{"note": "ünïcode \"quoted\""})
	if err := e.C.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "w", "3 x grey")

	inf, err := op.Manager().GetCache().GetInformer(ctx, optest.Widget(e.NS, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	// What the cache holds reaches its event handlers: an added handler
	// is told of every object already there.
	var mu sync.Mutex
	var stored any
	keep := func(obj any) {
		if o, ok := obj.(client.Object); ok && o.GetName() == "w" && o.GetNamespace() == e.NS {
			mu.Lock()
			stored = obj
			mu.Unlock()
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: keep, UpdateFunc: func(_, obj any) { keep(obj) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()
	key := types.NamespacedName{Namespace: e.NS, Name: "w"}
	testenv.Eventually(t, time.Minute, "the cache as the API server serves the Widget", func() error {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(w.GroupVersionKind())
		if err := op.Manager().GetAPIReader().Get(ctx, key, live); err != nil {
			return err
		}
		mu.Lock()
		p, isPacked := stored.(*packed.Object)
		mu.Unlock()
		if !isPacked {
			return fmt.Errorf("the cache holds a %T", stored)
		}
		if p.ResourceVersion != live.GetResourceVersion() {
			return fmt.Errorf("cache at resourceVersion %s, the API server at %s", p.ResourceVersion, live.GetResourceVersion())
		}
		if p.Labels["team"] != "a" || p.Annotations["note"] != w.GetAnnotations()["note"] || p.Generation != live.GetGeneration() || p.UID != live.GetUID() {
			return fmt.Errorf("packed metadata %+v, live %v", p.ObjectMeta, live.Object["metadata"])
		}
		read := &unstructured.Unstructured{}
		read.SetGroupVersionKind(w.GroupVersionKind())
		if err := op.Manager().GetClient().Get(ctx, key, read); err != nil {
			return err
		}
		unstructured.RemoveNestedField(live.Object, "metadata", "managedFields")
		if !reflect.DeepEqual(read.Object, live.Object) {
			return fmt.Errorf("read from the cache:\n%v\nfrom the API server:\n%v", read.Object, live.Object)
		}
		read.SetLabels(map[string]string{"changed": "by the reader"})
		again := &unstructured.Unstructured{}
		again.SetGroupVersionKind(w.GroupVersionKind())
		if err := op.Manager().GetClient().Get(ctx, key, again); err != nil {
			return err
		}
		if again.GetLabels()["team"] != "a" {
			return fmt.Errorf("a reader's change reached the cache: %v", again.GetLabels())
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(w.GroupVersionKind().GroupVersion().WithKind("WidgetList"))
		if err := op.Manager().GetClient().List(ctx, list, client.InNamespace(e.NS), client.MatchingLabels{"team": "a"}); err != nil {
			return err
		}
		if len(list.Items) != 1 || !reflect.DeepEqual(list.Items[0].Object, live.Object) {
			return fmt.Errorf("listed from the cache: %v", list.Items)
		}
		if err := op.Manager().GetClient().List(ctx, list, client.InNamespace(e.NS), client.MatchingLabels{"team": "b"}); err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("listed by a label no Widget has: %v", list.Items)
		}
		return nil
	})
}
