//go:build !runonly

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/config/crd"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
)

const devUsage = `Usage: operator dev [--module-dir DIR] [--crds DIR ...] [flags]

An operator author's inner loop in one command. It starts a local control
plane (etcd, kube-apiserver and kube-controller-manager, on loopback, in a
temporary directory), installs the CRDs of --crds and waits until they are
established, and runs the operator in this process on --module-dir, as
operator run does: rebuild a module into DIR and it is hot-reloaded, with no
restart. It prints the KUBECONFIG to export and the metrics URL. Ctrl-C (or
SIGTERM) stops the operator and the control plane and removes the temporary
directory; if this process is killed, the control plane dies with it.

The whole product runs, with no extra flag, CRD or role: ReconcileModules
(their CRD installed; --reconcile-modules and --file-modules-yield default
to true), so a ReconcileModule of a module's name takes it over from the
directory for a rollout (shadow, canary, promotion; status refreshed every
2 s) and gives it back when deleted; and the flight recorder, which
operator record reads with the printed kubeconfig: its user is the token
of ServiceAccount wasmreconcile-system/developer, bound to cluster-admin.

kube-controller-manager runs the default controllers, so the garbage
collector deletes children with their owner and a deleted namespace is
emptied, as in a real cluster (no pods run: there is no scheduler or
kubelet). The binaries come from --assets, else $KUBEBUILDER_ASSETS, else
the cache that make controlplane (hack/controlplane.sh) fills.

Every flag of operator run applies, except --kubeconfig; --interpreter-first
defaults to true (a rebuilt module serves at once on wazero's interpreter,
then on its compiled code);
--metrics-bind-address and --health-probe-bind-address default to free
loopback ports, and the operator's log (on stderr) to console lines without
stack traces (--zap-encoder=json for operator run's JSON).

Examples:
  make controlplane modules
  mkdir -p dev && cp bin/modules/widget.wasm dev/
  operator dev --module-dir dev --crds examples/crds
  # in another shell: export KUBECONFIG=... as printed, then
  kubectl apply -f examples/widgets/widgets.yaml
  (cd modules && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ../dev/widget.wasm ./widget)   # hot reload

Flags:
`

// runDev is `operator dev`: until SIGINT or SIGTERM. After the first
// signal a second one ends the process at once (the control plane dies
// with it, but its directory stays).
func runDev(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	return runDevContext(ctx, args, stdout, stderr)
}

// runDevContext is `operator dev` until ctx ends.
func runDevContext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runOperatorWith(args, stderr, &devCommand{ctx: ctx, stdout: stdout})
}

// devCommand holds operator dev's own flags; runOperatorWith parses them
// with operator run's and hands over to run.
type devCommand struct {
	ctx    context.Context
	stdout io.Writer

	crds                stringList
	assets              string
	kubeconfigOut       string
	noControllerManager bool

	start time.Time
	mu    sync.Mutex // orders lines on stdout
}

// register adds dev's flags and usage to run's flag set.
func (d *devCommand) register(fs *flag.FlagSet) {
	fs.Var(&d.crds, "crds", "directory (or file) of CRDs to install and wait for before the operator starts: .yaml, .yml or .json, several documents to a file allowed (repeatable)")
	fs.StringVar(&d.assets, "assets", "", "directory of etcd, kube-apiserver and kube-controller-manager (default: $KUBEBUILDER_ASSETS, else "+controlplane.CacheAssets()+")")
	fs.StringVar(&d.kubeconfigOut, "kubeconfig-out", "", "also write the cluster's kubeconfig to this file, removed at exit (default: only in the temporary directory)")
	fs.BoolVar(&d.noControllerManager, "no-controller-manager", false, "do not run kube-controller-manager: no garbage collection, namespace deletion or ServiceAccounts")
	for _, name := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		fs.Lookup(name).DefValue = "a free port on 127.0.0.1"
	}
	// Logs for a person at a terminal: console lines with readable times,
	// no stack traces of the host's own code.
	for name, value := range map[string]string{"zap-encoder": "console", "zap-time-encoding": "iso8601", "zap-stacktrace-level": "panic"} {
		if f := fs.Lookup(name); f != nil && f.Value.Set(value) == nil {
			f.DefValue = value
		}
	}
	// Reloads answer at once: new bytes run on the interpreter until their
	// compiled code is ready (seconds for a Go module). The whole product
	// runs: ReconcileModules (their CRD installed), which take over a
	// module of the directory by its name for a rollout.
	for _, name := range []string{"interpreter-first", "reconcile-modules", "file-modules-yield"} {
		if f := fs.Lookup(name); f != nil && f.Value.Set("true") == nil {
			f.DefValue = "true"
		}
	}
	// A rollout's counts and promotion show in a ReconcileModule's status
	// within seconds, not run's 30.
	if f := fs.Lookup("module-status-interval"); f != nil && f.Value.Set(devStatusInterval.String()) == nil {
		f.DefValue = devStatusInterval.String()
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), devUsage)
		fs.PrintDefaults()
	}
}

