package statusapply_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/statusapply"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.MainOptions{})) }

var (
	widgetGVK = schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	moduleGVK = v1alpha1.GroupVersion.WithKind("ReconcileModule")
)

// applier returns an Applier on the shared control plane and a client
// to check what it wrote.
func applier(t *testing.T) (*statusapply.Applier, client.Client) {
	t.Helper()
	cp := testenv.Shared(t)
	httpClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cp.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return statusapply.New(cp.Config, httpClient, mapper), c
}

// body is the apply configuration of obj's status.
func body(t *testing.T, gvk schema.GroupVersionKind, namespace, name string, status map[string]any) []byte {
	t.Helper()
	md := map[string]any{"name": name}
	if namespace != "" {
		md["namespace"] = namespace
	}
	b, err := json.Marshal(map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": md, "status": status})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// statusManager returns the status as the API server holds it and the
// manager and operation of its status entry in managedFields.
func statusManager(t *testing.T, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey) (map[string]any, string, metav1.ManagedFieldsOperationType) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(context.Background(), key, u); err != nil {
		t.Fatal(err)
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	for _, f := range u.GetManagedFields() {
		if f.Subresource == "status" {
			return status, f.Manager, f.Operation
		}
	}
	return status, "", ""
}

// TestApplyNamespaced: the status is applied to the status subresource as
// the field owner, forcing ownership over another manager's field; a
// refusal by the schema is an Invalid error that carries the API server's
// message; an object that does not exist is NotFound.
func TestApplyNamespaced(t *testing.T) {
	a, c := applier(t)
	ctx := context.Background()
	ns := testenv.Namespace(t, c)
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetGVK)
	w.SetNamespace(ns)
	w.SetName("w")
	_ = unstructured.SetNestedField(w.Object, int64(2), "spec", "size")
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Another manager owns summary first: forcing takes it over.
	other := body(t, widgetGVK, ns, "w", map[string]any{"summary": "theirs"})
	if err := c.Status().Patch(ctx, w, client.RawPatch("application/apply-patch+yaml", other), client.FieldOwner("other")); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"summary": "2 x grey", "observedGeneration": int64(1)}
	if err := a.Apply(ctx, widgetGVK, ns, "w", "widget", body(t, widgetGVK, ns, "w", want)); err != nil {
		t.Fatal(err)
	}
	status, manager, op := statusManager(t, c, widgetGVK, client.ObjectKeyFromObject(w))
	if status["summary"] != "2 x grey" || status["observedGeneration"] != int64(1) {
		t.Errorf("status %v, want %v", status, want)
	}
	if manager != "widget" || op != metav1.ManagedFieldsOperationApply {
		t.Errorf("the status is managed by %q (%s), want widget (Apply)", manager, op)
	}

	// The API server's refusals come back whole, with their reason and
	// message: a value outside an enum is Invalid; a value of the wrong
	// type fails before validation, as an internal error.
	err := a.Apply(ctx, widgetGVK, ns, "w", "widget", body(t, widgetGVK, ns, "w", map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "Maybe", "reason": "R", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.conditions[0].status") {
		t.Errorf("a status outside the schema's enum: %v, want Invalid naming status.conditions[0].status", err)
	}
	err = a.Apply(ctx, widgetGVK, ns, "w", "widget", body(t, widgetGVK, ns, "w", map[string]any{"observedGeneration": "not a number"}))
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed to create typed patch object") || !strings.Contains(err.Error(), ".status.observedGeneration") {
		t.Errorf("a status of the wrong type: %v, want the API server's internal error naming .status.observedGeneration", err)
	}
	err = a.Apply(ctx, widgetGVK, ns, "missing", "widget", body(t, widgetGVK, ns, "missing", want))
	if !apierrors.IsNotFound(err) {
		t.Errorf("the status of a missing object: %v, want NotFound", err)
	}
	// The kind's resource is looked up again after a NotFound, and works.
	if err := a.Apply(ctx, widgetGVK, ns, "w", "widget", body(t, widgetGVK, ns, "w", map[string]any{"summary": "again"})); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := statusManager(t, c, widgetGVK, client.ObjectKeyFromObject(w)); status["summary"] != "again" {
		t.Errorf("status %v after the NotFound, want summary again", status)
	}
}

// TestApplyClusterScoped: a cluster-scoped kind's status is written with
// no namespace in its path, whatever namespace the caller passes.
func TestApplyClusterScoped(t *testing.T) {
	a, c := applier(t)
	ctx := context.Background()
	m := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "statusapply-" + strings.ToLower(t.Name())},
		Spec: v1alpha1.ReconcileModuleSpec{Source: v1alpha1.Source{URL: "https://example.com/m.wasm", SHA256: strings.Repeat("0", 64)}}}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), m) })
	want := map[string]any{"digest": "sha256:0123", "observedGeneration": int64(1)}
	if err := a.Apply(ctx, moduleGVK, "ignored", m.Name, "wasmreconcile", body(t, moduleGVK, "", m.Name, want)); err != nil {
		t.Fatal(err)
	}
	status, manager, _ := statusManager(t, c, moduleGVK, client.ObjectKey{Name: m.Name})
	if status["digest"] != "sha256:0123" || manager != "wasmreconcile" {
		t.Errorf("status %v by %q, want digest sha256:0123 by wasmreconcile", status, manager)
	}
}

// TestApplyUnknownKind: a kind the API server does not serve is an error
// naming it, before any write.
func TestApplyUnknownKind(t *testing.T) {
	a, _ := applier(t)
	gvk := schema.GroupVersionKind{Group: "nowhere.example.com", Version: "v1", Kind: "Nothing"}
	err := a.Apply(context.Background(), gvk, "default", "x", "m", []byte(`{}`))
	if err == nil || !strings.Contains(err.Error(), "Nothing") {
		t.Errorf("an unknown kind: %v, want an error naming it", err)
	}
}
