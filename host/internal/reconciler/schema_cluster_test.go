package reconciler_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/schemacheck"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSchemaRefusalIsInvalidResponse runs a response whose child has a field
// its schema does not declare through the reconciler, against a real API
// server, and offline with the schema check: both end in InvalidResponse
// (terminal; not ApplyFailed, retried for ever), the cluster's Warning
// Event carries the offline refusal's API server message, and the child is
// not created without the field (a plain create would drop it with only a
// warning, and every later apply would fail).
func TestSchemaRefusalIsInvalidResponse(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/respond", runOptions{})
	response := map[string]any{
		"status": map[string]any{"phase": "Typo"},
		"children": []any{map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "typo"},
			"dataa":    map[string]any{"k": "v"},
		}},
	}
	h.create(responderGVK, "typo", map[string]any{"response": response})

	// Offline, with the schemas the operator ships for built-in kinds.
	ctx := context.Background()
	m, err := eng.Load(ctx, "respond", testwasm.Build(t, "./internal/testguests/respond"), engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	checker, err := schemacheck.LoadDir(filepath.Join(testwasm.RepoRoot(), "host", "internal", "testenv", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	o := offline.Run(ctx, m, offline.Input{Object: h.get(responderGVK, "typo").Object}, offline.Options{Schemas: checker})
	if o.Kind() != protocol.InvalidResponse || !protocol.Terminal(o.Err) {
		t.Fatalf("offline: %s (terminal %v): %v; want a terminal InvalidResponse", o.Kind(), protocol.Terminal(o.Err), o.Err)
	}
	const field = ".dataa: field not declared in schema"
	if !strings.Contains(o.Err.Error(), field) {
		t.Fatalf("offline refusal %q does not name %q", o.Err, field)
	}

	testenv.Eventually(t, 2*time.Minute, "an InvalidResponse Warning naming the field", func() error {
		e, err := h.findEvent("typo", corev1.EventTypeWarning, string(protocol.InvalidResponse))
		if err != nil {
			return err
		}
		if !strings.Contains(e.Note, "failed to create typed patch object") || !strings.Contains(e.Note, field) {
			t.Fatalf("the cluster's Event %q does not carry server-side apply's refusal %q", e.Note, field)
		}
		return nil
	})
	if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: "typo"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the child with an undeclared field was created without it (err %v)", err)
	}
	if got := h.metric(h.metrics.ReconcileTotal.WithLabelValues("respond", string(protocol.ApplyFailed))); got != 0 {
		t.Errorf("%v ApplyFailed outcomes: a schema refusal is not a transient failure", got)
	}
}