// run starts the control plane, then the operator through startOperator
// (operator run's code path) until d.ctx ends, then stops both.
func (d *devCommand) run(fs *flag.FlagSet, opts *operator.Options, mo *operator.ManagerOptions, startOperator func(context.Context, *rest.Config) error) (err error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["kubeconfig"] {
		return errors.New("--kubeconfig does not apply to operator dev, which starts its own cluster; --kubeconfig-out FILE writes that cluster's kubeconfig to FILE")
	}
	for name, addr := range map[string]*string{"metrics-bind-address": &mo.MetricsBindAddress, "health-probe-bind-address": &mo.HealthProbeBindAddress} {
		if set[name] {
			continue
		}
		if *addr, err = freeLoopbackAddr(); err != nil {
			return err
		}
	}

	d.start = time.Now()
	var builtin []*apiextensionsv1.CustomResourceDefinition
	if opts.ReconcileModules {
		rm := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(crd.ReconcileModule, rm); err != nil {
			return fmt.Errorf("the ReconcileModule CRD this binary carries: %w", err)
		}
		builtin = append(builtin, rm)
	}
	cp, err := controlplane.Start(d.ctx, controlplane.Options{
		Assets:              d.assets,
		CRDDirs:             d.crds,
		CRDs:                builtin,
		NoControllerManager: d.noControllerManager,
		Progress:            func(line string) { d.say("%s", line) },
	})
	if err != nil {
		if d.ctx.Err() != nil {
			d.say("interrupted while starting the control plane; stopped it")
			return nil
		}
		if d.assets == "" {
			err = fmt.Errorf("%w (or pass --assets DIR)", err)
		}
		return err
	}
	defer func() {
		d.say("stopping the control plane")
		if stopErr := cp.Stop(); stopErr != nil {
			d.say("stopping the control plane: %v", stopErr)
		}
		if d.kubeconfigOut != "" {
			_ = os.Remove(d.kubeconfigOut)
		}
		d.say("stopped; removed %s", cp.Dir())
	}()

	// A kubeconfig with a token, which kubectl and operator record (the
	// flight recorder authenticates bearer tokens) both use.
	kubeconfig := cp.Kubeconfig()
	if k, err := developerKubeconfig(d.ctx, cp); err != nil {
		d.say("no token kubeconfig (%v): the printed one uses a client certificate, which operator record cannot use; pass it --token-file", err)
	} else {
		kubeconfig = k
	}
	if d.kubeconfigOut != "" {
		b, err := os.ReadFile(kubeconfig)
		if err != nil {
			return err
		}
		if err := os.WriteFile(d.kubeconfigOut, b, 0o600); err != nil {
			return fmt.Errorf("--kubeconfig-out: %w", err)
		}
		if kubeconfig, err = filepath.Abs(d.kubeconfigOut); err != nil {
			return err
		}
	}
	controllers := "kube-controller-manager running"
	if d.noControllerManager {
		controllers = "no kube-controller-manager"
	}
	crds := "no CRDs"
	if names := cp.CRDs(); len(names) > 0 {
		crds = "CRDs established: " + strings.Join(names, ", ")
	}
	d.say("control plane ready at %s (%s; %s)", cp.RESTConfig().Host, controllers, crds)

	var sources []string
	if opts.ModuleDir != "" {
		dir, _ := filepath.Abs(opts.ModuleDir)
		sources = append(sources, "module directory "+dir+" (hot reload)")
	}
	if len(opts.Modules) > 0 {
		sources = append(sources, "modules "+strings.Join(opts.Modules, ", "))
	}
	if opts.ReconcileModules {
		sources = append(sources, "ReconcileModule objects")
	}
	d.say("starting the operator on %s", strings.Join(sources, ", "))
	d.mu.Lock()
	fmt.Fprintf(d.stdout, "\n    export KUBECONFIG=%s\n", kubeconfig)
	if kubectl := filepath.Join(cp.Assets(), "kubectl"); isFile(kubectl) {
		fmt.Fprintf(d.stdout, "    kubectl:  %s\n", kubectl)
	}
	fmt.Fprintf(d.stdout, "    metrics:  %s\n", httpURL(mo.MetricsBindAddress, "/metrics"))
	fmt.Fprintf(d.stdout, "    health:   %s\n", httpURL(mo.HealthProbeBindAddress, "/readyz"))
	fmt.Fprintf(d.stdout, "    logs:     %s/{etcd,kube-apiserver,kube-controller-manager}.log\n", cp.Dir())
	if !opts.FlightRecorder.Disabled && mo.MetricsBindAddress != "0" {
		fmt.Fprintf(d.stdout, "    record:   %s record --endpoint %s --module NAME   # with KUBECONFIG exported\n", operatorCommand(), strings.TrimSuffix(httpURL(mo.MetricsBindAddress, ""), "/"))
	}
	fmt.Fprintln(d.stdout)
	d.mu.Unlock()

	// Say when the operator is ready (its caches synced), and when it is
	// asked to stop.
	var wg sync.WaitGroup
	opCtx, opDone := context.WithCancel(d.ctx)
	defer opDone()
	if ready := httpURL(mo.HealthProbeBindAddress, "/readyz"); ready != "disabled" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if waitHTTP200(opCtx, ready) {
				d.say("operator ready. Ctrl-C stops the operator and the control plane")
			}
		}()
	}
	stopSaid := context.AfterFunc(d.ctx, func() { d.say("interrupted: stopping the operator") })
	defer stopSaid()

	err = startOperator(opCtx, cp.RESTConfig())
	opDone()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("the operator stopped: %w", err)
	}
	if d.ctx.Err() == nil {
		return errors.New("the operator stopped on its own")
	}
	return nil
}

