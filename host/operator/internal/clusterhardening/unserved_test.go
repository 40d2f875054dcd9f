package clusterhardening_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// latecomerCRD serves the kind of the claim guest's "late" build.
const latecomerCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: latecomers.late.wasmreconcile.io
spec:
  group: late.wasmreconcile.io
  names: {kind: Latecomer, listKind: LatecomerList, plural: latecomers, singular: latecomer}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

var latecomerGVK = schema.GroupVersionKind{Group: "late.wasmreconcile.io", Version: "v1", Kind: "Latecomer"}

// removeCRD deletes the CRD if it exists and waits until it is gone.
func removeCRD(t *testing.T, c client.Client, crd *unstructured.Unstructured) {
	t.Helper()
	if err := c.Delete(context.Background(), crd.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the CRD to be gone", func() error {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(crd), crd.DeepCopy())
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// moduleEvents lists the Events with reason on the ReconcileModule of uid.
func moduleEvents(t *testing.T, c client.Client, uid types.UID, reason string) []corev1.Event {
	t.Helper()
	var events corev1.EventList
	if err := c.List(context.Background(), &events); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// TestModuleWaitsForItsCRD runs a ReconcileModule whose kind has no CRD:
// the module is unready by itself (its Ready condition is False,
// CachesNotSynced, saying which kind and to install its CRD), the
// operator stays ready, and the module's object gets one SyncFailed
// Warning saying the same, however many times the controller retries (and
// the timed SyncFailed warning does not repeat it). Once the CRD is
// installed the module is ready, without a restart, and reconciles.
func TestModuleWaitsForItsCRD(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(latecomerCRD), &crd.Object); err != nil {
		t.Fatal(err)
	}
	removeCRD(t, e.C, crd) // left by an earlier run of the package's tests
	t.Cleanup(func() { removeCRD(t, e.C, crd) })

	b := testwasm.BuildVersion(t, "./internal/testguests/claim", "late")
	file := filepath.Join(t.TempDir(), "claim-late.wasm")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond},
		Health:           operator.HealthOptions{Interval: 200 * time.Millisecond, SyncTimeout: time.Second},
	})
	uid := optest.CreateModule(t, e.C, "claim-late", v1alpha1.Source{SHA256: supervisor.Digest(b), File: file}).UID

	want := "kind Latecomer of late.wasmreconcile.io/v1 is not served by the API server: install its CRD"
	rm := optest.ModuleCondition(t, e.C, "claim-late", "Ready", metav1.ConditionFalse, modulecontroller.ReasonCachesNotSynced)
	if c := meta.FindStatusCondition(rm.Status.Conditions, "Ready"); !strings.Contains(c.Message, want) {
		t.Errorf("Ready message %q, want %q", c.Message, want)
	}
	testenv.Eventually(t, 2*time.Minute, "the operator ready beside the unready module", func() error { return op.Ready() })
	// The controller keeps trying (every 10 s), quietly.
	testenv.Eventually(t, 2*time.Minute, "a third attempt to watch Latecomers", func() error {
		st, _ := optest.ModuleStatus(op, "claim-late")
		if n := st.Unserved[latecomerGVK].Attempts; n < 3 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	})
	msg := optest.WaitModuleEvent(t, e.C, uid, modulecontroller.ReasonSyncFailed)
	if !strings.Contains(msg, "kind Latecomer of late.wasmreconcile.io/v1 is not served by the API server: install its CRD") {
		t.Errorf("SyncFailed message %q", msg)
	}
	if events := moduleEvents(t, e.C, uid, modulecontroller.ReasonSyncFailed); len(events) != 1 || events[0].Count > 1 || events[0].Series != nil {
		t.Errorf("%d SyncFailed Events (first %+v), want one, once", len(events), events)
	}

	crd.SetResourceVersion("")
	if err := e.C.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	optest.ModuleCondition(t, e.C, "claim-late", "Ready", metav1.ConditionTrue, "Loaded")
	late := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"response": map[string]any{"status": map[string]any{"phase": "reconciled"}}}}}
	late.SetGroupVersionKind(latecomerGVK)
	late.SetNamespace(e.NS)
	late.SetName("first")
	testenv.Eventually(t, time.Minute, "a Latecomer to be created", func() error { return e.C.Create(ctx, late) })
	testenv.Eventually(t, 2*time.Minute, "the module to reconcile the Latecomer", func() error {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(latecomerGVK)
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(late), got); err != nil {
			return err
		}
		if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "reconciled" {
			return fmt.Errorf("status %v", got.Object["status"])
		}
		return nil
	})
	optest.WaitModuleEvent(t, e.C, uid, supervisor.ReasonSynced)
	if events := moduleEvents(t, e.C, uid, modulecontroller.ReasonSyncFailed); len(events) != 1 || events[0].Count > 1 {
		t.Errorf("%d SyncFailed Events after the episode, want one", len(events))
	}
}
