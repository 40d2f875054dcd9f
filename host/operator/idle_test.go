package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestIdleModuleUnloads: a module with no call for its idle module timeout
// is unloaded (the supervisor's status and wasmreconcile_module_state say
// so, wasmreconcile_module_unloads_total counts it), and the events that
// come while it is unloaded are all served, the last one last: the Widget
// ends with the summary of its last spec, and the wake is counted.
func TestIdleModuleUnloads(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	reg := prometheus.NewRegistry()
	mo := e.OperatorOptions()
	mo.HealthProbeBindAddress = optest.FreeAddr(t)
	op := optest.Start(t, e.Cfg, mo, operator.Options{
		Modules:    []string{testwasm.BuildFile(t, "./widget")},
		Registerer: reg,
		Policy:     policy.Policy{Limits: engine.Limits{IdleModuleTimeout: time.Second}},
	})
	ctx := context.Background()
	if err := e.C.Create(ctx, optest.Widget(e.NS, "w", 1)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "w", "1 x grey")

	unloaded := func() error {
		st, ok := optest.ModuleStatus(op, "widget")
		if !ok {
			return fmt.Errorf("module widget not running")
		}
		if !st.Unloaded {
			return fmt.Errorf("still loaded")
		}
		if n := optest.Gather(t, reg, "wasmreconcile_module_unloads_total", map[string]string{"module": "widget"}); n < 1 {
			return fmt.Errorf("%v unloads counted", n)
		}
		if v := optest.Gather(t, reg, "wasmreconcile_module_state", map[string]string{"module": "widget", "state": "loaded"}); v != 0 {
			return fmt.Errorf("wasmreconcile_module_state{state=loaded} is %v", v)
		}
		return nil
	}
	testenv.Eventually(t, 2*time.Minute, "the idle widget module unloaded", unloaded)
	// /readyz stays ready, and /readyz/modules says which are unloaded.
	optest.WaitHTTP(t, "http://"+mo.HealthProbeBindAddress+"/readyz", http.StatusOK, "ok")
	optest.WaitHTTP(t, "http://"+mo.HealthProbeBindAddress+operator.ModulesPath, http.StatusOK, "1 modules: 0 loaded, 1 unloaded")
	optest.WaitHTTP(t, "http://"+mo.HealthProbeBindAddress+operator.ModulesPath, http.StatusOK, "widget sha256:")
	if code, body := optest.Get(t, "http://"+mo.HealthProbeBindAddress+operator.ModulesPath); code == http.StatusOK {
		t.Logf("%s:\n%s", operator.ModulesPath, body)
	}

	// Three changes in a row while it is unloaded: the first wakes it,
	// and the last one wins.
	for size := int64(2); size <= 4; size++ {
		optest.UpdateWidgetSize(t, e.C, e.NS, "w", size)
	}
	optest.WaitSummary(t, e.C, e.NS, "w", "4 x grey")
	if n := optest.Gather(t, reg, "wasmreconcile_module_wake_seconds", map[string]string{"module": "widget", "result": "ok"}); n < 1 {
		t.Errorf("%v wakes counted, want at least 1", n)
	}
	if n := optest.Gather(t, reg, "wasmreconcile_module_wake_seconds", map[string]string{"module": "widget", "result": "failed"}); n != 0 {
		t.Errorf("%v failed wakes counted, want none", n)
	}
	// Idle again, it unloads again.
	before := optest.Gather(t, reg, "wasmreconcile_module_unloads_total", map[string]string{"module": "widget"})
	testenv.Eventually(t, 2*time.Minute, "the widget module unloaded again", func() error {
		if n := optest.Gather(t, reg, "wasmreconcile_module_unloads_total", map[string]string{"module": "widget"}); n <= before {
			return fmt.Errorf("%v unloads, %v before the wake", n, before)
		}
		return unloaded()
	})
}
