package clusterscoped_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func shadowCount(t *testing.T, reg prometheus.Gatherer, module, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "wasmreconcile_shadow_comparisons_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["module"] == module && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// resize changes a Widget's spec.size, retrying on conflicts, so that it
// is reconciled (and the guest called) again.
func resize(t *testing.T, c client.Client, ns, name string, size int64) {
	t.Helper()
	w := optest.Widget(ns, name, 0)
	testenv.Update(t, c, w, func() { _ = unstructured.SetNestedField(w.Object, size, "spec", "size") })
}

// TestShadowRollout runs a ReconcileModule with a candidate against the
// real API server. A candidate that answers otherwise (widget v2: another
// Ready message) is held: it is called on every reconcile, its differences
// are counted and shown naming the object and the field, nothing it
// returns is written, and it is not promoted however many calls it sees.
// A candidate that answers the same (widget v1 with another decoder, so
// other bytes) is promoted after promote.afterAgreeing agreeing calls,
// with an Event; removing spec.candidate rolls back to spec.source.
func TestShadowRollout(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ReconcileModules: true, Registerer: reg, ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond}})
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := testwasm.BuildVersion(t, "./widget", "1")
	same := testwasm.BuildFlags(t, "./widget", "-tags=eager", "-ldflags=-X main.Version=1")
	v2 := testwasm.BuildVersion(t, "./widget", "2")
	if supervisor.Digest(same) == supervisor.Digest(v1) {
		t.Fatal("the agreeing candidate has the serving version's bytes; the test needs other bytes")
	}
	src := func(b []byte, file string) v1alpha1.Source {
		return v1alpha1.Source{SHA256: supervisor.Digest(b), File: write(file, b)}
	}
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{
		Source:    src(v1, "v1.wasm"),
		Candidate: &v1alpha1.Candidate{Source: src(v2, "v2.wasm"), Promote: &v1alpha1.Promote{AfterAgreeing: 1}},
	}}
	if err := e.C.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.C.Delete(context.Background(), rm); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ReconcileModule: %v", err)
		}
	})
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")

	// A candidate that differs is held.
	names := []string{"shadow-a", "shadow-b", "shadow-c"}
	for _, n := range names {
		if err := e.C.Create(ctx, optest.Widget(e.NS, n, 2)); err != nil {
			t.Fatal(err)
		}
	}
	got := optest.WaitModule(t, e.C, "widget", "3 differences counted", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; r == nil || r.Candidate == nil || r.Candidate.Differences < int64(len(names)) {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	cs := got.Status.Rollout.Candidate
	if cs.Digest != supervisor.Digest(v2) || cs.Agreements != 0 || cs.CandidateErrors != 0 || got.Status.Rollout.Promoted != nil || got.Status.Digest != supervisor.Digest(v1) {
		t.Fatalf("a differing candidate: digest %s, rollout %+v", got.Status.Digest, got.Status.Rollout)
	}
	if len(cs.FirstDifferences) == 0 || !strings.Contains(cs.FirstDifferences[0], e.NS+"/shadow-") ||
		!strings.Contains(cs.FirstDifferences[0], "status.conditions[") || !strings.Contains(cs.FirstDifferences[0], "widget v1") ||
		!strings.Contains(cs.FirstDifferences[0], "widget v2") {
		t.Errorf("firstDifferences %q, want the object, the field and both answers", cs.FirstDifferences)
	}
	if n := shadowCount(t, reg, "widget", "differ"); n < float64(len(names)) {
		t.Errorf("wasmreconcile_shadow_comparisons_total{result=differ} = %v, want at least %d", n, len(names))
	}
	for _, n := range names {
		w := optest.Widget(e.NS, n, 0)
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			t.Fatal(err)
		}
		if msg := optest.ReadyMessage(w); !strings.HasSuffix(msg, "by widget v1") {
			t.Errorf("Widget %s: Ready message %q; the candidate's answer was written", n, msg)
		}
	}

	// A candidate that agrees is promoted after 3 agreeing calls.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Candidate = &v1alpha1.Candidate{Source: src(same, "same.wasm"), Promote: &v1alpha1.Promote{AfterAgreeing: 3}}
	})
	optest.WaitModule(t, e.C, "widget", "the agreeing candidate running", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; r == nil || r.Candidate == nil || r.Candidate.Digest != supervisor.Digest(same) || rm.Status.ObservedGeneration != rm.Generation {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	for i, n := range names {
		resize(t, e.C, e.NS, n, int64(3+i))
	}
	got = optest.WaitModule(t, e.C, "widget", "the candidate promoted", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; r == nil || r.Promoted == nil {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	p := got.Status.Rollout.Promoted
	if p.Digest != supervisor.Digest(same) || p.PreviousDigest != supervisor.Digest(v1) || p.Agreements < 3 || p.Generation != got.Generation ||
		got.Status.Digest != supervisor.Digest(same) {
		t.Fatalf("promotion %+v, status.digest %s", p, got.Status.Digest)
	}
	if msg := optest.WaitModuleEvent(t, e.C, got.UID, modulecontroller.ReasonPromoted); !strings.Contains(msg, "remove spec.candidate to roll back") {
		t.Errorf("Promoted Event %q", msg)
	}
	testenv.Eventually(t, time.Minute, "the promoted digest in wasmreconcile_module_info", func() error {
		if d := optest.ModuleInfoDigests(t, reg, "widget"); len(d) != 1 || d[0] != supervisor.Digest(same) {
			return fmt.Errorf("digests %v", d)
		}
		return nil
	})

	// The promotion served the candidate's compiled code: a cached load.
	if n := optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "cached"}); n < 1 {
		t.Errorf("promotion: %v cached loads, want the candidate's compiled code reused", n)
	}

	// Removing the candidate rolls back to spec.source, still compiled.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Candidate = nil })
	optest.WaitModule(t, e.C, "widget", "rolled back to spec.source", func(rm *v1alpha1.ReconcileModule) error {
		if rm.Status.ObservedGeneration != rm.Generation || rm.Status.Digest != supervisor.Digest(v1) || rm.Status.Rollout != nil {
			return fmt.Errorf("generation %d/%d, digest %s, rollout %+v", rm.Status.ObservedGeneration, rm.Generation, rm.Status.Digest, rm.Status.Rollout)
		}
		return nil
	})
	if n := optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "cached"}); n < 2 {
		t.Errorf("rollback: %v cached loads in all, want the previous version swapped back in without a compile", n)
	}

	// A candidate that is another module is refused; the serving version
	// is untouched.
	other := testwasm.Build(t, "./internal/testguests/misbehave")
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Candidate = &v1alpha1.Candidate{Source: src(other, "other.wasm")}
	})
	got = optest.WaitModule(t, e.C, "widget", "another module refused as a candidate", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; rm.Status.ObservedGeneration != rm.Generation || r == nil || r.Candidate == nil || r.Candidate.LastError == "" {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	if msg := got.Status.Rollout.Candidate.LastError; !strings.Contains(msg, "module name changed") || !strings.Contains(msg, "same module") ||
		got.Status.Digest != supervisor.Digest(v1) {
		t.Errorf("candidate of another module: lastError %q, serving %s", msg, got.Status.Digest)
	}
	optest.WaitModuleEvent(t, e.C, got.UID, modulecontroller.ReasonCandidateFailed)
}

// TestCanaryRollout runs a candidate as a canary against the real API
// server: with canary.percent, exactly the objects shadow.InShare picks are
// served by the candidate (their status says widget v2) and the others by
// spec.source, with the calls each served in status; with a selector,
// only the labelled object is, and the percent's objects go back at once;
// removing the candidate gives every object back to spec.source.
func TestCanaryRollout(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ReconcileModules: true, ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond}})
	dir := t.TempDir()
	write := func(name string, b []byte) v1alpha1.Source {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return v1alpha1.Source{SHA256: supervisor.Digest(b), File: p}
	}
	v1, v2 := write("v1.wasm", testwasm.BuildVersion(t, "./widget", "1")), write("v2.wasm", testwasm.BuildVersion(t, "./widget", "2"))

	// Names until both shares have two objects.
	var canary, stable []string
	for i := 0; len(canary) < 2 || len(stable) < 2; i++ {
		n := fmt.Sprintf("canary-%d", i)
		if shadow.InShare(e.NS, n, 50) {
			canary = append(canary, n)
		} else {
			stable = append(stable, n)
		}
	}
	half := int32(50)
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{
		Source:    v1,
		Candidate: &v1alpha1.Candidate{Source: v2, Canary: &v1alpha1.Canary{Percent: &half}},
	}}
	if err := e.C.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.C.Delete(context.Background(), rm); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ReconcileModule: %v", err)
		}
	})
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	for _, n := range append(append([]string(nil), canary...), stable...) {
		if err := e.C.Create(ctx, optest.Widget(e.NS, n, 1)); err != nil {
			t.Fatal(err)
		}
	}
	servedBy := func(what string, want map[string]string) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, what, func() error {
			for n, v := range want {
				w := optest.Widget(e.NS, n, 0)
				if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
					return err
				}
				if msg := optest.ReadyMessage(w); !strings.HasSuffix(msg, "by widget v"+v) {
					return fmt.Errorf("%s: %q, want widget v%s", n, msg, v)
				}
			}
			return nil
		})
	}
	want := map[string]string{}
	for _, n := range canary {
		want[n] = "2"
	}
	for _, n := range stable {
		want[n] = "1"
	}
	servedBy("the 50% share served by the candidate, the rest by spec.source", want)
	got := optest.WaitModule(t, e.C, "widget", "the canary's calls counted", func(rm *v1alpha1.ReconcileModule) error {
		c := rm.Status.Rollout
		if c == nil || c.Candidate == nil || c.Candidate.ServedByCandidate < int64(len(canary)) || c.Candidate.ServedByServing < int64(len(stable)) {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	if cs := got.Status.Rollout.Candidate; cs.Canary != "50% of objects" || cs.Digest != v2.SHA256 || got.Status.Digest != v1.SHA256 {
		t.Errorf("status: digest %s, candidate %+v", got.Status.Digest, cs)
	}

	// A selector: only the labelled object; the percent's objects go back.
	labelled := stable[0]
	w := optest.Widget(e.NS, labelled, 0)
	testenv.Update(t, e.C, w, func() { w.SetLabels(map[string]string{"track": "canary"}) })
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Candidate.Canary = &v1alpha1.Canary{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"track": "canary"}}}
	})
	for n := range want {
		want[n] = "1"
	}
	want[labelled] = "2"
	servedBy("only the labelled object served by the candidate", want)
	optest.WaitModule(t, e.C, "widget", "the selector in status", func(rm *v1alpha1.ReconcileModule) error {
		if c := rm.Status.Rollout; c == nil || c.Candidate == nil || c.Candidate.Canary != "objects matching track=canary" {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})

	// No candidate: every object back to spec.source.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Candidate = nil })
	want[labelled] = "1"
	servedBy("every object served by spec.source", want)
}
