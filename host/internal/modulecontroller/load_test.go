package modulecontroller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
)

// TestSpecPolicy: every field of spec.limits reaches the module's policy
// layer, and an unset field stays zero, so that the operator's flags
// apply (policy.Policy.Merge).
func TestSpecPolicy(t *testing.T) {
	spec := v1alpha1.ReconcileModuleSpec{
		Limits: v1alpha1.Limits{
			Fuel: 5000, Timeout: &metav1.Duration{Duration: 2 * time.Second}, MemoryPages: 64,
			IdleTimeout:             &metav1.Duration{Duration: 8760 * time.Hour},
			MaxConcurrentReconciles: 3, Rate: v1alpha1.Rate{QPS: 2.5, Burst: 7},
		},
		ReadNamespaces: []string{"shared"},
	}
	got := specPolicy(spec)
	want := policy.Policy{
		Limits:                  engine.Limits{Fuel: 5000, Timeout: 2 * time.Second, MemoryLimitPages: 64, IdleModuleTimeout: 8760 * time.Hour},
		MaxConcurrentReconciles: 3, RateLimit: policy.RateLimit{QPS: 2.5, Burst: 7}, ReadNamespaces: []string{"shared"},
	}
	if got.Limits != want.Limits || got.MaxConcurrentReconciles != want.MaxConcurrentReconciles || got.RateLimit != want.RateLimit ||
		len(got.ReadNamespaces) != 1 || got.ReadNamespaces[0] != "shared" {
		t.Errorf("specPolicy:\n got %+v\nwant %+v", got, want)
	}
	if empty := specPolicy(v1alpha1.ReconcileModuleSpec{}); empty.Limits != (engine.Limits{}) || empty.ReadNamespaces != nil {
		t.Errorf("specPolicy of an empty spec set %+v; it must leave the operator's flags alone", empty)
	}
	// Over the operator's flags, the spec's idle timeout wins.
	flags := policy.Policy{Limits: engine.Limits{IdleModuleTimeout: 15 * time.Minute, Fuel: 1 << 20}}
	if merged := flags.Merge(got); merged.Limits.IdleModuleTimeout != 8760*time.Hour || merged.Limits.Fuel != 5000 {
		t.Errorf("merged over the flags: %+v", merged.Limits)
	}
}
