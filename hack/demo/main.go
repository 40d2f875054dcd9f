// Command demo runs wasmreconcile end to end on an embedded, real control
// plane: it starts etcd, kube-apiserver and kube-controller-manager on
// loopback in a temporary directory (internal/controlplane), installs the
// example CRDs, starts one operator with the example modules, applies sample
// Widgets and a WebApp, and shows with kubectl their status converging and
// the WebApp's children appearing. Ctrl-C stops everything and removes the
// temporary directory.
//
// It is run by `make demo`, which builds the binaries it needs first:
//
//	demo --assets DIR --operator bin/operator --modules bin/modules/widget.wasm,bin/modules/webapp.wasm
//
// The operator watches a module directory (--module-dir). After the Widgets
// and the WebApp converge, the demo changes a Widget's spec and turns the
// WebApp's Service off (the status follows, the Service is pruned), then:
//   - hot-reloads widget v2 by copying it into the directory: the Widgets'
//     Ready message changes to "widget v2" with no restart;
//   - releases a buggy widget v3 that spins forever: the host preempts every
//     call, records a Warning Event on each Widget and counts
//     wasmreconcile_preemptions_total, while the WebApp module is unaffected;
//   - rolls back to v2 (still compiled: instant) and shows a change converge;
//   - deletes a namespace holding a WebApp: kube-controller-manager's
//     namespace controller deletes the WebApp, the webapp module's finalizer
//     tears its children down, and the namespace goes.
//
// It then prints where to look and waits for Ctrl-C; with --exit-when-done it
// exits 0 instead, or 1 as soon as a step fails or times out.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo: error:", err)
		os.Exit(1)
	}
}

type demo struct {
	kubectl    string
	kubeconfig string
	start      time.Time
}

