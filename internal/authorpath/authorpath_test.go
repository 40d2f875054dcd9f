// Package authorpath holds the test of a module author's whole path, run
// as an author runs it: with nothing but the operator binary, in an empty
// directory (issue 28's Done-when).
package authorpath

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
	"github.com/wasmreconcile/wasmreconcile/internal/syncbuffer"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// author runs commands in the module's directory, with the operator binary
// first on $PATH and no guest SDK checkout named anywhere.
type author struct {
	t        *testing.T
	dir      string // the module
	operator string // the binary
	env      []string
}

func (a *author) cmd(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Dir = a.dir
	c.Env = a.env
	return c
}

// run runs name args and fails the test unless it succeeds; it returns
// the output.
func (a *author) run(name string, args ...string) string {
	a.t.Helper()
	start := time.Now()
	out, err := a.cmd(name, args...).CombinedOutput()
	if err != nil {
		a.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	a.t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(10*time.Millisecond))
	return string(out)
}

// fails runs name args and fails the test if it succeeds.
func (a *author) fails(name string, args ...string) string {
	a.t.Helper()
	out, err := a.cmd(name, args...).CombinedOutput()
	if err == nil {
		a.t.Fatalf("%s %s succeeded:\n%s", name, strings.Join(args, " "), out)
	}
	return string(out)
}

func (a *author) write(path, content string) {
	a.t.Helper()
	full := filepath.Join(a.dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		a.t.Fatal(err)
	}
}

// edit replaces old, which must occur, with new in path.
func (a *author) edit(path, old, new string) {
	a.t.Helper()
	b, err := os.ReadFile(filepath.Join(a.dir, path))
	if err != nil {
		a.t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		a.t.Fatalf("%s does not contain %q:\n%s", path, old, b)
	}
	a.write(path, strings.Replace(string(b), old, new, 1))
}

