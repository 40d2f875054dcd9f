// Package testenv starts a real kube-apiserver and etcd for integration
// tests through controller-runtime's envtest, plus a kube-controller-manager
// running the garbage collector and the namespace controller (so that
// owner-reference cascades and namespace deletion happen as in a cluster),
// one control plane per test package (Main). The binaries come from KUBEBUILDER_ASSETS when set, and
// otherwise from hack/controlplane.sh, which builds them once into a cache
// outside the checkout.
//
// The control plane's processes die with the test binary, however it ends:
// each is started through `setpriv --pdeathsig KILL` (util-linux), so a
// test binary killed by `go test -timeout`, a panic or a signal leaves no
// kube-apiserver or etcd behind.
package testenv

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// CRDs are the CRD directories every shared control plane installs: the
// examples, the ReconcileModule CRD and the test kinds.
var CRDs = []string{"examples/crds", "config/crd", "host/internal/testenv/crds"}

// Assets returns the directory holding kube-apiserver, etcd and kubectl.
func Assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	script := filepath.Join(testwasm.RepoRoot(), "hack", "controlplane.sh")
	var stdout bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed: %w", script, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// wrapAssets returns a directory of scripts that run the binaries of
// assets through `setpriv --pdeathsig KILL`, so that each dies when the
// test process does. Without setpriv it returns assets as is.
func wrapAssets(assets, dir string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv: setpriv (util-linux) not found; a killed test binary may leave kube-apiserver and etcd running")
		return assets, nil
	}
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager"} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, filepath.Join(assets, bin))
		if err := os.WriteFile(filepath.Join(dir, bin), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ControlPlane is a kube-apiserver and etcd whose processes can be killed
// and started again while a test runs. Its certificate and data directories
// are fixed (not allocated by envtest at each start), so a restart keeps
// the serving certificate, the client CA and every stored object, and the
// processes come back on the same ports: clients built from Config keep
// working across restarts, as they would against a real cluster.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Assets is the directory of the binaries as started (kubectl too).
	Assets string
	dir    string
	kcm    *exec.Cmd // kube-controller-manager
}

// ControllerManagerControllers are the controllers the control plane's
// kube-controller-manager runs: the garbage collector (children of a
// deleted owner are deleted, as in a cluster) and the namespace
// controller (a deleted namespace is emptied and goes), and the
// PersistentVolumeClaim protection controller (a deleted claim no Pod uses
// goes: the API server adds its finalizer). The others would only cost CPU
// in tests that run no Pods.
var ControllerManagerControllers = []string{"garbage-collector-controller", "namespace-controller", "persistentvolumeclaim-protection-controller"}

// dirPrefix names the temporary directory of every control plane started
// here; its processes carry it in their arguments.
const dirPrefix = "wasmreconcile-envtest-"

// reapOrphans kills the control-plane processes of earlier test runs that
// outlived their test binary (their parent is now init), and removes their
// directories. A control plane in use has a live test binary as its parent
// and is never touched. It is a safety net behind the parent-death signal.
func reapOrphans() {
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
			rest := val[i+1:] // wasmreconcile-envtest-N/etcd
			if j := strings.IndexByte(rest, '/'); j >= 0 {
				rest = rest[:j]
			}
			dir := val[:i+1] + rest
			fmt.Fprintf(os.Stderr, "testenv: killing pid %d, left behind by an earlier test run (%s)\n", pid, dir)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = os.RemoveAll(dir)
			break
		}
	}
}

// Start starts a control plane with the CRDs in crdPaths (relative to the
// repository root) installed, keeping its state in a new temporary
// directory that Stop removes.
func Start(crdPaths ...string) (*ControlPlane, error) {
	reapOrphans()
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir}
	for _, d := range []string{"apiserver", "etcd", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if cp.Assets, err = wrapAssets(assets, filepath.Join(dir, "bin")); err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range crdPaths {
		paths = append(paths, filepath.Join(testwasm.RepoRoot(), p))
	}
	cp.Env = &envtest.Environment{BinaryAssetsDirectory: cp.Assets, CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true}
	cp.Env.ControlPlane.GetAPIServer().CertDir = filepath.Join(dir, "apiserver")
	cp.Env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	if cp.Config, err = cp.Env.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting envtest control plane from %s: %w", assets, err)
	}
	if err := cp.startControllerManager(assets); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// startControllerManager starts kube-controller-manager against the