func run() error {
	var (
		assets       = flag.String("assets", "", "directory with etcd, kube-apiserver, kube-controller-manager and kubectl (default: $KUBEBUILDER_ASSETS, else "+controlplane.CacheAssets()+", where hack/controlplane.sh builds them)")
		operatorBin  = flag.String("operator", "bin/operator", "operator binary")
		modules      = flag.String("modules", "bin/modules/widget.wasm,bin/modules/webapp.wasm", "comma-separated modules to run")
		crds         = flag.String("crds", "examples/crds", "directory of CRDs to install")
		samples      = flag.String("samples", "examples/widgets/widgets.yaml", "sample Widgets to apply")
		webapp       = flag.String("webapp", "examples/webapps/shop.yaml", "sample WebApp to apply")
		widgetV2     = flag.String("widget-v2", "bin/modules/demo/widget-v2.wasm", "widget built with -X main.Version=2")
		widgetBuggy  = flag.String("widget-buggy", "bin/modules/demo/widget-v3-loop.wasm", "widget built with -X main.Version=3 -X main.Bug=loop")
		exitDone     = flag.Bool("exit-when-done", false, "exit at the end of the walkthrough instead of waiting for Ctrl-C (for scripts and CI)")
		readyTimeout = flag.Duration("ready-timeout", 2*time.Minute, "how long to wait for the Widgets to become Ready")
	)
	flag.Parse()
	moduleList := strings.Split(*modules, ",")
	for _, f := range append([]string{*operatorBin, *crds, *samples, *webapp, *widgetV2, *widgetBuggy}, moduleList...) {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w; run `make demo` from the repository root", err)
		}
	}
	d := &demo{start: time.Now()}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "wasmreconcile-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	cp, err := controlplane.Start(ctx, controlplane.Options{
		Assets:   *assets,
		CRDDirs:  []string{*crds},
		Progress: func(line string) { d.say("%s", line) },
	})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		d.say("stopping the control plane")
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping control plane:", err)
		}
	}()
	d.kubeconfig = cp.Kubeconfig()
	d.kubectl = filepath.Join(cp.Assets(), "kubectl")
	d.say("control plane up at %s; CRDs from %s established", cp.RESTConfig().Host, *crds)
	if err := d.kubectl_(ctx, "version"); err != nil {
		return err
	}

	moduleDir := filepath.Join(tmp, "modules")
	if err := os.MkdirAll(moduleDir, 0o755); err != nil {
		return err
	}
	for _, m := range moduleList {
		if err := copyFile(m, filepath.Join(moduleDir, filepath.Base(m))); err != nil {
			return err
		}
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	d.say("starting the operator on module directory %s (%s); metrics on http://%s/metrics", moduleDir, strings.Join(moduleList, ", "), metricsAddr)
	args := []string{"run", "--kubeconfig", d.kubeconfig, "--module-dir", moduleDir,
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "0"}
	op := exec.Command(*operatorBin, args...)
	op.Stdout = prefixWriter("[operator] ", os.Stdout)
	op.Stderr = prefixWriter("[operator] ", os.Stdout)
	// Ctrl-C reaches us, and we stop it in order; if we are killed, it dies too.
	op.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := op.Start(); err != nil {
		return fmt.Errorf("starting operator: %w", err)
	}
	opDone := make(chan error, 1)
	go func() { opDone <- op.Wait() }()
	defer func() {
		d.say("stopping the operator")
		_ = op.Process.Signal(syscall.SIGTERM)
		select {
		case <-opDone:
		case <-time.After(10 * time.Second):
			_ = op.Process.Kill()
			<-opDone
		}
	}()

	if err := d.kubectl_(ctx, "apply", "-f", *samples); err != nil {
		return err
	}
	if err := d.waitReady(ctx, opDone, *readyTimeout); err != nil {
		return err
	}
	d.say("a WebApp: the webapp module derives a ConfigMap and a Service, applied by the host with server-side apply")
	if err := d.kubectl_(ctx, "apply", "-f", *webapp); err != nil {
		return err
	}
	webapps := []string{"get", "webapps,configmaps,services", "-n", "default"}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "the WebApp Ready with its children", webapps, func(out string) bool {
		return webappReady(out) && strings.Contains(out, "configmap/shop-config") && strings.Contains(out, "service/shop ")
	}); err != nil {
		return err
	}
	d.say("changing spec.size of small-blue from 3 to 5; the guest recomputes the status")
	if err := d.kubectl_(ctx, "patch", "widget", "small-blue", "--type=merge", "-p", `{"spec":{"size":5}}`); err != nil {
		return err
	}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "small-blue summary 5 x blue", []string{"get", "widgets", "-n", "default"}, func(out string) bool {
		return strings.Contains(out, "5 x blue")
	}); err != nil {
		return err
	}
	d.say("turning the WebApp's Service off: the guest no longer desires it and the host prunes it")
	if err := d.kubectl_(ctx, "patch", "webapp", "shop", "--type=merge", "-p", `{"spec":{"expose":false}}`); err != nil {
		return err
	}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "the Service pruned", webapps, func(out string) bool {
		return !strings.Contains(out, "service/shop ")
	}); err != nil {
		return err
	}
	messages := []string{"get", "widgets", "-n", "default", "-o", "custom-columns=NAME:.metadata.name,SUMMARY:.status.summary,READY:.status.conditions[0].message"}
	d.say("hot reload: copying widget v2 into %s; the operator swaps it in between reconciles, no restart", moduleDir)
	if err := copyFile(*widgetV2, filepath.Join(moduleDir, "widget.wasm")); err != nil {
		return err
	}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "every Widget reconciled by widget v2", messages, func(out string) bool {
		return strings.Count(out, "widget v2") == strings.Count(out, "\n")-1 && strings.Contains(out, "widget v2")
	}); err != nil {
		return err
	}

	d.say("a buggy release: widget v3 loops forever (for {}); the host preempts each call by fuel or deadline")
	if err := copyFile(*widgetBuggy, filepath.Join(moduleDir, "widget.wasm")); err != nil {
		return err
	}
	preempted := []string{"get", "events", "-n", "default", "--field-selector", "type=Warning,involvedObject.kind=Widget", "-o", "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message"}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "preemption Events on the Widgets", preempted, func(out string) bool {
		return strings.Contains(out, "FuelExhausted") || strings.Contains(out, "DeadlineExceeded")
	}); err != nil {
		return err
	}
	if err := d.showMetrics(metricsAddr, "wasmreconcile_preemptions_total"); err != nil {
		return err
	}
	d.say("the webapp module is unaffected: turning the WebApp's Service back on")
	if err := d.kubectl_(ctx, "patch", "webapp", "shop", "--type=merge", "-p", `{"spec":{"expose":true}}`); err != nil {
		return err
	}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "the Service back", webapps, func(out string) bool {
		return strings.Contains(out, "service/shop ")
	}); err != nil {
		return err
	}

	d.say("rollback: copying widget v2 back; it is still compiled, so the swap is instant")
	if err := copyFile(*widgetV2, filepath.Join(moduleDir, "widget.wasm")); err != nil {
		return err
	}
	if err := d.kubectl_(ctx, "patch", "widget", "small-blue", "--type=merge", "-p", `{"spec":{"size":7}}`); err != nil {
		return err
	}
	if err := d.waitFor(ctx, opDone, *readyTimeout, "small-blue reconciled by v2 again", messages, func(out string) bool {
		return strings.Contains(out, "7 x blue")
	}); err != nil {
		return err
	}
	if err := d.showMetrics(metricsAddr, "wasmreconcile_module_reloads_total"); err != nil {
		return err
	}
	if err := d.namespaceDeletion(ctx, opDone, *readyTimeout); err != nil {
		return err
	}
	if *exitDone {
		d.say("walkthrough complete. With `make demo` the cluster keeps running; you would then try:")
	} else {
		d.say("the cluster keeps running. Try, in another shell:")
	}
	fmt.Printf("    export KUBECONFIG=%s\n", d.kubeconfig)
	fmt.Printf("    %s get widgets -w\n", d.kubectl)
	fmt.Printf("    %s patch widget large-red --type=merge -p '{\"spec\":{\"size\":500}}'\n", d.kubectl)
	fmt.Printf("    %s get events -n default\n", d.kubectl)
	fmt.Printf("    curl -s http://%s/metrics | grep ^wasmreconcile_\n", metricsAddr)
	fmt.Printf("    cp %s %s/widget.wasm   # hot reload again\n", *widgetBuggy, moduleDir)
	if *exitDone {
		d.say("exiting (--exit-when-done)")
		return nil
	}
	d.say("press Ctrl-C to stop everything")
	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case err := <-opDone:
		return fmt.Errorf("operator exited: %v", err)
	}
}