func (d *devCommand) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.stdout, "==> [%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// freeLoopbackAddr returns a loopback address with a port free at the time of the
// call.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// httpURL is the URL of path on a server bound to addr, or "disabled" for
// "0" and "".
func httpURL(addr, path string) string {
	if addr == "0" || addr == "" {
		return "disabled"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + path
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path
}

// waitHTTP200 polls url until it answers 200 (true) or ctx ends (false).
func waitHTTP200(ctx context.Context, url string) bool {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// devStatusInterval is operator dev's --module-status-interval.
const devStatusInterval = 2 * time.Second

// Names of the account whose token the developer kubeconfig carries.
const (
	devNamespace      = "wasmreconcile-system"
	devServiceAccount = "developer"
	devTokenSeconds   = 7 * 24 * 3600
)

// developerKubeconfig writes, in cp's directory, a kubeconfig of cp whose
// user is a bearer token of ServiceAccount wasmreconcile-system/developer,
// bound to cluster-admin: what kubectl and operator record (whose flight
// recorder authenticates tokens with a TokenReview) use. It returns its
// path.
func developerKubeconfig(ctx context.Context, cp *controlplane.ControlPlane) (string, error) {
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return "", err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: devNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: devServiceAccount, Namespace: devNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(devNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wasmreconcile-dev-developer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: devServiceAccount, Namespace: devNamespace}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	seconds := int64(devTokenSeconds)
	tr, err := cs.CoreV1().ServiceAccounts(devNamespace).CreateToken(ctx, devServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	cfg := cp.RESTConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["dev"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["developer"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["dev"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: "developer", Namespace: metav1.NamespaceDefault}
	kc.CurrentContext = "dev"
	path := filepath.Join(cp.Dir(), "developer.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}
