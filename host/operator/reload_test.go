package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// readyMessage returns a Widget's Ready condition message, or "".
func readyMessage(w *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

// waitVersion waits until any Widget in names reports widget version v, and
// returns how long that took from since.
func waitVersion(t *testing.T, c client.Client, names []string, v string, since time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, n := range names {
			w := widget(n, 0)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), w); err == nil &&
				strings.HasSuffix(readyMessage(w), "by widget v"+v) {
				return time.Since(since)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Widget reconciled by widget v%s within 3 minutes", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func reloads(result string) float64 {
	families, _ := crmetrics.Registry.Gather()
	total := 0.0
	for _, f := range families {
		if f.GetName() != "wasmreconcile_module_reloads_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["module"] == "widget" && labels["result"] == result {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestHotReloadUnderLoad runs the operator with --module-dir and, while a
// writer keeps changing Widgets, replaces widget.wasm with version 2, then
// rolls back to version 1 (still compiled), then writes a broken file. It
// checks that each swap happens without a restart, that no update is lost
// (every Widget ends with the summary of its last spec under the serving
// version), that the rollback reuses the compiled version, and that the
// broken file leaves the old version serving, and that removing the file
// stops the module.
func TestHotReloadUnderLoad(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	v1, v2 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")
	dir := t.TempDir()
	file := filepath.Join(dir, "widget.wasm")
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	op := startOperator(t, cfg, operator.Options{
		ModuleDir: dir, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
	})
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("load-%d", i))
		if err := c.Create(ctx, widget(names[i], 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		waitSummary(t, c, name, "1 x grey")
	}

	// The writer: each round sets every Widget's size to the round number.
	var mu sync.Mutex
	last := map[string]int64{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for size := int64(2); ; size++ {
			for _, name := range names {
				select {
				case <-stop:
					return
				default:
				}
				updateWidgetSize(t, c, name, size%50)
				mu.Lock()
				last[name] = size % 50
				mu.Unlock()
			}
		}
	}()
	settle := func(version string) {
		close(stop)
		<-done
		for _, name := range names {
			mu.Lock()
			want := fmt.Sprintf("%d x grey", last[name])
			mu.Unlock()
			// Every Widget must end with its last spec's summary, written
			// by the version now serving (the requeue after the swap
			// reaches each one, however loaded the machine).
			deadline := time.Now().Add(3 * time.Minute)
			for {
				w := widget(name, 0)
				err := c.Get(ctx, client.ObjectKeyFromObject(w), w)
				summary, _, _ := unstructured.NestedString(w.Object, "status", "summary")
				if err == nil && summary == want && strings.HasSuffix(readyMessage(w), "by widget v"+version) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: summary %q, Ready message %q; want %q by widget v%s", name, summary, readyMessage(w), want, version)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	swapped, cached, failed := reloads("swapped"), reloads("cached"), reloads("failed")
	start := time.Now()
	if err := os.WriteFile(file, v2, 0o644); err != nil { // in place, as `go build -o` does
		t.Fatal(err)
	}
	t.Logf("new bytes: first reconcile by v2 %s after the file was written", waitVersion(t, c, names, "2", start).Round(time.Millisecond))
	settle("2")
	if got := reloads("swapped") - swapped; got != 1 {
		t.Errorf("swaps counted: %v, want 1", got)
	}

	// Roll back to v1: still compiled, so only a pointer swap.
	stop, done = make(chan struct{}), make(chan struct{})
	go func() { close(done) }()
	start = time.Now()
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback: first reconcile by v1 %s after the file was written", waitVersion(t, c, names, "1", start).Round(time.Millisecond))
	settle("1")
	if got := reloads("cached") - cached; got != 1 {
		t.Errorf("rollbacks served from compiled versions: %v, want 1", got)
	}
	if got := moduleInfoDigests("widget"); len(got) != 1 || got[0] != supervisor.Digest(v1) {
		t.Errorf("wasmreconcile_module_info digests for widget after the rollback: %v, want only v1's", got)
	}

	// A broken file: v1 keeps serving, and still reconciles changes.
	if err := os.WriteFile(file, []byte("\x00asm\x01\x00\x00\x00broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for reloads("failed") == failed {
		if time.Now().After(deadline) {
			t.Fatal("the broken file was never tried")
		}
		time.Sleep(20 * time.Millisecond)
	}
	updateWidgetSize(t, c, names[0], 42)
	waitSummary(t, c, names[0], "42 x grey")
	w := widget(names[0], 0)
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(readyMessage(w), "by widget v1") {
		t.Errorf("after a broken file: Ready message %q, want v1 still serving", readyMessage(w))
	}

	// Removing the file stops the module; its objects keep their status.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); len(op.Supervisor().Names()) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("modules still running after widget.wasm was removed: %v", op.Supervisor().Names())
		}
		time.Sleep(20 * time.Millisecond)
	}
	updateWidgetSize(t, c, names[0], 43)
	time.Sleep(time.Second)
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s != "42 x grey" {
		t.Errorf("a removed module still reconciled: summary %q", s)
	}
}

// TestHotReloadInterpreterFirst replaces widget.wasm with new bytes under
// InterpreterFirst: the new version first serves from the interpreter, then
// the compiled version replaces it (counted as "upgraded"), and changes keep
// converging throughout. The time to the first reconcile on the new code is
// logged, to compare with TestHotReloadUnderLoad's compiler-only figure.
func TestHotReloadInterpreterFirst(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	v1, v3 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "3")
	dir := t.TempDir()
	file := filepath.Join(dir, "widget.wasm")
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	startOperator(t, cfg, operator.Options{
		ModuleDir: dir, InterpreterFirst: true, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
	})
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("interp", 1)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "interp", "1 x grey")
	upgraded := reloads("upgraded")
	start := time.Now()
	if err := os.WriteFile(file, v3, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("interpreter first: first reconcile by v3 %s after the file was written", waitVersion(t, c, []string{"interp"}, "3", start).Round(time.Millisecond))
	for deadline := time.Now().Add(2 * time.Minute); reloads("upgraded") == upgraded; {
		if time.Now().After(deadline) {
			t.Fatal("the compiled version never replaced the interpreted one")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("compiled code serving %s after the file was written", time.Since(start).Round(time.Millisecond))
	updateWidgetSize(t, c, "interp", 6)
	waitSummary(t, c, "interp", "6 x grey")
}

// moduleInfoDigests lists the digests wasmreconcile_module_info reports for
// module.
func moduleInfoDigests(module string) []string {
	families, _ := crmetrics.Registry.Gather()
	var out []string
	for _, f := range families {
		if f.GetName() != "wasmreconcile_module_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["module"] == module {
				out = append(out, labels["digest"])
			}
		}
	}
	return out
}