// stagingWebApp is a WebApp in namespace staging.
const stagingWebApp = `apiVersion: examples.wasmreconcile.io/v1alpha1
kind: WebApp
metadata:
  name: shop
  namespace: staging
spec:
  image: nginx:1.27
  port: 8080
`

// namespaceDeletion shows kube-controller-manager at work: a namespace
// holding a WebApp is deleted; the namespace controller deletes the WebApp,
// whose finalizer (the webapp module's) tears its children down, and then
// the namespace goes.
func (d *demo) namespaceDeletion(ctx context.Context, opDone <-chan error, timeout time.Duration) error {
	d.say("kube-controller-manager: a WebApp in namespace staging, then the namespace deleted; the namespace controller deletes the WebApp, whose finalizer (the webapp module) tears its children down, and the namespace goes")
	if err := d.kubectl_(ctx, "create", "namespace", "staging"); err != nil {
		return err
	}
	if err := d.kubectlStdin(ctx, stagingWebApp, "apply", "-f", "-"); err != nil {
		return err
	}
	staging := []string{"get", "webapps,configmaps,services", "-n", "staging"}
	if err := d.waitFor(ctx, opDone, timeout, "the staging WebApp Ready with its children", staging, func(out string) bool {
		return webappReady(out) && strings.Contains(out, "configmap/shop-config") && strings.Contains(out, "service/shop ")
	}); err != nil {
		return err
	}
	if err := d.kubectl_(ctx, "delete", "namespace", "staging", "--wait=false"); err != nil {
		return err
	}
	namespaces := []string{"get", "namespaces", "-o", "custom-columns=NAME:.metadata.name,STATUS:.status.phase"}
	return d.waitFor(ctx, opDone, timeout, "namespace staging and everything in it deleted", namespaces, func(out string) bool {
		return strings.Contains(out, "default") && !strings.Contains(out, "staging")
	})
}

// kubectlStdin runs kubectl with input on its standard input, echoing the
// command and the input as a here-document.
func (d *demo) kubectlStdin(ctx context.Context, input string, args ...string) error {
	fmt.Printf("$ kubectl %s <<EOF\n%sEOF\n", strings.Join(args, " "), input)
	cmd := exec.CommandContext(ctx, d.kubectl, append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// showMetrics prints the operator's samples of metric.
func (d *demo) showMetrics(addr, metric string) error {
	fmt.Printf("$ curl -s http://%s/metrics | grep ^%s\n", addr, metric)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return fmt.Errorf("reading metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, metric+"{") && !strings.HasSuffix(l, " 0") {
			fmt.Println(l)
		}
	}
	return nil
}

// copyFile copies src to dst through a temporary file and a rename, as a
// deploy tool would, so the watcher never sees half a module.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("==> [%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// kubectl_ runs kubectl against the demo cluster, echoing the command.
func (d *demo) kubectl_(ctx context.Context, args ...string) error {
	fmt.Printf("$ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.kubectl, append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// webappReady reports whether the WebApp row of `kubectl get webapps,...`
// shows READY True.
func webappReady(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && strings.HasPrefix(f[0], "webapp.") {
			return f[2] == "True"
		}
	}
	return false
}

// get runs kubectl quietly and returns its output.
func (d *demo) get(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, d.kubectl, append([]string{"--kubeconfig", d.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// waitReady prints the Widget table whenever it changes until every Widget is
// Ready=True.
func (d *demo) waitReady(ctx context.Context, opDone <-chan error, timeout time.Duration) error {
	return d.waitFor(ctx, opDone, timeout, "every Widget Ready", []string{"get", "widgets", "-n", "default"}, func(out string) bool {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 {
			return false
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 6 || f[len(f)-2] != "True" {
				return false
			}
		}
		return true
	})
}

// waitFor prints `kubectl ARGS` whenever its output changes, until done
// reports true for it.
func (d *demo) waitFor(ctx context.Context, opDone <-chan error, timeout time.Duration, what string, args []string, done func(string) bool) error {
	fmt.Printf("$ kubectl %s   # printed whenever it changes\n", strings.Join(args, " "))
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		out, err := d.get(ctx, args...)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if out != last {
			fmt.Print(out)
			last = out
		}
		if done(out) {
			d.say("%s", what)
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case err := <-opDone:
			return fmt.Errorf("operator exited before %s: %v", what, err)
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// prefixWriter prefixes every line written to w.
func prefixWriter(prefix string, w io.Writer) io.Writer {
	return &prefixed{prefix: prefix, w: w}
}

type prefixed struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    bytes.Buffer
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	for {
		line, err := p.buf.ReadBytes('\n')
		if err != nil {
			p.buf.Write(line) // incomplete line: keep for the next write
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s", p.prefix, line); err != nil {
			return len(b), err
		}
	}
}