// control plane, with its log in the control plane's directory. It does
// not wait for it: its controllers start within seconds, and a test that
// relies on one waits for the effect it expects.
func (cp *ControlPlane) startControllerManager(assets string) error {
	if _, err := os.Stat(filepath.Join(assets, "kube-controller-manager")); err != nil {
		// Most tests need no garbage collector: run them, and fail the
		// ones that do (RequireControllerManager) with what to do.
		fmt.Fprintf(os.Stderr, "testenv: no kube-controller-manager in %s: the tests that need garbage collection or namespace deletion fail; rebuild the control plane with hack/controlplane.sh (it builds only what is missing), or point KUBEBUILDER_ASSETS at a directory that has it\n", assets)
		return nil
	}
	kubeconfig := filepath.Join(cp.dir, "kcm.kubeconfig")
	if err := WriteKubeconfig(cp.Config, kubeconfig); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(cp.dir, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cp.kcm = exec.Command(filepath.Join(cp.Assets, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--controllers="+strings.Join(ControllerManagerControllers, ","),
		"--use-service-account-credentials=false", "--concurrent-gc-syncs=5")
	cp.kcm.Stdout, cp.kcm.Stderr = logFile, logFile
	if err := cp.kcm.Start(); err != nil {
		cp.kcm = nil
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	return nil
}

// RequireControllerManager fails the test unless the control plane runs a
// kube-controller-manager: a test of garbage collection or namespace
// deletion cannot pass without one.
func (cp *ControlPlane) RequireControllerManager(t testing.TB) {
	t.Helper()
	if cp.kcm == nil {
		t.Fatal("this test needs kube-controller-manager (garbage collection, namespace deletion), and the control plane has none: rebuild it with hack/controlplane.sh, which builds only what is missing, or point KUBEBUILDER_ASSETS at a directory that has it")
	}
}

// Stop stops the control plane and removes its directory.
func (cp *ControlPlane) Stop() error {
	if cp.kcm != nil {
		_ = cp.kcm.Process.Kill()
		_ = cp.kcm.Wait()
	}
	err := cp.Env.Stop()
	_ = os.RemoveAll(cp.dir)
	return err
}

// ControllerManagerLog returns the kube-controller-manager's log so far,
// for a test's failure message.
func (cp *ControlPlane) ControllerManagerLog() string {
	b, _ := os.ReadFile(filepath.Join(cp.dir, "kube-controller-manager.log"))
	return string(b)
}

// KillAPIServer kills the kube-apiserver process with SIGKILL, as a crash
// or an OOM kill would, and reaps it; etcd keeps running. (A graceful stop
// drains in-flight requests for up to a minute.)
func (cp *ControlPlane) KillAPIServer() error {
	if err := killProcessWithArg("--cert-dir=" + cp.Env.ControlPlane.APIServer.CertDir); err != nil {
		return err
	}
	return cp.Env.ControlPlane.APIServer.Stop()
}

// StartAPIServer starts the kube-apiserver again on the same port and
// certificates. It returns once the server reports healthy.
func (cp *ControlPlane) StartAPIServer() error { return cp.Env.ControlPlane.APIServer.Start() }

// KillEtcd kills the etcd process with SIGKILL and reaps it; the
// kube-apiserver keeps running and answers with errors until etcd is back.
func (cp *ControlPlane) KillEtcd() error {
	if err := killProcessWithArg("--data-dir=" + cp.Env.ControlPlane.Etcd.DataDir); err != nil {
		return err
	}
	return cp.Env.ControlPlane.Etcd.Stop()
}

// StartEtcd starts etcd again on the same URL and data directory.
func (cp *ControlPlane) StartEtcd() error { return cp.Env.ControlPlane.Etcd.Start() }

// killProcessWithArg sends SIGKILL to the one process of ours whose command
// line holds arg (a directory unique to this control plane).
func killProcessWithArg(arg string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				return syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return fmt.Errorf("no process with argument %s", arg)
}

// WriteKubeconfig writes a kubeconfig for cfg (envtest's admin client
// certificate) to path, for tests that run the operator binary.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// shared is the package's control plane, set by Main; nil under -short.
var shared *ControlPlane

// MainOptions configure Main.
type MainOptions struct {
	// ForExamples starts the control plane under -short too, and points
	// KUBECONFIG at it, so that runnable examples, which cannot be skipped,
	// find a cluster with ctrl.GetConfig() as a program would.
	ForExamples bool
}

// Main runs a test package's tests against one shared control plane with
// the CRDs in CRDs installed, and stops it afterwards: call it from
// TestMain as os.Exit(testenv.Main(m, testenv.MainOptions{})). Under
// `go test -short` it starts none (unless ForExamples), and the tests that
// need one (Shared) are skipped: -short is the inner loop of unit tests.
func Main(m *testing.M, opts MainOptions) int {
	flag.Parse()
	if testing.Short() && !opts.ForExamples {
		return m.Run()
	}
	cp, err := Start(CRDs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !testing.Short() {
		shared = cp
	}
	if opts.ForExamples {
		kubeconfig := filepath.Join(cp.dir, "kubeconfig")
		if err := WriteKubeconfig(cp.Config, kubeconfig); err != nil {
			fmt.Fprintln(os.Stderr, err)
			_ = cp.Stop()
			return 1
		}
		os.Setenv("KUBECONFIG", kubeconfig)
	}
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	return code
}

// Shared returns the package's control plane, started by Main. Under -short
// it skips the test: it is an integration test.
func Shared(t testing.TB) *ControlPlane {
	t.Helper()
	if shared == nil {
		if testing.Short() {
			t.Skip("integration test: it needs a control plane, which -short does not start")
		}
		t.Fatal("testenv.Shared: no control plane; call testenv.Main from the package's TestMain")
	}
	return shared
}
