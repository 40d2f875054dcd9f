package wholeprocess_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSpinningModuleBesideHealthyOne runs the widget module beside the
// misbehave module with four Gadgets stuck in `for {}`. The spinners are
// preempted again and again (counted), and the widget module keeps
// converging every change meanwhile. The widget's change-to-status latency
// with and without the spinners is logged; as a timing figure its ratio is
// reported by BenchmarkIsolation, not checked on a loaded CI machine.
func TestSpinningModuleBesideHealthyOne(t *testing.T) {
	alone, beside, preemptions := measureIsolation(t)
	t.Logf("alone: widget change-to-status p50 %s, max %s", alone[len(alone)/2].Round(time.Millisecond), alone[len(alone)-1].Round(time.Millisecond))
	t.Logf("beside 4 spinners: p50 %s, max %s", beside[len(beside)/2].Round(time.Millisecond), beside[len(beside)-1].Round(time.Millisecond))
	t.Logf("spinner preemptions while the widget converged 10 changes: %v", preemptions)
	if preemptions < 1 {
		t.Error("the spinners were not preempted while the widget converged")
	}
}

// BenchmarkIsolation reports the healthy widget module's change-to-status
// latency beside four spinning Gadgets relative to alone, measured in one
// run: p50-ratio and max-ratio; and the longest of ten full garbage
// collections of the operator's process, alone and beside the spinners
// (gc-alone-max-ms, gc-beside-max-ms). Run with `make bench`.
func BenchmarkIsolation(b *testing.B) {
	var ratios50, ratiosMax float64
	for i := 0; i < b.N; i++ {
		alone, beside, _, gcAlone, gcBeside := measureIsolationGC(b)
		b.ReportMetric(gcAlone[len(gcAlone)-1].Seconds()*1000, "gc-alone-max-ms")
		b.ReportMetric(gcBeside[len(gcBeside)-1].Seconds()*1000, "gc-beside-max-ms")
		ratios50 += float64(beside[len(beside)/2]) / float64(alone[len(alone)/2])
		ratiosMax += float64(beside[len(beside)-1]) / float64(alone[len(alone)-1])
		b.ReportMetric(alone[len(alone)/2].Seconds()*1000, "alone-p50-ms")
		b.ReportMetric(beside[len(beside)/2].Seconds()*1000, "beside-p50-ms")
	}
	b.ReportMetric(ratios50/float64(b.N), "p50-ratio")
	b.ReportMetric(ratiosMax/float64(b.N), "max-ratio")
}

// measureIsolation returns the widget's sorted change-to-status latencies
// alone and beside four spinning Gadgets, and the spinners' preemptions
// during the second measurement.
func measureIsolation(tb testing.TB) (alone, beside []time.Duration, preemptions float64) {
	alone, beside, preemptions, _, _ = measureIsolationGC(tb)
	return alone, beside, preemptions
}

// gcTimes runs runtime.GC n times and returns the sorted durations: how long
// a full collection takes in this process (which runs the operator).
func gcTimes(n int) []time.Duration {
	var out []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		runtime.GC()
		out = append(out, time.Since(start))
		time.Sleep(10 * time.Millisecond)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// measureIsolationGC is measureIsolation, also timing full garbage
// collections alone and beside the spinners.
func measureIsolationGC(tb testing.TB) (alone, beside []time.Duration, preemptions float64, gcAlone, gcBeside []time.Duration) {
	cfg := testenv.Shared(tb).Config
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ns := testenv.Namespace(tb, c)
	reg := prometheus.NewRegistry()
	optest.Start(tb, cfg, operator.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true, Namespaces: []string{ns},
	}, operator.Options{
		Modules:    []string{testwasm.BuildFile(tb, "./widget"), testwasm.BuildFile(tb, "./internal/testguests/misbehave")},
		Policy:     policy.Policy{Limits: engine.Limits{Timeout: 200 * time.Millisecond}},
		Registerer: reg,
	})
	ctx := context.Background()
	if err := c.Create(ctx, optest.Widget(ns, "healthy", 1)); err != nil {
		tb.Fatal(err)
	}
	optest.WaitSummary(tb, c, ns, "healthy", "1 x grey")
	optest.SummaryPoll = 5 * time.Millisecond // resolution of the latencies below
	defer func() { optest.SummaryPoll = 100 * time.Millisecond }()
	latency := func(from int64) []time.Duration {
		var out []time.Duration
		for size := from; size < from+10; size++ {
			start := time.Now()
			optest.UpdateWidgetSize(tb, c, ns, "healthy", size)
			optest.WaitSummary(tb, c, ns, "healthy", fmt.Sprintf("%d x grey", size))
			out = append(out, time.Since(start))
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	alone = latency(10)
	gcAlone = gcTimes(10)

	preempted := func() float64 {
		return optest.Gather(tb, reg, "wasmreconcile_preemptions_total", map[string]string{"module": "misbehave"})
	}
	before := preempted()
	for i := 0; i < 4; i++ {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.wasmreconcile.io/v1", "kind": "Gadget",
			"metadata": map[string]any{"namespace": ns, "name": fmt.Sprintf("spinner-%d", i)},
			"spec":     map[string]any{"mode": "spin"},
		}}
		if err := c.Create(ctx, g); err != nil {
			tb.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for preempted() < before+4 {
		if time.Now().After(deadline) {
			tb.Fatal("the spinning Gadgets were not preempted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := preempted()
	beside = latency(30)
	gcBeside = gcTimes(10)
	return alone, beside, preempted() - start, gcAlone, gcBeside
}
