package operator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestBadModuleDoesNotStopTheOperator runs the operator against a real API
// server with one malformed module, one missing file, one file whose pinned
// sha256 does not match and one good (correctly pinned) module: the bad ones
// are reported with clear errors, the good one reconciles.
func TestBadModuleDoesNotStopTheOperator(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()

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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metricsAddr, healthAddr := freeAddr(t), freeAddr(t)
	op, err := operator.New(ctx, cfg, operator.Options{
		Modules:                      []string{bad, missing, wrongPin, rightPin},
		MetricsBindAddress:           metricsAddr,
		HealthProbeBindAddress:       healthAddr,
		SkipControllerNameValidation: true,
	})
	if err != nil {
		t.Fatalf("operator.New: %v", err)
	}
	if n := len(op.Modules()); n != 1 || op.Modules()[0].Name() != "widget" {
		t.Fatalf("loaded %d modules, want only widget", n)
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
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	waitHTTP(t, "http://"+healthAddr+"/readyz", http.StatusOK, "")

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("survivor", 2)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "survivor", "2 x grey")
	waitHTTP(t, "http://"+metricsAddr+"/metrics", http.StatusOK, `wasmreconcile_reconcile_total{module="widget",result="success"}`)
	// The lifecycle: initialized, converged and, after 3 s without writes, quiescent.
	waitHTTP(t, "http://"+metricsAddr+"/metrics", http.StatusOK, `wasmreconcile_module_state{module="widget",state="initialized"} 1`)
	waitHTTP(t, "http://"+metricsAddr+"/metrics", http.StatusOK, `wasmreconcile_module_state{module="widget",state="converged"} 1`)
	waitHTTP(t, "http://"+metricsAddr+"/metrics", http.StatusOK, `wasmreconcile_module_state{module="widget",state="quiescent"} 1`)
	waitHTTP(t, "http://"+metricsAddr+"/metrics", http.StatusOK, `controller_runtime_reconcile_total{controller="widget",result="success"}`)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("operator did not stop")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHTTP polls url until it answers status with a body containing want.
func waitHTTP(t *testing.T, url string, status int, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status && strings.Contains(string(body), want) {
				return
			}
			last = fmt.Sprintf("status %d, %d bytes", resp.StatusCode, len(body))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never answered %d with %q: last %s", url, status, want, last)
}
