// Package controlplane starts a local Kubernetes control plane: etcd,
// kube-apiserver and kube-controller-manager on loopback, in a temporary
// directory of their own, from the binaries hack/controlplane.sh builds. It
// serves `operator dev` and `make demo`.
//
// kube-controller-manager runs every controller that is on by default, so
// the cluster behaves like a real one where it matters to an operator: the
// garbage collector deletes children whose owner is gone (background and
// foreground propagation), a deleted namespace is emptied and removed, and
// every namespace gets its default ServiceAccount. Nothing runs pods: there
// is no scheduler and no kubelet.
//
// Every process dies with the Go process that started it, however it ends:
// etcd and kube-apiserver run through `setpriv --pdeathsig KILL`
// (util-linux), kube-controller-manager with the parent-death signal set
// directly, so a killed `operator dev` leaves nothing running. Each runs in
// a process group of its own, so a Ctrl-C in the terminal reaches only the
// Go process, which then stops them in order (Stop).
package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The versions hack/controlplane.sh builds by default (K8S_VERSION,
// ETCD_VERSION there); they name the cache directory (CacheAssets).
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
)

// The binaries Start runs.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
)

// CacheAssets returns the directory hack/controlplane.sh builds the binaries
// into, as that script computes it: $WASMRECONCILE_CACHE, else
// $XDG_CACHE_HOME/wasmreconcile, else $HOME/.cache/wasmreconcile, then
// controlplane/k8s-<KubernetesVersion>_etcd-<EtcdVersion>/bin.
func CacheAssets() string {
	root := os.Getenv("WASMRECONCILE_CACHE")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		root = filepath.Join(cache, "wasmreconcile")
	}
	return filepath.Join(root, "controlplane", "k8s-"+KubernetesVersion+"_etcd-"+EtcdVersion, "bin")
}

// DefaultAssets returns the directory the binaries are taken from when
// Options.Assets is empty: $KUBEBUILDER_ASSETS when set, else CacheAssets.
// from says which, for messages.
func DefaultAssets() (dir, from string) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, "$KUBEBUILDER_ASSETS"
	}
	return CacheAssets(), "the control-plane cache"
}

// Options configure Start. The zero value is a complete control plane with
// no CRDs, from the default binaries.
type Options struct {
	// Assets is the directory holding etcd, kube-apiserver and
	// kube-controller-manager. Default: DefaultAssets ($KUBEBUILDER_ASSETS,
	// else CacheAssets, where `make controlplane` builds them).
	Assets string
	// CRDDirs are directories (or files) of CustomResourceDefinitions to
	// install: .yaml, .yml or .json files, several documents to a file
	// allowed, documents of other kinds ignored. Start returns once every
	// one is Established. Default: none.
	CRDDirs []string
	// CRDs are CustomResourceDefinitions to install, as objects, after
	// those of CRDDirs. Default: none.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// NoControllerManager leaves kube-controller-manager out. Default
	// false: it runs, and Start returns once its controllers work (the
	// default namespace has its ServiceAccount). Without it no garbage
	// collection, namespace deletion or ServiceAccount happens.
	NoControllerManager bool
	// Controllers are the controllers kube-controller-manager runs (its
	// --controllers). Default: every controller on by default ("*"). A
	// list without "serviceaccount-controller" is not waited for: Start
	// returns once the process runs, and its controllers start within
	// seconds.
	Controllers []string
	// Progress is called with a line before each step that takes seconds.
	// Default: nil, nothing is reported.
	Progress func(line string)
	// StartTimeout bounds each step of Start (etcd, kube-apiserver, the
	// CRDs, kube-controller-manager). Default: 2 minutes.
	StartTimeout time.Duration
	// FeatureGates are kube-apiserver's --feature-gates, each NAME=true
	// or NAME=false (such as "ShardedListAndWatch=true"). Default: none,
	// the version's defaults.
	FeatureGates []string
	// AuditPolicy, when set, is a kube-apiserver audit policy (YAML, kind
	// Policy of audit.k8s.io/v1): the events it selects are written one
	// JSON object a line, as each request completes, to AuditLog().
	// Default: none, no audit log.
	AuditPolicy string
}

// AuditLog is the file of the audit events Options.AuditPolicy selects.
func (cp *ControlPlane) AuditLog() string { return filepath.Join(cp.dir, "audit.log") }