func (a *author) sha256(path string) string {
	a.t.Helper()
	b, err := os.ReadFile(filepath.Join(a.dir, path))
	if err != nil {
		a.t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// children is the scaffold's children function after the author's edit:
// the ConfigMap, and an Ingress for spec.host (a field of the typed spec).
const children = `func children(obj guest.Object, spec v1alpha1.ShopSpec) []map[string]any {
	message := spec.Message
	if message == "" {
		message = "hello from shop"
	}
	cm := &k8s.ConfigMap{
		ObjectMeta: k8s.ObjectMeta{Name: obj.Name()},
		Data:       map[string]string{"message": message},
	}
	out := []map[string]any{cm.Child()}
	if spec.Host != "" {
		prefix := k8s.PathTypePrefix
		ing := &k8s.Ingress{
			ObjectMeta: k8s.ObjectMeta{Name: obj.Name()},
			Spec: k8s.IngressSpec{Rules: []k8s.IngressRule{{Host: spec.Host, HTTP: &k8s.HTTPIngressRuleValue{
				Paths: []k8s.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: k8s.IngressBackend{
					Service: &k8s.IngressServiceBackend{Name: obj.Name(), Port: k8s.ServiceBackendPort{Number: 80}},
				}}},
			}}}},
		}
		out = append(out, ing.Child())
	}
	return out
}
`

func ingressCase(name, host string) string {
	return `name: ` + name + `
input:
  object:
    apiVersion: shop.example.com/v1alpha1
    kind: Shop
    metadata: {name: web, namespace: default, generation: 1}
    spec: {message: hi, host: ` + host + `}
expect:
  children:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: web}
      data: {message: hi}
    - apiVersion: networking.k8s.io/v1
      kind: Ingress
      metadata: {name: web}
      spec: {rules: [{host: ` + host + `}]}
`
}

// TestAuthorPath runs, in an empty temporary directory with only the
// built operator binary: init → a typed spec field → make manifests
// (controller-gen) → make test → operator test --api-server, where an
// upper-case Ingress host fails with the API server's message → make
// deploy → operator dev → a ReconcileModule that takes the module over
// with a candidate: canary, shadow and promotion → a child the API server
// refuses, recorded → operator record with the dev kubeconfig → the
// recording tested and replayed offline.
func TestAuthorPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the operator and modules and starts control planes; skipped with -short")
	}
	for _, tool := range []string{"go", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the author's path needs %s on $PATH: %v", tool, err)
		}
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = controlplane.CacheAssets()
	}
	bin := t.TempDir()
	operator := filepath.Join(bin, "operator")
	build := exec.Command("go", "build", "-o", operator, "./cmd/operator")
	build.Dir = testwasm.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	home := t.TempDir()
	a := &author{t: t, dir: home, operator: operator}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "WASMRECONCILE_SDK" || k == "GOWORK" || k == "GOFLAGS" || k == "PATH" || k == "KUBEBUILDER_ASSETS" || k == "KUBECONFIG" || k == "WASMRECONCILE_TOKEN" {
			continue
		}
		a.env = append(a.env, kv)
	}
	a.env = append(a.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBEBUILDER_ASSETS="+assets)

	// init, in an empty directory outside any checkout.
	out := a.run(operator, "init", "shop", "--for", "shop.example.com/v1alpha1/Shop", "--owns", "v1/ConfigMap", "--owns", "networking.k8s.io/v1/Ingress")
	if !strings.Contains(out, "the guest SDK this operator carries") {
		t.Errorf("init did not unpack the SDK the binary carries:\n%s", out)
	}
	a.dir = filepath.Join(home, "shop")

	// A typed spec field, used by the handler, declared once.
	a.edit("api/v1alpha1/types.go", "	Message string `json:\"message,omitempty\"`\n", "	Message string `json:\"message,omitempty\"`\n"+
		"	// Host, when set, is served by an Ingress to the Service of the Shop's name.\n"+
		"	// +kubebuilder:validation:MaxLength=253\n	// +optional\n	Host string `json:\"host,omitempty\"`\n")
	mainGo, err := os.ReadFile(filepath.Join(a.dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(mainGo), "func children(")
	end := strings.Index(string(mainGo), "// main is never called")
	if start < 0 || end < start {
		t.Fatalf("main.go has no children function:\n%s", mainGo)
	}
	a.write("main.go", string(mainGo[:start])+children+"\n"+string(mainGo[end:]))
	a.write("testdata/cases/ingress.yaml", ingressCase("a host gets an Ingress", "shop.example.com"))

	out = a.run("make", "manifests")
	if !strings.Contains(out, "controller-gen") || !strings.Contains(out, "generate") {
		t.Errorf("make manifests ran neither controller-gen nor operator generate:\n%s", out)
	}
	crd, _ := os.ReadFile(filepath.Join(a.dir, "crds", "shop.example.com_shops.yaml"))
	if !strings.Contains(string(crd), "host:") || !strings.Contains(string(crd), "maxLength: 253") {
		t.Errorf("the CRD make manifests wrote has no spec.host:\n%s", crd)
	}
	out = a.run("make", "test")
	if !strings.Contains(out, "3 passed, 0 failed") {
		t.Errorf("make test: want the scaffold's cases and the author's to pass:\n%s", out)
	}

	// An upper-case host: offline checks pass, the API server refuses it.
	a.write("testdata/cases/upper.yaml", ingressCase("an upper-case host", "Shop.Example.com"))
	out = a.run(operator, "test", "--crds", "crds", "build/shop.wasm", "testdata/cases")
	if !strings.Contains(out, "4 passed, 0 failed") || !strings.Contains(out, "API server: not run") {
		t.Errorf("operator test without --api-server:\n%s", out)
	}
	out = a.fails(operator, "test", "--api-server", "--crds", "crds", "build/shop.wasm", "testdata/cases")
	for _, want := range []string{
		"API server: kube-apiserver " + controlplane.KubernetesVersion + ", local, server-side dry-run",
		"FAIL  an upper-case host",
		`the API server would refuse child Ingress default/web: Ingress.networking.k8s.io "web" is invalid: spec.rules[0].host: Invalid value: "Shop.Example.com": a lowercase RFC 1123 subdomain`,
		"3 passed, 1 failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("operator test --api-server lacks %q:\n%s", want, out)
		}
	}
	if err := os.Remove(filepath.Join(a.dir, "testdata", "cases", "upper.yaml")); err != nil {
		t.Fatal(err)
	}
	a.run("make", "deploy")
	v1 := a.sha256("deploy/shop.wasm")

	// operator dev, on the deploy directory.
	dev := startDev(t, a)
	a.env = append(a.env, "KUBECONFIG="+dev.kubeconfig) // as the author exports it
	cfg, err := clientcmd.BuildConfigFromFlags("", dev.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	shops := dyn.Resource(schema.GroupVersionResource{Group: "shop.example.com", Version: "v1alpha1", Resource: "shops"}).Namespace("default")
	ctx := context.Background()
	shop := func(name, host string, labels map[string]string) {
		t.Helper()
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "shop.example.com/v1alpha1", "kind": "Shop",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"message": "hi " + name},
		}}
		if host != "" {
			o.Object["spec"].(map[string]any)["host"] = host
		}
		o.SetLabels(labels)
		if _, err := shops.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(name, status, reason string) {
		t.Helper()
		var last any
		for deadline := time.Now().Add(3 * time.Minute); ; {
			o, err := shops.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
				for _, c := range conditions {
					if c, _ := c.(map[string]any); c["type"] == "Ready" {
						last = c
						if c["status"] == status && c["reason"] == reason {
							return
						}
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("Shop %s: Ready is %v after 3 minutes, want %s %s\noperator dev (end):\n%s", name, last, status, reason, dev.tail())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	shop("web", "web.example.com", nil)
	ready("web", "True", "ChildrenReady")

	// v2: the same answers from other bytes (a debug log line).
	a.edit("main.go", "	gen := obj.Generation()\n", "	gen := obj.Generation()\n	guest.Debug(\"reconciling\", \"generation\", gen)\n")
	a.run("make", "build")
	if err := os.Rename(filepath.Join(a.dir, "build", "shop.wasm"), filepath.Join(a.dir, "v2.wasm")); err != nil {
		t.Fatal(err)
	}
	v2 := a.sha256("v2.wasm")
	if v1 == v2 {
		t.Fatal("v2 has the bytes of v1")
	}

	// A ReconcileModule takes the module over from the directory, with v2
	// as a candidate: canary for the objects labelled track=canary,
	// shadow for the others, promoted after 3 agreeing calls.
	rms := dyn.Resource(schema.GroupVersionResource{Group: "wasmreconcile.io", Version: "v1alpha1", Resource: "reconcilemodules"})
	rm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "wasmreconcile.io/v1alpha1", "kind": "ReconcileModule",
		"metadata": map[string]any{"name": "shop"},
		"spec": map[string]any{
			"source": map[string]any{"file": filepath.Join(a.dir, "deploy", "shop.wasm"), "sha256": v1},
			"for":    map[string]any{"group": "shop.example.com", "version": "v1alpha1", "kind": "Shop"},
			"candidate": map[string]any{
				"source":  map[string]any{"file": filepath.Join(a.dir, "v2.wasm"), "sha256": v2},
				"canary":  map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"track": "canary"}}},
				"promote": map[string]any{"afterAgreeing": int64(3)},
			},
		},
	}}
	if _, err := rms.Create(ctx, rm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ReconcileModule: %v", err)
	}
	// The candidate judges the calls made once it runs (docs/rollout.md).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		o, err := rms.Get(ctx, "shop", metav1.GetOptions{})
		if err == nil {
			if d, _, _ := unstructured.NestedString(o.Object, "status", "rollout", "candidate", "digest"); d == "sha256:"+v2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the candidate does not run 2 minutes after the ReconcileModule's create:\n%s", dev.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	shop("canary", "", map[string]string{"track": "canary"})
	ready("canary", "True", "ChildrenReady")
	for i := range 4 {
		name := fmt.Sprintf("shadowed-%d", i)
		shop(name, "", nil)
		ready(name, "True", "ChildrenReady")
	}
	var promoted, servedByCandidate string
	for deadline := time.Now().Add(3 * time.Minute); promoted != "sha256:"+v2; {
		if time.Now().After(deadline) {
			o, _ := rms.Get(ctx, "shop", metav1.GetOptions{})
			t.Fatalf("v2 not promoted after 3 minutes; the ReconcileModule's status:\n%v\noperator dev (end):\n%s", o.Object["status"], dev.tail())
		}
		time.Sleep(200 * time.Millisecond)
		o, err := rms.Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			continue
		}
		promoted, _, _ = unstructured.NestedString(o.Object, "status", "rollout", "promoted", "digest")
		if n, ok, _ := unstructured.NestedInt64(o.Object, "status", "rollout", "candidate", "servedByCandidate"); ok && n > 0 {
			servedByCandidate = fmt.Sprint(n)
		}
	}
	if servedByCandidate == "" {
		t.Errorf("the canary object was never served by the candidate")
	}

	// A child the API server refuses: the status says so, and the flight
	// recorder keeps the call.
	shop("bad", "Bad.Example.com", nil)
	ready("bad", "False", "ChildFailed")
	endpoint := dev.metrics
	var recOut string
	for deadline := time.Now().Add(2 * time.Minute); ; {
		recOut = a.run(operator, "record", "--endpoint", endpoint, "--module", "shop", "--out", "recorded", "--failures-only")
		if strings.Contains(recOut, "wrote") && !strings.Contains(recOut, "wrote no case file") {
			break
		}
		if time.Now().After(deadline) {
			req, _ := http.NewRequest(http.MethodGet, endpoint+"/debug/flightrecorder", nil)
			req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
			listing := ""
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				listing = string(b)
			}
			t.Fatalf("operator record found no failed call in 2 minutes:\n%s\nthe recorder's modules: %s\noperator dev (end):\n%s", recOut, listing, dev.tail())
		}
		time.Sleep(time.Second)
	}
	dir := filepath.Join(a.dir, "recorded", "sha256-"+v2[:16])
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	refused := ""
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "refused:") && strings.Contains(string(b), "Bad.Example.com") {
			refused = f
		}
	}
	if refused == "" {
		t.Fatalf("no recorded case of %s holds the refused Ingress (operator record: %s)", dir, recOut)
	}

	// Offline: the recording passes on the version that made it, and
	// replays on the other one, which is named.
	out = a.run(operator, "test", "--crds", "crds", "v2.wasm", dir)
	if !strings.Contains(out, "0 failed") {
		t.Errorf("operator test on the recording:\n%s", out)
	}
	out = a.run(operator, "replay", dir, "--module", "deploy/shop.wasm")
	for _, want := range []string{"recorded on shop sha256:" + v2 + ", replayed on another version, sha256:" + v1, "SAME"} {
		if !strings.Contains(out, want) {
			t.Errorf("operator replay on v1 lacks %q:\n%s", want, out)
		}
	}
	dev.stop()
}

