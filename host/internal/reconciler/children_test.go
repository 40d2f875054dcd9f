package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

var webappGVK = schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "WebApp"}

// TestChildrenAndFinalizer runs modules/webapp against the real API server:
// children are applied with owner references and the module as field
// manager, a child that is no longer desired is pruned, a deleted child is
// recreated, and deletion waits for the module's teardown.
func TestChildrenAndFinalizer(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	fr := flightrecorder.New(flightrecorder.Options{SampleEvery: 1, SampleInterval: -1})
	t.Cleanup(fr.Close)
	h := run(t, "./webapp", runOptions{rec: reconciler.Options{FlightRecorder: fr}})
	ctx := context.Background()
	h.create(webappGVK, "shop", map[string]any{"image": "nginx:1.27", "port": int64(8080), "config": map[string]any{"LOG_LEVEL": "debug"}})
	app := h.get(webappGVK, "shop")
	ns := h.ns

	var cm corev1.ConfigMap
	var svc corev1.Service
	testenv.Eventually(t, time.Minute, "ConfigMap and Service applied, and Ready", func() error {
		if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-config"}, &cm); err != nil {
			return err
		}
		if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, &svc); err != nil {
			return err
		}
		if c := readyCondition(h.get(webappGVK, "shop")); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready condition %v", c)
		}
		return nil
	})
	if cm.Data["IMAGE"] != "nginx:1.27" || cm.Data["LOG_LEVEL"] != "debug" {
		t.Errorf("ConfigMap data %v", cm.Data)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service ports %v", svc.Spec.Ports)
	}
	for _, obj := range []client.Object{&cm, &svc} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != app.GetUID() || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%s owner references %v", obj.GetName(), refs)
		}
		managed := false
		for _, mf := range obj.GetManagedFields() {
			managed = managed || (mf.Manager == "webapp" && mf.Operation == "Apply")
		}
		if !managed {
			t.Errorf("%s is not applied by field manager webapp: %v", obj.GetName(), obj.GetManagedFields())
		}
	}
	if fins := h.get(webappGVK, "shop").GetFinalizers(); len(fins) != 1 || fins[0] != reconciler.FinalizerPrefix+"webapp" {
		t.Errorf("finalizers %v", fins)
	}

	// A child deleted by hand comes back: its deletion reconciles the owner.
	if err := h.k8s.Delete(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the ConfigMap to be recreated", func() error {
		var again corev1.ConfigMap
		if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-config"}, &again); err != nil {
			return err
		}
		if again.UID == cm.UID {
			return fmt.Errorf("still the old ConfigMap")
		}
		return nil
	})

	// expose=false: the Service is no longer desired and is pruned.
	h.update(webappGVK, "shop", func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, false, "spec", "expose") })
	testenv.Eventually(t, time.Minute, "the Service to be pruned", func() error {
		err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, &corev1.Service{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("Service still there (err %v)", err)
	})

	// Deletion: the module deletes its children, then lets the WebApp go.
	if err := h.k8s.Delete(ctx, h.get(webappGVK, "shop")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the WebApp and its ConfigMap to be gone", func() error {
		err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop"}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp"}})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("WebApp still there (err %v)", err)
		}
		// envtest runs no garbage collector: only the module's teardown can
		// have deleted the ConfigMap.
		if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-config"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ConfigMap still there (err %v)", err)
		}
		return nil
	})
	if _, err := h.findEvent("shop", corev1.EventTypeNormal, "TearingDown"); err != nil {
		t.Error(err)
	}
	// The recorder keeps the finalizing call's input as the guest saw it:
	// with the finalizer its answer then removed.
	testenv.Eventually(t, time.Minute, "the call that finalized recorded", func() error {
		for _, rec := range fr.Records("webapp") {
			if !rec.Input.Finalizing || !strings.Contains(string(rec.Response), `"finalized":true`) {
				continue
			}
			fins := (&unstructured.Unstructured{Object: rec.Input.Object}).GetFinalizers()
			if len(fins) != 1 || fins[0] != reconciler.FinalizerPrefix+"webapp" {
				return fmt.Errorf("the finalizing call's recorded object has finalizers %v, not what the guest saw", fins)
			}
			return nil
		}
		return fmt.Errorf("no finalizing call recorded yet")
	})
	if got := h.metric(h.metrics.ChildOperations.WithLabelValues("webapp", "apply")); got < 3 {
		t.Errorf("child applies counted: %v, want at least 3 (two children, one recreated)", got)
	}
	if got := h.metric(h.metrics.ChildOperations.WithLabelValues("webapp", "prune")); got < 2 {
		t.Errorf("child prunes counted: %v, want at least 2 (the Service, then the ConfigMap)", got)
	}
}

