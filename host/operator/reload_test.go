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

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestHotReloadUnderLoad runs the operator with a module directory and,
// while a writer keeps changing Widgets, replaces widget.wasm with version
// 2, then rolls back to version 1 (still compiled), then writes a broken
// file. It checks that each swap happens without a restart, that no update
// is lost (every Widget ends with the summary of its last spec under the
// serving version), that the rollback reuses the compiled version, that the
// broken file leaves the old version serving, and that removing the file
// stops the module.
func TestHotReloadUnderLoad(t *testing.T) {
	e := optest.NewEnv(t)
	v1, v2 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")
	dir := t.TempDir()
	file := filepath.Join(dir, "widget.wasm")
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ModuleDir: dir, Registerer: reg})
	reloads := func(result string) float64 {
		return optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": result})
	}
	ctx := context.Background()
	const n = 10
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("load-%d", i))
		if err := e.C.Create(ctx, optest.Widget(e.NS, names[i], 1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		optest.WaitSummary(t, e.C, e.NS, name, "1 x grey")
	}

	// The writer: each round sets every Widget's size to the round number.
	// A Widget it has not reached yet when it stops keeps its size 1.
	var mu sync.Mutex
	last := map[string]int64{}
	for _, name := range names {
		last[name] = 1
	}
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
				optest.UpdateWidgetSize(t, e.C, e.NS, name, size%50)
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
			testenv.Eventually(t, 3*time.Minute, name+" by widget v"+version, func() error {
				w := optest.Widget(e.NS, name, 0)
				err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w)
				summary, _, _ := unstructured.NestedString(w.Object, "status", "summary")
				if err != nil || summary != want || !strings.HasSuffix(optest.ReadyMessage(w), "by widget v"+version) {
					return fmt.Errorf("summary %q, Ready message %q; want %q (err %v)", summary, optest.ReadyMessage(w), want, err)
				}
				return nil
			})
		}
	}

	swapped, cached, failed, restarted := reloads("swapped"), reloads("cached"), reloads("failed"), reloads("restarted")
	start := time.Now()
	if err := os.WriteFile(file, v2, 0o644); err != nil { // in place, as `go build -o` does
		t.Fatal(err)
	}
	t.Logf("new bytes: first reconcile by v2 %s after the file was written", optest.WaitVersion(t, e.C, e.NS, names, "2", start).Round(time.Millisecond))
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
	t.Logf("rollback: first reconcile by v1 %s after the file was written", optest.WaitVersion(t, e.C, e.NS, names, "1", start).Round(time.Millisecond))
	settle("1")
	if got := reloads("cached") - cached; got != 1 {
		t.Errorf("rollbacks served from compiled versions: %v, want 1", got)
	}
	if got := reloads("restarted") - restarted; got != 0 {
		t.Errorf("controllers restarted by a hot reload: %v, want 0", got)
	}
	if got := optest.ModuleInfoDigests(t, reg, "widget"); len(got) != 1 || got[0] != supervisor.Digest(v1) {
		t.Errorf("wasmreconcile_module_info digests for widget after the rollback: %v, want only v1's", got)
	}

	// A broken file: v1 keeps serving, and still reconciles changes.
	if err := os.WriteFile(file, []byte("\x00asm\x01\x00\x00\x00broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the broken file to be tried", func() error {
		if reloads("failed") == failed {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	optest.UpdateWidgetSize(t, e.C, e.NS, names[0], 42)
	optest.WaitSummary(t, e.C, e.NS, names[0], "42 x grey")
	w := optest.Widget(e.NS, names[0], 0)
	if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(optest.ReadyMessage(w), "by widget v1") {
		t.Errorf("after a broken file: Ready message %q, want v1 still serving", optest.ReadyMessage(w))
	}

	// Removing the file stops the module; its objects keep their status.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the module to stop", func() error {
		if names := op.Names(); len(names) != 0 {
			return fmt.Errorf("modules still running: %v", names)
		}
		return nil
	})
	reconciles := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"})
	optest.UpdateWidgetSize(t, e.C, e.NS, names[0], 43)
	// A positive barrier: the operator's own cache has seen the change, so
	// a controller watching Widgets would have been told.
	testenv.Eventually(t, time.Minute, "the operator's cache to see size 43", func() error {
		cw := optest.Widget(e.NS, names[0], 0)
		if err := op.Manager().GetCache().Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
			return err
		}
		if size, _, _ := unstructured.NestedInt64(cw.Object, "spec", "size"); size != 43 {
			return fmt.Errorf("size %d", size)
		}
		return nil
	})
	if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s != "42 x grey" {
		t.Errorf("a removed module still reconciled: summary %q", s)
	}
	if got := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"}); got != reconciles {
		t.Errorf("a removed module still reconciled: %v reconciles after its removal", got-reconciles)
	}
}

// TestHotReloadInterpreterFirst replaces widget.wasm with new bytes under
// InterpreterFirst: the new version first serves from the interpreter, then
// the compiled version replaces it (counted as "upgraded"), and changes keep
// converging throughout. The time to the first reconcile on the new code is
// logged, to compare with TestHotReloadUnderLoad's compiler-only figure.
func TestHotReloadInterpreterFirst(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	v1, v3 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "3")
	dir := t.TempDir()
	file := filepath.Join(dir, "widget.wasm")
	if err := os.WriteFile(file, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ModuleDir: dir, Registerer: reg, Engine: operator.EngineOptions{InterpreterFirst: true}})
	ctx := context.Background()
	if err := e.C.Create(ctx, optest.Widget(e.NS, "interp", 1)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "interp", "1 x grey")
	upgraded := func() float64 {
		return optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "upgraded"})
	}
	before := upgraded()
	startAt := time.Now()
	if err := os.WriteFile(file, v3, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("interpreter first: first reconcile by v3 %s after the file was written", optest.WaitVersion(t, e.C, e.NS, []string{"interp"}, "3", startAt).Round(time.Millisecond))
	testenv.Eventually(t, 2*time.Minute, "the compiled version to replace the interpreted one", func() error {
		if upgraded() == before {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t.Logf("compiled code serving %s after the file was written", time.Since(startAt).Round(time.Millisecond))
	optest.UpdateWidgetSize(t, e.C, e.NS, "interp", 6)
	optest.WaitSummary(t, e.C, e.NS, "interp", "6 x grey")
}
