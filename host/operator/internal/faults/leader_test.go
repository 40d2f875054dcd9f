package faults_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// scrape sums the samples of metric whose labels include every label in
// want, from a Prometheus text endpoint; -1 when the endpoint is down.
func scrape(addr, metric string, want ...string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total
}

// TestLeaderElectionTakeover runs two operator processes with leader
// election against the real API server, with one module from --module and
// one from a ReconcileModule. Only the leader reconciles (the
// standby's reconcile and status-write counters stay at zero: no double
// apply); when the leader is killed with SIGKILL, the standby acquires the
// Lease and reconciles the changes made meanwhile.
func TestLeaderElectionTakeover(t *testing.T) {
	e := optest.NewEnv(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(e.Cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin, err := testshare.GoBinary("operator-run", "./cmd/operator", "", "runonly") // as the image ships it
	if err != nil {
		t.Fatalf("building the operator: %v", err)
	}
	module := testwasm.BuildFile(t, "./widget")
	webapp := testwasm.BuildFile(t, "./webapp") // run through a ReconcileModule

	type replica struct {
		cmd     *exec.Cmd
		metrics string
		log     string
	}
	// Metrics and health-probe addresses of both replicas, all distinct.
	addrs := optest.FreeAddrs(t, 4)
	start := func(name string) *replica {
		r := &replica{metrics: addrs[0], log: filepath.Join(dir, name+".log")}
		health := addrs[1]
		addrs = addrs[2:]
		out, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.cmd = exec.Command(bin, "run", "--kubeconfig", kubeconfig, "--module", module, "--reconcile-modules", "--compilation-cache-dir", optest.CompilationCache(),
			"--compilation-cache-max-size", "0", // shared by the tests: no one process's bound
			"--namespace", e.NS, "--leader-elect", "--leader-election-namespace", e.NS,
			"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
			"--metrics-bind-address", r.metrics, "--health-probe-bind-address", health)
		// The binary is the operator's own build: it runs itself as its
		// compile worker, not the test's (engine.CompileWorkerPathEnv).
		r.cmd.Env = testworker.Environ()
		r.cmd.Stdout, r.cmd.Stderr = out, out
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			_ = r.cmd.Wait()
			out.Close()
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				t.Logf("%s log:\n%s", name, b)
			}
		})
		return r
	}
	a, b := start("a"), start("b")

	ctx := context.Background()
	c := e.C
	if err := c.Create(ctx, optest.Widget(e.NS, "elected", 1)); err != nil {
		t.Fatal(err)
	}
	webappBytes, err := os.ReadFile(webapp)
	if err != nil {
		t.Fatal(err)
	}
	optest.CreateModule(t, c, "webapp", v1alpha1.Source{SHA256: supervisor.Digest(webappBytes), File: webapp})
	optest.ModuleCondition(t, c, "webapp", "Ready", metav1.ConditionTrue, "Loaded")
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": e.NS},
		"spec":     map[string]any{"image": "nginx:1.27", "config": map[string]any{"MODE": "before"}},
	}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitConfigMapValue(t, c, e.NS, "shop-config", "MODE", "before")
	optest.WaitSummary(t, c, e.NS, "elected", "1 x grey")
	reconciles := func(r *replica) float64 {
		return scrape(r.metrics, "wasmreconcile_reconcile_total") // every module
	}
	writes := func(r *replica) float64 {
		return scrape(r.metrics, "wasmreconcile_status_writes_total")
	}
	leader, standby := a, b
	if reconciles(b) > 0 {
		leader, standby = b, a
	}
	if reconciles(leader) <= 0 || reconciles(standby) != 0 || writes(standby) != 0 {
		t.Fatalf("want exactly one replica reconciling: a %v reconciles/%v writes, b %v/%v",
			reconciles(a), writes(a), reconciles(b), writes(b))
	}
	var lease coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "wasmreconcile-operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	holder := *lease.Spec.HolderIdentity

	// Kill the leader: no chance to release the Lease.
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	optest.UpdateWidgetSize(t, c, e.NS, "elected", 2)
	if err := c.Create(ctx, optest.Widget(e.NS, "after-takeover", 5)); err != nil {
		t.Fatal(err)
	}
	// The WebApp's module came from a ReconcileModule, which the standby
	// loaded before it was elected.
	testenv.Update(t, c, app, func() { _ = unstructured.SetNestedField(app.Object, "after", "spec", "config", "MODE") })
	optest.WaitSummary(t, c, e.NS, "elected", "2 x grey")
	optest.WaitSummary(t, c, e.NS, "after-takeover", "5 x grey")
	waitConfigMapValue(t, c, e.NS, "shop-config", "MODE", "after")
	t.Logf("takeover: changes made after the leader was killed converged %s later (lease duration 4s)", time.Since(killed).Round(100*time.Millisecond))
	if reconciles(standby) <= 0 {
		t.Error("the standby converged nothing after the takeover")
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "wasmreconcile-operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	if now := *lease.Spec.HolderIdentity; now == holder {
		t.Errorf("Lease still held by %s after the leader was killed", now)
	}
}

// waitConfigMapValue waits until ConfigMap ns/name has data[key] = want.
func waitConfigMapValue(t *testing.T, c client.Client, ns, name, key, want string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err == nil && cm.Data[key] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMap %s never had %s=%s", name, key, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
