package operator_test

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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
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
	env, cfg, err := testenv.Start("examples/crds", "config/crd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "operator")
	build := exec.Command("go", "build", "-o", bin, "./cmd/operator")
	build.Dir = testwasm.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	module := testwasm.BuildFile(t, "./widget")
	webapp := testwasm.BuildFile(t, "./webapp") // run through a ReconcileModule

	type replica struct {
		cmd     *exec.Cmd
		metrics string
		log     string
	}
	start := func(name string) *replica {
		r := &replica{metrics: freeAddr(t), log: filepath.Join(dir, name+".log")}
		out, err := os.Create(r.log)
		if err != nil {
			t.Fatal(err)
		}
		r.cmd = exec.Command(bin, "run", "--kubeconfig", kubeconfig, "--module", module, "--reconcile-modules",
			"--leader-elect", "--leader-election-namespace", "default",
			"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
			"--metrics-bind-address", r.metrics, "--health-probe-bind-address", freeAddr(t))
		r.cmd.Stdout, r.cmd.Stderr = out, out
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
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, widget("elected", 1)); err != nil {
		t.Fatal(err)
	}
	webappBytes, err := os.ReadFile(webapp)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, reconcileModule("webapp", map[string]any{"sha256": supervisor.Digest(webappBytes), "file": webapp})); err != nil {
		t.Fatal(err)
	}
	moduleCondition(t, c, "webapp", "Ready", "True", "Loaded")
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": "default"},
		"spec":     map[string]any{"image": "nginx:1.27", "config": map[string]any{"MODE": "before"}},
	}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitConfigMapValue(t, c, "shop-config", "MODE", "before")
	waitSummary(t, c, "elected", "1 x grey")
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
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "wasmreconcile-operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	holder := *lease.Spec.HolderIdentity

	// Kill the leader: no chance to release the Lease.
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	updateWidgetSize(t, c, "elected", 2)
	if err := c.Create(ctx, widget("after-takeover", 5)); err != nil {
		t.Fatal(err)
	}
	// The WebApp's module came from a ReconcileModule, which the standby
	// loaded before it was elected.
	for i := 0; ; i++ {
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(app.Object, "after", "spec", "config", "MODE")
		if err := c.Update(ctx, app); err == nil {
			break
		} else if i > 20 {
			t.Fatal(err)
		}
	}
	waitSummary(t, c, "elected", "2 x grey")
	waitSummary(t, c, "after-takeover", "5 x grey")
	waitConfigMapValue(t, c, "shop-config", "MODE", "after")
	t.Logf("takeover: changes made after the leader was killed converged %s later (lease duration 4s)", time.Since(killed).Round(100*time.Millisecond))
	if reconciles(standby) <= 0 {
		t.Error("the standby converged nothing after the takeover")
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "wasmreconcile-operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	if now := *lease.Spec.HolderIdentity; now == holder {
		t.Errorf("Lease still held by %s after the leader was killed", now)
	}
}

// waitConfigMapValue waits until ConfigMap default/name has data[key] = want.
func waitConfigMapValue(t *testing.T, c client.Client, name, key, want string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &cm); err == nil && cm.Data[key] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ConfigMap %s never had %s=%s", name, key, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
