package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// BenchmarkShadowOverhead measures what a candidate in shadow costs the
// serving path: one converged reconcile (read the object and its
// children, call the guest, compare; nothing to write) with no candidate
// and with one, interleaved in one run, on the real API server's cache.
// The candidate is the same guest, compiled separately, running in its
// own worker; the serving path only hands it a copy of the request and the
// decoded answer. Goal: with/without ≤ 1.2 (docs/benchmarks.md).
func BenchmarkShadowOverhead(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp := testenv.Shared(b)
	k8s, err := client.New(cp.Config, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ns := testenv.Namespace(b, k8s)
	wasm := testwasm.Build(b, "./internal/testguests/claim")
	module, err := eng.Load(ctx, "claim", wasm, engine.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer module.Close(ctx)
	candidate, err := eng.Load(ctx, "claim candidate", wasm, engine.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer candidate.Close(ctx)
	// Every reconcile below calls the guest, and so the candidate.
	rec, cached, stop := benchController(b, cp.Config, module, policy.Policy{Storm: policy.Storm{Disabled: true}, CallUnchanged: true}, ns)
	defer stop()

	response := map[string]any{"status": map[string]any{"phase": "ready"}, "children": []any{
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "child-a"}, "data": map[string]any{"k": "a"}},
	}}
	if err := k8s.Create(ctx, newObject(responderGVK, ns, "r", map[string]any{"response": response})); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 5*time.Minute, "the Responder converged", func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(responderGVK)
		if err := cached.Get(ctx, types.NamespacedName{Namespace: ns, Name: "r"}, u); err != nil {
			return err
		}
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "ready" {
			return fmt.Errorf("status %v", u.Object["status"])
		}
		return nil
	})
	sh := shadow.New(candidate, rec.Decoder(), shadow.Options{})
	defer sh.Close()

	reconcileOnce := func() time.Duration {
		t0 := time.Now()
		res, err := rec.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "r"}})
		d := time.Since(t0)
		if err != nil || res.RequeueAfter != 0 {
			b.Fatalf("reconcile: %v %+v", err, res)
		}
		return d
	}
	with := func() time.Duration {
		rec.SetShadow(sh)
		defer rec.SetShadow(nil)
		return reconcileOnce()
	}
	for range 20 {
		reconcileOnce()
		with()
	}
	var dWithout, dWith time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			dWithout += reconcileOnce()
			dWith += with()
		} else {
			dWith += with()
			dWithout += reconcileOnce()
		}
	}
	b.StopTimer()
	st := sh.Stats()
	if st.Differences > 0 || st.CandidateErrors > 0 {
		b.Fatalf("the candidate (the same guest) disagreed: %+v", st)
	}
	n := float64(b.N)
	ratio := float64(dWith) / float64(dWithout)
	b.ReportMetric(float64(dWithout.Microseconds())/n, "µs/reconcile-without")
	b.ReportMetric(float64(dWith.Microseconds())/n, "µs/reconcile-with-candidate")
	b.ReportMetric(ratio, "with/without")
	b.ReportMetric(float64(st.Skipped), "candidate-calls-skipped")
	verdict := "met"
	if ratio > 1.2 {
		verdict = "missed"
	}
	b.Logf("goal: serving latency with a candidate in shadow within 1.2× of without: %.2f× — %s (%d agreements, %d skipped)", ratio, verdict, st.Agreements, st.Skipped)
}