// devProcess is a running operator dev.
type devProcess struct {
	t                   *testing.T
	cmd                 *exec.Cmd
	out                 *syncbuffer.Buffer
	done                chan error
	kubeconfig, metrics string
}

// startDev starts operator dev on a's deploy directory and CRDs, and
// waits until the operator is ready.
func startDev(t *testing.T, a *author) *devProcess {
	t.Helper()
	d := &devProcess{t: t, out: &syncbuffer.Buffer{}, done: make(chan error, 1)}
	d.cmd = a.cmd(a.operator, "dev", "--module-dir", "deploy", "--crds", "crds")
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(d.stop)
	kc := regexp.MustCompile(`export KUBECONFIG=(\S+)`)
	rec := regexp.MustCompile(`record:\s+\S+ record --endpoint (\S+)`)
	for deadline := time.Now().Add(5 * time.Minute); !strings.Contains(d.out.String(), "operator ready"); {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("operator dev ended: %v\n%s", err, d.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator dev not ready after 5 minutes:\n%s", d.out.String())
		}
	}
	out := d.out.String()
	m, r := kc.FindStringSubmatch(out), rec.FindStringSubmatch(out)
	if m == nil || r == nil {
		t.Fatalf("operator dev printed no KUBECONFIG or record command:\n%s", out)
	}
	d.kubeconfig, d.metrics = m[1], r[1]
	return d
}

// stop interrupts operator dev (Ctrl-C) and waits for it to clean up.
func (d *devProcess) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(3 * time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("operator dev still ran 3 minutes after Ctrl-C:\n%s", d.tail())
	}
}

func (d *devProcess) tail() string { return d.out.Tail(6000) }