// ControlPlane is a running control plane. Stop stops it.
type ControlPlane struct {
	dir        string
	assets     string
	env        *envtest.Environment
	config     *rest.Config
	kubeconfig string
	crds       []string
	logs       []*os.File

	kcm     *exec.Cmd
	kcmDone chan struct{} // closed when kube-controller-manager has exited

	stopOnce sync.Once
	stopErr  error

	// attached is set on a control plane another process runs (Attach).
	attached bool
}

// Start starts etcd and kube-apiserver on free loopback ports, installs
// the CRDs of opts.CRDDirs and starts kube-controller-manager, in a new
// temporary directory that Stop removes. The processes' output goes to
// etcd.log, kube-apiserver.log and kube-controller-manager.log in that
// directory; a component that fails to start is reported with the end of
// its log. ctx bounds the start only: once Start has returned, the control
// plane runs until Stop.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	assets, from := opts.Assets, "Options.Assets"
	if assets == "" {
		assets, from = DefaultAssets()
	}
	need := []string{Etcd, KubeAPIServer}
	if !opts.NoControllerManager {
		need = append(need, KubeControllerManager)
	}
	for _, bin := range need {
		if fi, err := os.Stat(filepath.Join(assets, bin)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("no %s in %s (%s): run `make controlplane` (or hack/controlplane.sh), which builds etcd %s, kube-apiserver, kube-controller-manager and kubectl %s into %s once (minutes) and only what is missing after",
				bin, assets, from, EtcdVersion, KubernetesVersion, CacheAssets())
		}
	}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir, assets: assets, kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := cp.start(ctx, opts, progress); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, opts Options, progress func(string)) error {
	for _, d := range []string{"apiserver", "etcd", "bin"} {
		if err := os.MkdirAll(filepath.Join(cp.dir, d), 0o700); err != nil {
			return err
		}
	}
	bin, err := wrapAssets(cp.assets, filepath.Join(cp.dir, "bin"), progress)
	if err != nil {
		return err
	}
	etcdLog, err := cp.logFile(Etcd)
	if err != nil {
		return err
	}
	apiLog, err := cp.logFile(KubeAPIServer)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	progress(fmt.Sprintf("starting etcd and kube-apiserver on loopback (in %s)", cp.dir))
	cp.env = &envtest.Environment{
		UseExistingCluster:       ptr.To(false), // whatever USE_EXISTING_CLUSTER says
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := cp.env.ControlPlane.GetAPIServer()
	api.Path = filepath.Join(bin, KubeAPIServer) // set, so that no TEST_ASSET_* variable picks another
	api.CertDir = filepath.Join(cp.dir, "apiserver")
	api.Out, api.Err = apiLog, apiLog
	if len(opts.FeatureGates) > 0 {
		api.Configure().Set("feature-gates", strings.Join(opts.FeatureGates, ","))
	}
	if opts.AuditPolicy != "" {
		policy := filepath.Join(cp.dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(opts.AuditPolicy), 0o600); err != nil {
			return err
		}
		api.Configure().Set("audit-policy-file", policy)
		api.Configure().Set("audit-log-path", cp.AuditLog())
		api.Configure().Set("audit-log-format", "json")
		api.Configure().Set("audit-log-mode", "blocking")
	}
	cp.env.ControlPlane.Etcd = &envtest.Etcd{
		Path:    filepath.Join(bin, Etcd),
		DataDir: filepath.Join(cp.dir, "etcd"),
		Out:     etcdLog,
		Err:     etcdLog,
	}
	if cp.config, err = cp.env.Start(); err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver from %s: %w%s%s", cp.assets, err,
			logTail(etcdLog.Name()), logTail(apiLog.Name()))
	}
	if err := WriteKubeconfig(cp.config, cp.kubeconfig); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cp.dir, assetsFile), []byte(cp.assets), 0o600); err != nil {
		return err
	}

	if len(opts.CRDDirs) > 0 || len(opts.CRDs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		what := fmt.Sprintf("%d CRDs", len(opts.CRDs))
		if len(opts.CRDDirs) > 0 {
			what = "the CRDs of " + strings.Join(opts.CRDDirs, ", ")
		}
		progress("installing " + what)
		if err := cp.installCRDs(ctx, opts, what); err != nil {
			return err
		}
	}

	if !opts.NoControllerManager {
		if err := ctx.Err(); err != nil {
			return err
		}
		progress("starting kube-controller-manager (garbage collector, namespace controller and the other default controllers)")
		if err := cp.startControllerManager(ctx, opts.Controllers, opts.StartTimeout); err != nil {
			return err
		}
	}
	return nil
}

