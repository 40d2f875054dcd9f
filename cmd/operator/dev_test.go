//go:build !runonly

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
	"github.com/wasmreconcile/wasmreconcile/internal/recording"
	"github.com/wasmreconcile/wasmreconcile/internal/syncbuffer"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// devLog is the stderr of every operator dev these tests run, and where
// controller-runtime's logger writes (TestMain sets it first: the first
// logger set in a process is the one controller-runtime keeps), so it must
// be safe for concurrent writes and outlive every test.
var devLog = &syncbuffer.Buffer{}

// TestDevFlags checks operator dev's refusals, which come before anything
// starts.
func TestDevFlags(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args    []string
		wantErr string
	}{
		// ReconcileModules run by default in dev: no module at all needs them off.
		{[]string{"--crds", dir, "--reconcile-modules=false"}, "no modules: pass --module"},
		{[]string{"--module-dir", dir, "--kubeconfig", filepath.Join(dir, "k")}, "--kubeconfig does not apply to operator dev"},
		{[]string{"--module-dir", dir, "--assets", dir}, "no etcd in " + dir + " (Options.Assets): run `make controlplane` (or hack/controlplane.sh)"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		err := runDevContext(context.Background(), c.args, &out, devLog)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("dev %q: error %v, want %q", c.args, err, c.wantErr)
		}
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"dev", "--help"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage: operator dev", "-crds", "-kubeconfig-out", "-module-dir", `(default "a free port on 127.0.0.1")`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("operator dev --help lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestDev runs operator dev in this process on a module directory holding
// the widget and a CRD file holding two CRDs (two YAML documents), waits
// for the printed KUBECONFIG, creates a Widget and sees it reconciled, sees
// the garbage collector delete a ConfigMap the Widget owns once the Widget
// is deleted, then cancels (as Ctrl-C does) and checks that no process,
// directory or kubeconfig is left.
//
// The control-plane binaries come from $KUBEBUILDER_ASSETS, else the cache
// `make controlplane` fills; if they are missing, the test fails saying so.
func TestDev(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: it starts a control plane, which -short does not")
	}
	modules := t.TempDir()
	wasm, err := os.ReadFile(testwasm.BuildFile(t, "./widget"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, "widget.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	crds := t.TempDir()
	var both []byte
	for _, f := range []string{"widgets.examples.wasmreconcile.io.yaml", "webapps.examples.wasmreconcile.io.yaml"} {
		b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(), "examples", "crds", f))
		if err != nil {
			t.Fatal(err)
		}
		both = append(append(both, "---\n"...), b...)
	}
	if err := os.WriteFile(filepath.Join(crds, "crds.yaml"), both, 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfigOut := filepath.Join(t.TempDir(), "dev.kubeconfig")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, logs := &syncbuffer.Buffer{}, devLog
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- runDevContext(ctx, []string{"--module-dir", modules, "--crds", crds, "--kubeconfig-out", kubeconfigOut}, out, logs)
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	// Wait for the block that says where the cluster is.
	printed := regexp.MustCompile(`(?s)export KUBECONFIG=(\S+)\n.*metrics: +(\S+)\n.*logs: +(\S+)/\{`)
	var m []string
	for deadline := time.Now().Add(5 * time.Minute); m == nil; {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("operator dev ended before printing the kubeconfig: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kubeconfig printed after 5 minutes:\n%s", out.String())
		}
		m = printed.FindStringSubmatch(out.String())
	}
	kubeconfig, metricsURL, dir := m[1], m[2], m[3]
	t.Logf("kubeconfig printed after %s", time.Since(start).Round(time.Millisecond))
	if kubeconfig != kubeconfigOut {
		t.Errorf("printed KUBECONFIG=%s, want --kubeconfig-out %s", kubeconfig, kubeconfigOut)
	}
	// The CRDs of --crds, and the ReconcileModule CRD the binary carries.
	if !strings.Contains(out.String(), "CRDs established: reconcilemodules.wasmreconcile.io, webapps.examples.wasmreconcile.io, widgets.examples.wasmreconcile.io") {
		t.Errorf("the output does not name the three CRDs as established:\n%s", out.String())
	}
	if pids := controlplane.ProcessesUsing(dir); len(pids) != 3 {
		t.Errorf("processes using %s: %v, want etcd, kube-apiserver and kube-controller-manager", dir, pids)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// A token, which operator record can send, not a client certificate.
	if cfg.BearerToken == "" || len(cfg.CertData) > 0 {
		t.Errorf("the printed kubeconfig authenticates with a client certificate, not a token")
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Resource: "widgets"}).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "dev"},
		"spec":     map[string]any{"size": int64(2), "color": "red"},
	}}
	created := time.Now()
	w, err = widgets.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var summary string
	for deadline := time.Now().Add(3 * time.Minute); summary != "2 x red"; {
		if time.Now().After(deadline) {
			t.Fatalf("the Widget's status.summary is %q after 3 minutes, want \"2 x red\"\n%s\noperator log (end):\n%s", summary, out.String(), logs.Tail(4000))
		}
		time.Sleep(100 * time.Millisecond)
		got, err := widgets.Get(ctx, "dev", metav1.GetOptions{})
		if err == nil {
			summary, _, _ = unstructured.NestedString(got.Object, "status", "summary")
		}
	}
	t.Logf("Widget reconciled %s after its create", time.Since(created).Round(time.Millisecond))

	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `wasmreconcile_reconcile_total{module="widget",result="Success"}`) {
		t.Errorf("%s has no successful widget reconcile:\n%.2000s", metricsURL, body)
	}

	checkDevRollout(ctx, t, cfg, metricsURL, filepath.Join(modules, "widget.wasm"), logs)

	// The garbage collector deletes what the Widget owns once it is gone.
	cms := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned-by-dev", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "examples.wasmreconcile.io/v1alpha1", Kind: "Widget", Name: "dev", UID: w.GetUID(), BlockOwnerDeletion: ptr.To(true),
	}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := widgets.Delete(ctx, "dev", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		_, err := cms.Get(ctx, "owned-by-dev", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Widget's ConfigMap is still there 2 minutes after the Widget's delete (last get: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the Widget's ConfigMap collected %s after the Widget's delete", time.Since(deleted).Round(time.Millisecond))

	// operator dev serves new bytes on the interpreter first and compiles
	// them in the background; a stop waits for the compile's current phase
	// (seconds, a minute under -race on two loaded cores), which the
	// manager's 30 s grace period may not cover. Stop once it is done.
	for deadline := time.Now().Add(5 * time.Minute); !strings.Contains(logs.String(), "compiled version replaced the interpreted one"); {
		if time.Now().After(deadline) {
			t.Fatalf("the widget's compiled code never replaced the interpreted one\noperator log (end):\n%s", logs.Tail(4000))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Ctrl-C: everything stops and is removed.
	cancel()
	stopping := time.Now()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("operator dev after cancel: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("operator dev still running 3 minutes after cancel:\n%s\noperator log (end):\n%s", out.String(), logs.Tail(4000))
	}
	t.Logf("stopped %s after cancel", time.Since(stopping).Round(time.Millisecond))
	if !strings.Contains(out.String(), "stopped; removed "+dir) {
		t.Errorf("the output does not end with the cleanup:\n%s", out.String())
	}
	if pids := controlplane.ProcessesUsing(dir); len(pids) != 0 {
		t.Errorf("after operator dev, processes still use %s: %v", dir, pids)
	}
	for _, f := range []string{dir, kubeconfigOut} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("after operator dev, %s: %v, want it removed", f, err)
		}
	}
	t.Logf("output:\n%s", out.String())
}

// checkDevRollout checks, on a running operator dev whose module directory
// runs the widget (in file), that the flight recorder answers the printed
// kubeconfig's token (operator record's request), and that a
// ReconcileModule of the widget's name takes the module over with no extra
// flag, CRD or role, and gives it back to the file when deleted.
func checkDevRollout(ctx context.Context, t *testing.T, cfg *rest.Config, metricsURL, file string, logs *syncbuffer.Buffer) {
	t.Helper()
	endpoint := strings.TrimSuffix(metricsURL, "/metrics")
	var cases []modtest.Case
	for deadline := time.Now().Add(2 * time.Minute); len(cases) == 0; {
		var err error
		cases, err = recording.Fetch(ctx, recording.FetchOptions{Endpoint: endpoint, Path: operator.FlightRecorderPath, Module: "widget", Token: cfg.BearerToken, Timeout: 30 * time.Second})
		if err != nil && !strings.Contains(err.Error(), "no records of module") { // none kept yet: the replay runs after the call
			t.Fatalf("operator record with the dev kubeconfig's token: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the flight recorder kept no call of the widget in 2 minutes")
		}
		if len(cases) == 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	rms := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "wasmreconcile.io", Version: "v1alpha1", Resource: "reconcilemodules"})
	rm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wasmreconcile.io/v1alpha1", "kind": "ReconcileModule",
		"metadata": map[string]any{"name": "widget"},
		"spec": map[string]any{
			"source": map[string]any{"file": file, "sha256": hex.EncodeToString(sum[:])},
			"for":    map[string]any{"group": "examples.wasmreconcile.io", "version": "v1alpha1", "kind": "Widget"},
		},
	}}
	if _, err := rms.Create(ctx, rm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a ReconcileModule in operator dev: %v", err)
	}
	var reason string
	for deadline := time.Now().Add(2 * time.Minute); reason != "Loaded"; {
		if time.Now().After(deadline) {
			t.Fatalf("the ReconcileModule's Ready reason is %q after 2 minutes, want Loaded (it takes over the file's module)\noperator log (end):\n%s", reason, logs.Tail(4000))
		}
		time.Sleep(100 * time.Millisecond)
		got, err := rms.Get(ctx, "widget", metav1.GetOptions{})
		if err != nil {
			continue
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			if c, _ := c.(map[string]any); c["type"] == "Ready" {
				reason, _ = c["reason"].(string)
			}
		}
	}
	if !strings.Contains(logs.String(), "module taken over") {
		t.Errorf("no log line says the ReconcileModule took the module over")
	}
	if err := rms.Delete(ctx, "widget", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(logs.String(), "the module it took over from serves again"); {
		if time.Now().After(deadline) {
			t.Fatalf("the file's module does not serve again 2 minutes after the ReconcileModule's delete\noperator log (end):\n%s", logs.Tail(4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
