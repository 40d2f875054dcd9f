package reconciler_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

var responderGVK = schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Responder"}

// TestProtocolParity runs every case of the respond test guest (one per
// rule of the reconcile protocol, in
// modules/internal/testguests/respond/testdata/cases) twice: offline, as
// `operator test` does, and in a real cluster through the reconciler. Each
// response the offline run refuses, the cluster refuses with a Warning
// Event whose reason is the same kind and whose message is the same; each
// response it accepts, the cluster applies.
func TestProtocolParity(t *testing.T) {
	t.Parallel() // isolated: a namespace and a manager of its own
	h := run(t, "./internal/testguests/respond", runOptions{})
	cases, err := modtest.LoadDir(filepath.Join(testwasm.RepoRoot(), "modules", "internal", "testguests", "respond", "testdata", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := eng.Load(ctx, "respond", testwasm.Build(t, "./internal/testguests/respond"), engine.Limits{MaxInstances: 1, FreshInstancePerCall: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	refused := 0
	for i, c := range cases {
		name := fmt.Sprintf("case-%02d", i)
		obj := &unstructured.Unstructured{Object: c.Input.Object}
		obj = obj.DeepCopy()
		obj.SetNamespace(h.ns)
		obj.SetName(name)
		in := c.Input
		in.Object = obj.Object
		o := offline.Run(ctx, m, in, offline.Options{})
		want := protocol.Success
		if c.Expect.Error != nil {
			want = protocol.Kind(c.Expect.Error.Kind)
		}
		if o.Kind() != want {
			t.Fatalf("%s: offline: %s (%v), want %s", c.Name, o.Kind(), o.Err, want)
		}
		if err := h.k8s.Create(ctx, obj); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		kind := o.Kind()
		t.Logf("%s: offline %s", c.Name, kind)
		if kind == protocol.Success {
			want := len(o.Response.Desired)
			testenv.Eventually(t, time.Minute, c.Name+": status and children applied", func() error {
				u := h.get(responderGVK, name)
				if _, ok := u.Object["status"]; !ok {
					return fmt.Errorf("no status")
				}
				var cms corev1.ConfigMapList
				if err := h.k8s.List(ctx, &cms, client.InNamespace(h.ns)); err != nil {
					return err
				}
				n := 0
				for _, cm := range cms.Items {
					if ref := cm.OwnerReferences; len(ref) == 1 && ref[0].Name == name {
						n++
					}
				}
				if n != want {
					return fmt.Errorf("%d children, want %d", n, want)
				}
				return nil
			})
			continue
		}
		refused++
		testenv.Eventually(t, time.Minute, c.Name+": the same refusal in the cluster", func() error {
			e, err := h.findEvent(name, corev1.EventTypeWarning, string(kind))
			if err != nil {
				return err
			}
			if e.Note != o.Err.Error() {
				return fmt.Errorf("the cluster says %q\nbut offline says %q", e.Note, o.Err.Error())
			}
			return nil
		})
		if kind == protocol.ReconcileFailed {
			// A guest error keeps its status, as offline.
			testenv.Eventually(t, time.Minute, c.Name+": status applied", func() error {
				if statusString(h.get(responderGVK, name), "phase") != o.Response.Status["phase"] {
					return fmt.Errorf("status %v", h.get(responderGVK, name).Object["status"])
				}
				return nil
			})
		}
	}
	if refused < 10 {
		t.Errorf("only %d cases were refusals; the parity test is meant to cover every rule", refused)
	}
	// The response that tried a cluster-admin binding was refused before
	// anything was written: nothing of it exists.
	var crbs rbacv1.ClusterRoleBindingList
	if err := h.k8s.List(ctx, &crbs); err != nil {
		t.Fatal(err)
	}
	for _, crb := range crbs.Items {
		if crb.Name == "grab" {
			t.Errorf("the ClusterRoleBinding of a refused response exists")
		}
	}
	if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "c"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a child in another namespace was written (err %v)", err)
	}
}
