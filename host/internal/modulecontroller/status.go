package modulecontroller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// reportLimits puts the limits of the version now serving in status, and
// the LimitsClamped condition; a Warning Event says what was clamped, once
// per new set of clamps (not again on a reload that clamps the same).
func (c *Controller) reportLimits(obj *v1alpha1.ReconcileModule, status *v1alpha1.ReconcileModuleStatus, l engine.Limits, clamped []string) {
	status.EffectiveLimits = &v1alpha1.EffectiveLimits{Fuel: l.Fuel, Timeout: metav1.Duration{Duration: l.Timeout}, MemoryPages: l.MemoryLimitPages}
	if len(clamped) == 0 {
		setCondition(status, obj, ConditionLimitsClamped, metav1.ConditionFalse, ReasonWithinCeilings, "every limit is within the operator's ceilings")
		return
	}
	msg := "limits over the operator's ceilings were clamped: " + strings.Join(clamped, "; ") +
		"; lower spec.limits (or the module's manifest limits), or raise the ceiling"
	prev := meta.FindStatusCondition(status.Conditions, ConditionLimitsClamped)
	if prev == nil || prev.Status != metav1.ConditionTrue || prev.Message != msg {
		c.event(obj, corev1.EventTypeWarning, ReasonLimitsClamped, "Load", "%s", protocol.Cap(msg))
	}
	setCondition(status, obj, ConditionLimitsClamped, metav1.ConditionTrue, ReasonLimitsClamped, msg)
}

// onHealth records a module's load-health change as an Event on its
// ReconcileModule, in the leader; the other replicas, whose supervisors
// run module controllers too when sharded, log it (one writer of
// module-level Events).
func (c *Controller) onHealth(e supervisor.HealthEvent) {
	c.mu.Lock()
	obj := c.objects[e.Module]
	c.mu.Unlock()
	if obj == nil {
		return
	}
	if !c.leader() {
		prefix := "module load health: "
		if e.Warning {
			prefix = "WARNING: " + prefix
		}
		c.log.Info(prefix+e.Message, "module", e.Module, "reason", e.Reason, "event", "left to the elected replica")
		return
	}
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	c.recorder.Eventf(obj, nil, typ, e.Reason, "Sync", "%s", protocol.Cap(e.Message))
}

// failed records a load failure: LoadFailed with the reason, Ready as it is
// (a previous version may still serve), a Warning Event, and lastError. It
// returns nil for errors that only a spec change fixes, and the error (to
// retry with backoff) for fetch failures.
func (c *Controller) failed(ctx context.Context, obj *v1alpha1.ReconcileModule, reason string, err error) error {
	status := c.statusOf(obj)
	setCondition(&status, obj, ConditionLoadFailed, metav1.ConditionTrue, reason, err.Error())
	setCondition(&status, obj, ConditionLoading, metav1.ConditionFalse, reason, "")
	if a, ok := c.applied.get(obj.Name); ok && a.uid == obj.UID {
		setCondition(&status, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, "module "+status.Digest+" still serving; the new spec failed to load")
	} else {
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, reason, "no version of the module has loaded")
	}
	status.LastError = err.Error()
	status.ObservedGeneration = obj.Generation
	c.event(obj, corev1.EventTypeWarning, reason, "Load", "%s", protocol.Cap(err.Error()))
	log.FromContext(ctx).Info("module not loaded", "reason", reason, "error", err.Error())
	if werr := c.writeStatus(ctx, obj, status); werr != nil {
		return werr
	}
	if reason == ReasonFetchFailed {
		return err // the source may appear: retry with backoff
	}
	return nil
}

// statusOf returns the status last written for obj, or obj's own. The
// cache may lag behind our own writes; starting from it could write an old
// condition back.
func (c *Controller) statusOf(obj *v1alpha1.ReconcileModule) v1alpha1.ReconcileModuleStatus {
	if w, ok := c.written.get(obj.Name); ok && w.uid == obj.UID {
		return *w.status.DeepCopy()
	}
	return *obj.Status.DeepCopy()
}

// writeStatus applies status in the leader; a standby only keeps it, and
// writes it (through the periodic refresh) once elected.
func (c *Controller) writeStatus(ctx context.Context, obj *v1alpha1.ReconcileModule, status v1alpha1.ReconcileModuleStatus) error {
	c.written.set(obj.Name, writtenStatus{uid: obj.UID, status: *status.DeepCopy()})
	if !c.leader() {
		return nil
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	patch.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ReconcileModule"))
	patch.SetName(obj.Name)
	if err := c.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner("wasmreconcile"), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing ReconcileModule %s status: %w", obj.Name, err)
	}
	return nil
}

// setCondition sets a condition, keeping lastTransitionTime when its status
// does not change.
func setCondition(status *v1alpha1.ReconcileModuleStatus, obj *v1alpha1.ReconcileModule, typ string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: protocol.Truncate(msg, 32768), ObservedGeneration: obj.Generation})
}
