package operator_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSpinningModuleBesideHealthyOne runs the widget module beside the
// misbehave module with four Gadgets stuck in `for {}`. The spinners are
// preempted again and again (counted), and the widget module keeps
// converging every change meanwhile. The widget's change-to-status latency
// with and without the spinners is logged; as a timing figure it belongs to
// a benchmark, not to a pass/fail check on a loaded CI machine.
func TestSpinningModuleBesideHealthyOne(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds", "host/reconciler/testdata")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	startOperator(t, cfg, operator.Options{
		Modules:            []string{testwasm.BuildFile(t, "./widget"), testwasm.BuildFile(t, "./internal/testguests/misbehave")},
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
		Limits: engine.Limits{Timeout: 200 * time.Millisecond},
	})
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("healthy", 1)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "healthy", "1 x grey")
	latency := func(label string, from int64) []time.Duration {
		var out []time.Duration
		for size := from; size < from+10; size++ {
			start := time.Now()
			updateWidgetSize(t, c, "healthy", size)
			waitSummary(t, c, "healthy", fmt.Sprintf("%d x grey", size))
			out = append(out, time.Since(start))
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		t.Logf("%s: widget change-to-status p50 %s, max %s", label, out[len(out)/2].Round(time.Millisecond), out[len(out)-1].Round(time.Millisecond))
		return out
	}
	latency("alone", 10)

	preempted := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "deadline")) +
		testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "fuel"))
	for i := 0; i < 4; i++ {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.wasmreconcile.io/v1", "kind": "Gadget",
			"metadata": map[string]any{"namespace": "default", "name": fmt.Sprintf("spinner-%d", i)},
			"spec":     map[string]any{"mode": "spin"},
		}}
		if err := c.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "deadline"))+
		testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "fuel")) < preempted+4 {
		if time.Now().After(deadline) {
			t.Fatal("the spinning Gadgets were not preempted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	latency("beside 4 spinners", 30)
	after := testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "deadline")) +
		testutil.ToFloat64(metrics.Preemptions.WithLabelValues("misbehave", "fuel"))
	t.Logf("spinner preemptions while the widget converged 10 changes: %v", after-preempted)
}