// installCRDs installs the CRDs of opts.CRDDirs and opts.CRDs and waits
// until each is Established. CRDs are installed before
// kube-controller-manager starts, so that the garbage collector's first
// discovery sees their kinds (it rediscovers every 30 seconds).
func (cp *ControlPlane) installCRDs(ctx context.Context, opts Options, what string) error {
	timeout := opts.StartTimeout
	crds, err := envtest.InstallCRDs(cp.config, envtest.CRDInstallOptions{
		Paths:              opts.CRDDirs,
		CRDs:               opts.CRDs,
		ErrorIfPathMissing: true,
		MaxTime:            timeout,
		PollInterval:       100 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("installing %s: %w", what, err)
	}
	dyn, err := dynamic.NewForConfig(cp.config)
	if err != nil {
		return err
	}
	crdResource := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, crd := range crds {
		name := crd.Name
		err := poll(ctx, timeout, nil, func() (bool, error) {
			u, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil // transient; the deadline reports it
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not Established: %w", name, err)
		}
		cp.crds = append(cp.crds, name)
	}
	sort.Strings(cp.crds)
	return nil
}

// startControllerManager starts kube-controller-manager with the admin
// kubeconfig running controllers (nil: all) and, when the ServiceAccount
// controller is among them, waits until its controllers work: it has given
// the default namespace its ServiceAccount.
func (cp *ControlPlane) startControllerManager(ctx context.Context, controllers []string, timeout time.Duration) error {
	logf, err := cp.logFile(KubeControllerManager)
	if err != nil {
		return err
	}
	if len(controllers) == 0 {
		controllers = []string{"*"}
	}
	args := []string{
		"--kubeconfig=" + cp.kubeconfig,
		"--leader-elect=false",
		// "*" (the default) runs every controller that is on by default.
		// Those that need what a local control plane lacks disable
		// themselves (the CSR signer without a signing CA, the cloud
		// controllers without a cloud provider).
		"--controllers=" + strings.Join(controllers, ","),
		"--use-service-account-credentials=false", // every controller acts as the admin user
		"--secure-port=0", // no serving: no port to allocate
	}
	// envtest signs ServiceAccount tokens with this key: with it, the token
	// controller runs too and fills legacy token Secrets.
	if key := filepath.Join(cp.dir, "apiserver", "sa-signer.key"); fileExists(key) {
		args = append(args, "--service-account-private-key-file="+key)
	}
	cmd := exec.Command(filepath.Join(cp.assets, KubeControllerManager), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	// The parent-death signal is sent when the thread that started the
	// process ends, not the process: start it from a thread that lives as
	// long as it does (Go ends a thread whose locked goroutine returns).
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	cp.kcm, cp.kcmDone = cmd, done

	if !slices.Contains(controllers, "*") && !slices.Contains(controllers, "serviceaccount-controller") {
		return nil // nothing it does is quick to see
	}
	client, err := kubernetes.NewForConfig(cp.config)
	if err != nil {
		return err
	}
	err = poll(ctx, timeout, cp.kcmDone, func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager did not become ready (no ServiceAccount default/default): %w%s", err, logTail(logf.Name()))
	}
	return nil
}

// assetsFile, in Dir, names the directory of the binaries, for Attach.
const assetsFile = "assets"

// Attach returns the control plane another process started (with Start)
// in dir, its Dir, for processes that share one: the tests of several
// packages, say. What reads it works: RESTConfig, Kubeconfig, Assets,
// Log and ControllerManagerRunning. What changes it does not: Stop does
// nothing (the starter stops it), CRDs is empty, and KillAPIServer,
// StartAPIServer, KillEtcd and StartEtcd fail, since killing a component
// would break every other user; a test that kills one needs a control
// plane of its own.
func Attach(dir string) (*ControlPlane, error) {
	cp := &ControlPlane{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig"), attached: true}
	assets, err := os.ReadFile(filepath.Join(dir, assetsFile))
	if err != nil {
		return nil, fmt.Errorf("attaching to the control plane in %s: %w (is it running? it is started with Start, which writes %s)", dir, err, assetsFile)
	}
	cp.assets = string(assets)
	if cp.config, err = clientcmd.BuildConfigFromFlags("", cp.kubeconfig); err != nil {
		return nil, fmt.Errorf("attaching to the control plane in %s: %w", dir, err)
	}
	// The client rate limits of the starter's config (envtest's), not
	// client-go's default of 5 requests a second, which would make a
	// test of 1,000 writes take minutes.
	cp.config.QPS, cp.config.Burst = attachedQPS, attachedBurst
	return cp, nil
}

// attachedQPS and attachedBurst are the client rate limits of a config
// from Attach: envtest's, as Start's config has them.
const (
	attachedQPS   = 1000
	attachedBurst = 2000
)

// errAttached is what a control plane from Attach answers a change with.
func (cp *ControlPlane) errAttached(what string) error {
	return fmt.Errorf("%s: the control plane in %s belongs to another process (Attach), and killing or starting its components would break its other users; start one of your own", what, cp.dir)
}

// Dir is the control plane's directory: its data, certificates, logs and
// kubeconfig. Stop removes it.
func (cp *ControlPlane) Dir() string { return cp.dir }

// Assets is the directory the binaries were taken from (kubectl is
// usually there too).
func (cp *ControlPlane) Assets() string { return cp.assets }

// Kubeconfig is the path of a kubeconfig for an administrator (group
// system:masters) of the control plane, in Dir.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// RESTConfig returns a copy of the administrator's client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.config) }

// CRDs are the names of the CRDs installed from Options.CRDDirs, sorted.
func (cp *ControlPlane) CRDs() []string { return append([]string(nil), cp.crds...) }

// Stop stops kube-controller-manager, kube-apiserver and etcd, in that
// order, each with SIGTERM and, if it has not exited within a minute,
// SIGKILL, then removes Dir. Only the first call stops; later calls return
// its result.
func (cp *ControlPlane) Stop() error {
	if cp.attached {
		return nil
	}
	cp.stopOnce.Do(func() {
		var errs []error
		if cp.kcm != nil {
			_ = cp.kcm.Process.Signal(syscall.SIGTERM)
			select {
			case <-cp.kcmDone:
			case <-time.After(time.Minute):
				_ = cp.kcm.Process.Kill()
				<-cp.kcmDone
				errs = append(errs, errors.New("kube-controller-manager did not stop within a minute of SIGTERM; killed"))
			}
		}
		if cp.env != nil {
			if err := cp.env.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, f := range cp.logs {
			_ = f.Close()
		}
		if err := os.RemoveAll(cp.dir); err != nil {
			errs = append(errs, err)
		}
		cp.stopErr = errors.Join(errs...)
	})
	return cp.stopErr
}

// ControllerManagerRunning reports whether kube-controller-manager was
// started and has not exited.
func (cp *ControlPlane) ControllerManagerRunning() bool {
	if cp.attached {
		return len(ProcessesWithArg(func(a string) bool { return a == "--kubeconfig="+cp.kubeconfig })) > 0
	}
	if cp.kcm == nil {
		return false
	}
	select {
	case <-cp.kcmDone:
		return false
	default:
		return true
	}
}

// Log returns what the component (Etcd, KubeAPIServer,
// KubeControllerManager) has logged so far, for a failure message.
func (cp *ControlPlane) Log(component string) string {
	b, _ := os.ReadFile(filepath.Join(cp.dir, component+".log"))
	return string(b)
}

// KillAPIServer kills the kube-apiserver process with SIGKILL, as a crash
// or an OOM kill would, and reaps it; etcd keeps running. (A graceful stop
// drains in-flight requests for up to a minute.)
func (cp *ControlPlane) KillAPIServer() error {
	if cp.attached {
		return cp.errAttached("KillAPIServer")
	}
	api := cp.env.ControlPlane.APIServer
	if err := killProcessWithArg("--cert-dir=" + api.CertDir); err != nil {
		return err
	}
	return api.Stop()
}

// StartAPIServer starts kube-apiserver again on the same port and
// certificates, so clients of RESTConfig keep working. It returns once the
// server reports healthy.
func (cp *ControlPlane) StartAPIServer() error {
	if cp.attached {
		return cp.errAttached("StartAPIServer")
	}
	return cp.env.ControlPlane.APIServer.Start()
}

// KillEtcd kills the etcd process with SIGKILL and reaps it; kube-apiserver
// keeps running and answers with errors until etcd is back.
func (cp *ControlPlane) KillEtcd() error {
	if cp.attached {
		return cp.errAttached("KillEtcd")
	}
	etcd := cp.env.ControlPlane.Etcd
	if err := killProcessWithArg("--data-dir=" + etcd.DataDir); err != nil {
		return err
	}
	return etcd.Stop()
}

// StartEtcd starts etcd again on the same URL and data directory, so every
// object stored before is there.
func (cp *ControlPlane) StartEtcd() error {
	if cp.attached {
		return cp.errAttached("StartEtcd")
	}
	return cp.env.ControlPlane.Etcd.Start()
}

// killProcessWithArg sends SIGKILL to the one process whose command line
// holds arg (a directory unique to this control plane).
func killProcessWithArg(arg string) error {
	pids := ProcessesWithArg(func(a string) bool { return a == arg })
	if len(pids) == 0 {
		return fmt.Errorf("no process with argument %s", arg)
	}
	return syscall.Kill(pids[0], syscall.SIGKILL)
}

// ProcessesWithArg returns the processes, other than this one, with an
// argument match accepts.
func ProcessesWithArg(match func(arg string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if match(string(a)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// dirPrefix names the directory of every control plane Start makes; its
// processes carry it in their arguments (ReapOrphans).
const dirPrefix = "wasmreconcile-controlplane-"

// ReapOrphans kills the processes of control planes whose starter died
// without stopping them (their parent is now init: a starter killed before
// the parent-death signal was set, or a machine without setpriv) and
// removes their directories. A control plane in use has a live parent and
// is never touched.
func ReapOrphans(report func(line string)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != "1" {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			arg := string(a)
			if !strings.HasPrefix(arg, "--data-dir=") && !strings.HasPrefix(arg, "--cert-dir=") && !strings.HasPrefix(arg, "--kubeconfig=") {
				continue
			}
			val := arg[strings.IndexByte(arg, '=')+1:]
			i := strings.Index(val, "/"+dirPrefix)
			if i < 0 {
				continue
			}
			rest := val[i+1:] // wasmreconcile-controlplane-N/etcd
			if j := strings.IndexByte(rest, '/'); j >= 0 {
				rest = rest[:j]
			}
			dir := val[:i+1] + rest
			if report != nil {
				report(fmt.Sprintf("killing pid %d, left behind by a control plane whose starter died (%s)", pid, dir))
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = os.RemoveAll(dir)
			break
		}
	}
}

// ProcessesUsing returns the processes whose command line names a path
// under dir: a control plane's, for its Dir, until Stop has returned.
func ProcessesUsing(dir string) []int {
	prefix := filepath.Clean(dir) + "/"
	return ProcessesWithArg(func(a string) bool { return strings.Contains(a, prefix) })
}

// logFile creates Dir/NAME.log, closed by Stop.
func (cp *ControlPlane) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cp.logs = append(cp.logs, f)
	return f, nil
}

// wrapAssets writes scripts into dir that run etcd and kube-apiserver of
// assets through `setpriv --pdeathsig KILL`, so that each dies with this
// process (envtest starts them; it offers no way to set the signal).
// Without setpriv it says so and returns assets.
func wrapAssets(assets, dir string, progress func(string)) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		progress("warning: setpriv (util-linux) not found; if this process is killed, etcd and kube-apiserver keep running")
		return assets, nil
	}
	for _, bin := range []string{Etcd, KubeAPIServer} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, filepath.Join(assets, bin))
		if err := os.WriteFile(filepath.Join(dir, bin), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// WriteKubeconfig writes a kubeconfig for cfg (a client certificate) to
// path.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["wasmreconcile-dev"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["wasmreconcile-dev"] = &clientcmdapi.Context{Cluster: "wasmreconcile-dev", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "wasmreconcile-dev"
	return clientcmd.WriteToFile(*kc, path)
}

// poll calls cond every 100 ms until it reports true, an error, ctx ends,
// exited is closed (a process it waits on died) or timeout passes.
func poll(ctx context.Context, timeout time.Duration, exited <-chan struct{}, cond func() (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("the process exited")
		case <-deadline.C:
			return fmt.Errorf("timed out after %s", timeout)
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of the log file at path, indented, for an
// error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Sprintf("\nlast lines of %s:\n    %s", filepath.Base(path), strings.Join(lines, "\n    "))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
