package operator_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestBadModuleDoesNotStopTheOperator runs the operator against a real API
// server with one malformed module, one missing file, one file whose pinned
// sha256 does not match and one good (correctly pinned) module: the bad ones
// are reported with clear errors, the good one reconciles, and the metrics
// and probe endpoints serve.
func TestBadModuleDoesNotStopTheOperator(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "broken.wasm")
	if err := os.WriteFile(bad, []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.wasm")
	good := testwasm.BuildFile(t, "./widget")
	goodBytes, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	wrongPin := good + "@sha256:" + strings.Repeat("0", 64)
	rightPin := good + "@" + supervisor.Digest(goodBytes)

	mo := e.OperatorOptions()
	addrs := optest.FreeAddrs(t, 2)
	mo.MetricsBindAddress, mo.HealthProbeBindAddress = addrs[0], addrs[1]
	op, err := optest.NewOperator(t, e.Cfg, mo, operator.Options{
		Modules: []string{bad, missing, wrongPin, rightPin},
		Engine:  operator.EngineOptions{CompilationCacheDir: optest.CompilationCache()},
		Health:  operator.HealthOptions{QuiescentAfter: 3 * time.Second},
	})
	if err != nil {
		t.Fatalf("operator.New: %v", err)
	}
	if names := op.Names(); len(names) != 1 || names[0] != "widget" {
		t.Fatalf("modules %v, want only widget", names)
	}
	errs := op.LoadErrors()
	if len(errs) != 3 {
		t.Fatalf("LoadErrors() = %v, want 3 errors", errs)
	}
	var mismatch *supervisor.DigestMismatchError
	if !errors.As(errs[2], &mismatch) || !strings.Contains(errs[2].Error(), "update the pinned sha256") {
		t.Errorf("wrongly pinned module error = %v", errs[2])
	}
	var invalid *engine.InvalidModuleError
	if !errors.As(errs[0], &invalid) || !strings.Contains(errs[0].Error(), "module[broken.wasm] invalid: not a valid WebAssembly module") {
		t.Errorf("malformed module error = %v", errs[0])
	}
	if !errors.Is(errs[1], os.ErrNotExist) || !strings.Contains(errs[1].Error(), "missing.wasm") {
		t.Errorf("missing module error = %v", errs[1])
	}
	if err := op.Ready(); err == nil {
		t.Error("Ready() before Start: want not ready")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("operator did not stop")
		}
	}()
	optest.WaitHTTP(t, "http://"+mo.HealthProbeBindAddress+"/readyz", http.StatusOK, "")
	if err := e.C.Create(ctx, optest.Widget(e.NS, "survivor", 2)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "survivor", "2 x grey")
	metrics := "http://" + mo.MetricsBindAddress + "/metrics"
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_reconcile_total{module="widget",result="Success"}`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_module_info{digest="`+supervisor.Digest(goodBytes)+`",module="widget"} 1`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_instances{module="widget",state="live"} 1`)
	// The lifecycle: initialized, converged and, after 3 s without writes, quiescent.
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_module_state{module="widget",state="initialized"} 1`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_module_state{module="widget",state="converged"} 1`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_module_state{module="widget",state="quiescent"} 1`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `controller_runtime_reconcile_total{controller="widget",result="success"}`)
	optest.WaitHTTP(t, metrics, http.StatusOK, `wasmreconcile_informer_list_pages_total{kind="Widget.examples.wasmreconcile.io"}`)
}

// TestFileModuleLoadHealth: a module from a file whose kind cannot sync
// (the conformance module: its Probe kind has no CRD here) gets the same
// SyncFailed warning as a ReconcileModule, as a log line and in
// wasmreconcile_module_health, while the other module of the operator is
// healthy. The tck module is unready by itself, saying which CRD is
// missing; the operator is ready, for its other module serves.
func TestFileModuleLoadHealth(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	reg := prometheus.NewRegistry()
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:    []string{testwasm.BuildFile(t, "./internal/tck"), testwasm.BuildFile(t, "./widget")},
		Registerer: reg,
		Health:     operator.HealthOptions{Interval: 200 * time.Millisecond, SyncTimeout: time.Second},
	})
	testenv.Eventually(t, 2*time.Minute, "SyncFailed for the tck module", func() error {
		if v := optest.Gather(t, reg, "wasmreconcile_module_health", map[string]string{"module": "tck", "problem": "SyncFailed"}); v != 1 {
			return fmt.Errorf("wasmreconcile_module_health{module=tck,problem=SyncFailed} = %v", v)
		}
		return nil
	})
	if v := optest.Gather(t, reg, "wasmreconcile_module_health", map[string]string{"module": "widget", "problem": "SyncFailed"}); v != 0 {
		t.Errorf("the widget module, whose kind syncs, has SyncFailed = %v", v)
	}
	// The tck module's triggers index its kind, so its controller cannot
	// even be built: its status says so, and which CRD to install.
	want := "kind Probe of tck.wasmreconcile.io/v1 is not served by the API server: install its CRD"
	if st, ok := optest.ModuleStatus(op, "tck"); !ok || st.Synced || !strings.Contains(st.SyncProblem, want) {
		t.Errorf("the tck module's status: synced %v, problem %q; want %q", st.Synced, st.SyncProblem, want)
	}
	testenv.Eventually(t, 2*time.Minute, "the operator ready beside the unready module", func() error { return op.Ready() })
}
