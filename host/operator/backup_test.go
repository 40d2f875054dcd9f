package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestBackupTriggerAndCascade runs modules/backup against the real API
// server and kube-controller-manager:
//
//   - a Backup whose PersistentVolumeClaim does not exist waits
//     (TargetMissing) and asks for no requeue;
//   - creating the claim turns it Ready through the module's trigger on
//     spec.target alone: nothing else would reconcile the Backup (the
//     module never requeues, and the manager's resync is hours away);
//   - deleting the claim makes it TargetMissing again and prunes its
//     children, and creating the claim again brings them back;
//   - deleting the Backup deletes its CronJob and ConfigMap through the
//     garbage collector, by their owner references: the module has no
//     finalizer.
func TestBackupTriggerAndCascade(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	testenv.Shared(t).RequireControllerManager(t)
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{testwasm.BuildFile(t, "./backup")}})

	backup := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Backup",
		"metadata": map[string]any{"name": "nightly", "namespace": e.NS},
		"spec":     map[string]any{"target": "data", "schedule": "0 3 * * *"},
	}}
	if err := e.C.Create(ctx, backup); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, "nightly", "False", "TargetMissing")

	// The module asks for no requeue here (modules/backup's case
	// 01-target-missing checks requeueAfterSeconds: 0).

	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: e.NS},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := e.C.Create(ctx, claim.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, "nightly", "True", "Scheduled")
	cron := &batchv1.CronJob{}
	if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "nightly-backup"}, cron); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(cron); ref == nil || ref.Kind != "Backup" || ref.Name != "nightly" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Fatalf("CronJob's controller reference %+v, want the Backup, blocking its deletion", ref)
	}
	if got := cron.Spec.JobTemplate.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; got == nil || got.ClaimName != "data" {
		t.Fatalf("CronJob mounts %+v, want the claim data", got)
	}

	// The claim goes (the persistentvolumeclaim-protection controller
	// lets it, as no Pod uses it): the trigger sees the deletion.
	if err := e.C.Delete(ctx, claim.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, "nightly", "False", "TargetMissing")
	waitGone(t, e, &batchv1.CronJob{}, "nightly-backup")
	waitGone(t, e, &corev1.ConfigMap{}, "nightly-backup")
	if err := e.C.Create(ctx, claim.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, "nightly", "True", "Scheduled")

	// Deleting the Backup cascades to its children through their owner
	// references, by the garbage collector.
	if err := e.C.Delete(ctx, backup); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, &batchv1.CronJob{}, "nightly-backup")
	waitGone(t, e, &corev1.ConfigMap{}, "nightly-backup")
}

// waitReady waits until the Backup's Ready condition has status and reason.
func waitReady(t *testing.T, e optest.Env, name, status, reason string) {
	t.Helper()
	testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("Backup %s Ready=%s (%s)", name, status, reason), func() error {
		b := &unstructured.Unstructured{}
		b.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
		b.SetKind("Backup")
		if err := e.C.Get(context.Background(), client.ObjectKey{Namespace: e.NS, Name: name}, b); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(b.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				if m["status"] == status && m["reason"] == reason {
					return nil
				}
				return fmt.Errorf("Ready is %v (%v): %v", m["status"], m["reason"], m["message"])
			}
		}
		return fmt.Errorf("no Ready condition in %v", b.Object["status"])
	})
}

// waitGone waits until the named object of obj's kind no longer exists; on
// a timeout it shows the kube-controller-manager's last log lines.
func waitGone(t *testing.T, e optest.Env, obj client.Object, name string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := e.C.Get(context.Background(), client.ObjectKey{Namespace: e.NS, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			log := testenv.Shared(t).ControllerManagerLog()
			lines := strings.Split(log, "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Fatalf("%T %s still exists after 3m (err %v); kube-controller-manager's log ends:\n%s", obj, name, err, strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
