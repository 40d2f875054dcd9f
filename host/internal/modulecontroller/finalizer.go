package modulecontroller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
)

// finalize handles a ReconcileModule being deleted: its module is removed
// at once and, while the supervisor drains the module's finalizer from the
// module's objects, the Draining condition counts the objects still
// holding it; once drained, DrainFinalizer is removed and the object goes.
func (c *Controller) finalize(ctx context.Context, obj *v1alpha1.ReconcileModule) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	if c.supervisor.RemoveOwned(obj.Name, ownerOf(obj.Name)) {
		logger.Info("ReconcileModule deleted; module stopped", "module", obj.Name)
	}
	c.mu.Lock()
	delete(c.objects, obj.Name) // no health Events on an object being deleted
	c.mu.Unlock()
	c.applied.del(obj.Name)
	c.failedGen.del(obj.Name)
	if !controllerutil.ContainsFinalizer(obj, DrainFinalizer) {
		return ctrl.Result{}, nil // nothing to wait for: it goes once other finalizers do
	}
	if d, ok := c.supervisor.Draining(obj.Name); ok {
		msg := fmt.Sprintf("removing finalizer %s from the module's %s objects: counting", d.Finalizer, d.Kind.Kind)
		if d.Remaining >= 0 {
			msg = fmt.Sprintf("removing finalizer %s from the module's %s objects: %d still hold it (%d released)", d.Finalizer, d.Kind.Kind, d.Remaining, d.Released)
		}
		status := c.statusOf(obj)
		setCondition(&status, obj, ConditionDraining, metav1.ConditionTrue, ReasonDraining, msg)
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonDeleting, "the ReconcileModule is being deleted: the module is stopped")
		if err := c.writeStatus(ctx, obj, status); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if !c.leader() {
		return ctrl.Result{}, nil
	}
	if err := c.patchFinalizer(ctx, obj, false); err != nil {
		return ctrl.Result{}, err
	}
	c.written.del(obj.Name)
	logger.Info("module finalizer drained; ReconcileModule released", "module", obj.Name)
	return ctrl.Result{}, nil
}

// patchFinalizer adds or removes DrainFinalizer on obj, with optimistic
// locking so that no other finalizer is lost; a conflict (our own status
// writes make the cached object stale) is retried from the live object.
func (c *Controller) patchFinalizer(ctx context.Context, obj *v1alpha1.ReconcileModule, add bool) error {
	cur := obj.DeepCopy()
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			cur = &v1alpha1.ReconcileModule{}
			if err := c.reader.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return err
			}
			if cur.UID != obj.UID {
				return nil // deleted and created again: not ours to change
			}
		}
		first = false
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		var changed bool
		if add {
			changed = controllerutil.AddFinalizer(cur, DrainFinalizer)
		} else {
			changed = controllerutil.RemoveFinalizer(cur, DrainFinalizer)
		}
		if !changed {
			return nil
		}
		return c.client.Patch(ctx, cur, patch)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ReconcileModule %s: finalizer %s: %w", obj.Name, DrainFinalizer, err)
	}
	return nil
}
