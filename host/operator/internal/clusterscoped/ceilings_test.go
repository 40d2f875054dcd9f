package clusterscoped_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestReconcileModuleLimitsSchema: the API server refuses spec.limits over
// the CRD's absolute maxima.
func TestReconcileModuleLimitsSchema(t *testing.T) {
	e := optest.NewEnv(t)
	for _, bad := range []struct {
		limits v1alpha1.Limits
		want   []string
	}{
		{v1alpha1.Limits{MemoryPages: 70000}, []string{"spec.limits.memoryPages", "65536"}},
		{v1alpha1.Limits{Fuel: 2_000_000_000_000}, []string{"spec.limits.fuel", "1000000000000"}},
		{v1alpha1.Limits{Timeout: &metav1.Duration{Duration: 2 * time.Hour}}, []string{"spec.limits.timeout must be at most 1h"}},
		// A tenant may not make the operator reload its module over and
		// over: each wake costs about 200 reconciles' CPU.
		{v1alpha1.Limits{IdleTimeout: &metav1.Duration{Duration: 59 * time.Second}}, []string{"spec.limits.idleTimeout must be within 1m and 8760h"}},
		{v1alpha1.Limits{IdleTimeout: &metav1.Duration{Duration: 9000 * time.Hour}}, []string{"spec.limits.idleTimeout must be within 1m and 8760h"}},
	} {
		rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "over-maxima"}, Spec: v1alpha1.ReconcileModuleSpec{
			Source: v1alpha1.Source{SHA256: strings.Repeat("0", 64), File: "/m/a.wasm"}, Limits: bad.limits}}
		err := e.C.Create(context.Background(), rm)
		if err == nil {
			_ = e.C.Delete(context.Background(), rm)
			t.Errorf("creating a ReconcileModule with limits %+v succeeded, want it refused", bad.limits)
			continue
		}
		for _, w := range bad.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("limits %+v: error %q does not contain %q", bad.limits, err, w)
			}
		}
	}
	// At the maxima it is admitted (the operator's ceilings clamp it).
	rm := optest.CreateModule(t, e.C, "at-maxima", v1alpha1.Source{SHA256: strings.Repeat("0", 64), File: "/m/a.wasm"})
	optest.SetModuleSpec(t, e.C, rm.Name, func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Limits = v1alpha1.Limits{Fuel: 1_000_000_000_000, MemoryPages: 65536, Timeout: &metav1.Duration{Duration: time.Hour},
			IdleTimeout: &metav1.Duration{Duration: 8760 * time.Hour}}
	})
	optest.SetModuleSpec(t, e.C, rm.Name, func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Limits.IdleTimeout = &metav1.Duration{Duration: time.Minute}
	})
}

// TestReconcileModuleCeilings: a ReconcileModule whose spec.limits exceed
// the operator's ceilings loads with the limits clamped; its status says
// so (LimitsClamped, effectiveLimits) with one Warning Event, not repeated
// by a reload that clamps the same, and its calls run under the clamped
// limits. Limits within the ceilings clear the condition.
func TestReconcileModuleCeilings(t *testing.T) {
	e := optest.NewEnv(t)
	ceilings := engine.Limits{Fuel: 100_000, Timeout: 2 * time.Second, MemoryLimitPages: 512}
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ReconcileModules: true, Engine: operator.EngineOptions{Ceilings: ceilings}, ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second}})
	ctx := context.Background()

	b := testwasm.BuildVersion(t, "./widget", "1")
	file := filepath.Join(t.TempDir(), "widget.wasm")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{
		Source: v1alpha1.Source{SHA256: supervisor.Digest(b), File: file},
		Limits: v1alpha1.Limits{Fuel: 1_000_000_000, Timeout: &metav1.Duration{Duration: 10 * time.Minute}, MemoryPages: 65536},
	}}
	if err := e.C.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.C.Delete(context.Background(), rm) })

	got := optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLimitsClamped, metav1.ConditionTrue, modulecontroller.ReasonLimitsClamped)
	msg := meta.FindStatusCondition(got.Status.Conditions, modulecontroller.ConditionLimitsClamped).Message
	for _, want := range []string{
		"fuel 1000000000 clamped to the ceiling 100000 (--max-fuel)",
		"timeout 10m0s clamped to the ceiling 2s (--max-timeout)",
		"memory 65536 pages (4Gi) clamped to the ceiling 512 pages (32Mi) (--max-memory)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("LimitsClamped message %q does not contain %q", msg, want)
		}
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, modulecontroller.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a clamped module must still serve: Ready %+v", c)
	}
	want := v1alpha1.EffectiveLimits{Fuel: 100_000, Timeout: metav1.Duration{Duration: 2 * time.Second}, MemoryPages: 512}
	if got.Status.EffectiveLimits == nil || *got.Status.EffectiveLimits != want {
		t.Errorf("status.effectiveLimits = %+v, want %+v", got.Status.EffectiveLimits, want)
	}
	if ev := optest.WaitModuleEvent(t, e.C, got.UID, modulecontroller.ReasonLimitsClamped); !strings.Contains(ev, "fuel 1000000000 clamped") {
		t.Errorf("LimitsClamped Event %q", ev)
	}

	// The module runs under the clamped fuel: a Widget's reconcile needs
	// about 400,000 units, more than the ceiling, never the spec's 10^9.
	if err := e.C.Create(ctx, optest.Widget(e.NS, "w", 2)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "a FuelExhausted Event on the Widget with the ceiling as budget", func() error {
		var events corev1.EventList
		if err := e.C.List(ctx, &events, client.InNamespace(e.NS)); err != nil {
			return err
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == "w" && ev.Reason == "FuelExhausted" {
				if !strings.Contains(ev.Message, "(budget 100000)") {
					return fmt.Errorf("FuelExhausted Event %q: not the ceiling's budget", ev.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})

	// A reload that clamps the same (a new config) records no second
	// Event. (An Event recorded late would make this pass wrongly, never
	// fail wrongly.)
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Config = &apiextensionsv1.JSON{Raw: []byte(`{"reloaded":true}`)}
	})
	testenv.Eventually(t, 2*time.Minute, "the new config loaded", func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.C.Get(ctx, client.ObjectKey{Name: "widget"}, rm); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(rm.Status.Conditions, modulecontroller.ConditionLoading); rm.Status.ObservedGeneration != rm.Generation || c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("observedGeneration %d of %d, Loading %+v", rm.Status.ObservedGeneration, rm.Generation, c)
		}
		return nil
	})
	var events corev1.EventList
	if err := e.C.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	n := int32(0)
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == got.UID && ev.Reason == modulecontroller.ReasonLimitsClamped {
			n += max(ev.Count, 1)
		}
	}
	if n != 1 {
		t.Errorf("%d LimitsClamped Events, want 1: the clamps did not change", n)
	}

	// Limits within the ceilings: nothing clamped, the condition clears.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Limits = v1alpha1.Limits{Fuel: 90_000, Timeout: &metav1.Duration{Duration: time.Second}, MemoryPages: 512}
	})
	got = optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLimitsClamped, metav1.ConditionFalse, modulecontroller.ReasonWithinCeilings)
	want = v1alpha1.EffectiveLimits{Fuel: 90_000, Timeout: metav1.Duration{Duration: time.Second}, MemoryPages: 512}
	if got.Status.EffectiveLimits == nil || *got.Status.EffectiveLimits != want {
		t.Errorf("status.effectiveLimits = %+v, want %+v", got.Status.EffectiveLimits, want)
	}
}
