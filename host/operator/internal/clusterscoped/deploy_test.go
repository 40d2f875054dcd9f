package clusterscoped_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestDeployManifestsApply renders config/default with kubectl's built-in
// kustomize and applies it with server-side apply to the real API server,
// then server-side dry-runs the samples (the example modules' RBAC and a
// ReconcileModule) against the CRD it installed. The Deployment must have
// three replicas with leader election, sharding and ReconcileModules on.
func TestDeployManifestsApply(t *testing.T) {
	cp := testenv.Shared(t)
	assets, cfg := cp.Assets(), cp.Config
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = testwasm.RepoRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The CRD is installed already (by the shared control plane), with the
	// same content: applying it again must be a no-op, not a conflict.
	out := kubectl("apply", "--server-side", "-k", "config/default")
	t.Logf("kubectl apply -k config/default:\n%s", out)
	kubectl("wait", "--for=condition=Established", "crd/reconcilemodules.wasmreconcile.io", "--timeout=60s")
	kubectl("apply", "--server-side", "--dry-run=server", "-f", "config/samples/example_modules_rbac.yaml")
	kubectl("apply", "--server-side", "--dry-run=server", "-f", "config/samples/widget_reconcilemodule.yaml")

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "wasmreconcile-system", Name: "wasmreconcile-operator"}, &d); err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || !slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--sharding") || !slices.Contains(args, "--reconcile-modules") {
		t.Errorf("Deployment: replicas %v, args %v; want 3 replicas with --leader-elect, --sharding and --reconcile-modules", d.Spec.Replicas, args)
	}
	if sc := d.Spec.Template.Spec.Containers[0].SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the operator container's root filesystem is not read-only")
	}
	podName := false
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		podName = podName || (e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !podName {
		t.Error("the operator container has no POD_NAME from metadata.name (the shard identity)")
	}
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "wasmreconcile-system", Name: "wasmreconcile-operator"}, &pdb); err != nil {
		t.Fatalf("the PodDisruptionBudget: %v", err)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("the PodDisruptionBudget %+v does not keep one of the Deployment's pods", pdb.Spec)
	}
}