// TestInvalidChildIsRefused: misbehave owns nothing; in "child" mode it
// returns a ConfigMap anyway. The response is refused as a whole, with an
// InvalidResponse Warning; the Event is recorded after the decision, so once
// it is there, the child was never applied.
func TestInvalidChildIsRefused(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{})
	h.create(gadgetGVK, "kid", map[string]any{"mode": "child"})
	testenv.Eventually(t, time.Minute, "an InvalidResponse event", func() error {
		_, err := h.findEvent("kid", corev1.EventTypeWarning, string(protocol.InvalidResponse))
		return err
	})
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: "stray"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("an undeclared child was created (err %v)", err)
	}
	if got := h.metric(h.metrics.ReconcileTotal.WithLabelValues("misbehave", "InvalidResponse")); got != 1 {
		t.Errorf("InvalidResponse results: %v, want exactly 1 (terminal: not retried)", got)
	}
}

// TestCacheReads runs a guest that reads ConfigMaps from the operator's
// informer cache, in a real cluster, and is refused a Secret it did not
// declare.
func TestCacheReads(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/misbehave", runOptions{})
	ctx := context.Background()
	for name, team := range map[string]string{"settings": "a", "other": "b"} {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name, cm.Labels, cm.Data = h.ns, name, map[string]string{"team": team}, map[string]string{"color": "blue"}
		if err := h.k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	h.create(gadgetGVK, "reader", map[string]any{"mode": "read", "configMap": "settings", "selector": "team=a"})
	testenv.Eventually(t, time.Minute, "status from cache reads", func() error {
		st, _, _ := unstructured.NestedMap(h.get(gadgetGVK, "reader").Object, "status")
		if st["found"] != true || st["listed"] != int64(1) || st["secretForbidden"] != true {
			return fmt.Errorf("status %v", st)
		}
		if data, _ := st["data"].(map[string]any); data["color"] != "blue" {
			return fmt.Errorf("data %v", st["data"])
		}
		return nil
	})
}

// TestFinalizerConflictsAreRetried: another writer changes the WebApp just
// before each finalizer patch (adding it, then removing it once the
// module has torn down), so that the optimistic lock fails. Each is
// retried on the object read again: the finalizer is added, the WebApp
// goes, and no apply failure or ApplyFailed Warning is counted.
func TestFinalizerConflictsAreRetried(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	var h *harness
	var conflicts atomic.Int32
	var interfered [2]atomic.Bool // before adding, before removing
	ready := make(chan struct{})
	h = run(t, "./webapp", runOptions{writer: func(c client.Client) client.Client {
		return patchHook{Client: c, hook: func(ctx context.Context, c client.Client, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			<-ready
			phase := 0
			if obj.GetDeletionTimestamp() != nil {
				phase = 1
			}
			if _, ok := obj.(*unstructured.Unstructured); ok && patch.Type() == types.MergePatchType && !interfered[phase].Swap(true) {
				// Another writer first: a label bumps the resourceVersion.
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(webappGVK)
				if err := h.k8s.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
					return err
				}
				u.SetLabels(map[string]string{"interfered": fmt.Sprint(phase)})
				if err := h.k8s.Update(ctx, u); err != nil {
					return err
				}
			}
			err := c.Patch(ctx, obj, patch, opts...)
			if apierrors.IsConflict(err) {
				conflicts.Add(1)
			}
			return err
		}}
	}})
	close(ready)
	ctx := context.Background()
	h.create(webappGVK, "shop", map[string]any{"image": "nginx:1.27"})
	testenv.Eventually(t, time.Minute, "the finalizer added and the WebApp Ready", func() error {
		app := h.get(webappGVK, "shop")
		if fins := app.GetFinalizers(); len(fins) != 1 || fins[0] != reconciler.FinalizerPrefix+"webapp" {
			return fmt.Errorf("finalizers %v", fins)
		}
		if c := readyCondition(app); c == nil || c["status"] != "True" {
			return fmt.Errorf("Ready condition %v", c)
		}
		return nil
	})
	if err := h.k8s.Delete(ctx, h.get(webappGVK, "shop")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the WebApp gone", func() error {
		err := h.k8s.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: "shop"}, newObject(webappGVK, h.ns, "shop", nil))
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("WebApp still there (err %v)", err)
		}
		return nil
	})
	if got := conflicts.Load(); got < 2 {
		t.Fatalf("finalizer patches that conflicted: %d, want 2 (adding and removing): the test did not make the conflicts it checks", got)
	}
	if got := h.metric(h.metrics.ApplyFailures.WithLabelValues("webapp", "finalizer", "Conflict")); got != 0 {
		t.Errorf("finalizer apply failures counted: %v, want 0 (conflicts are retried)", got)
	}
	if ev, err := h.findEvent("shop", corev1.EventTypeWarning, "ApplyFailed"); err == nil {
		t.Errorf("an ApplyFailed Warning: %s", ev.Note)
	}
}

// patchHook is a client whose Patch calls hook, with the client to patch
// with.
type patchHook struct {
	client.Client
	hook func(ctx context.Context, c client.Client, obj client.Object, patch client.Patch, opts ...client.PatchOption) error
}

func (p patchHook) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return p.hook(ctx, p.Client, obj, patch, opts...)
}
