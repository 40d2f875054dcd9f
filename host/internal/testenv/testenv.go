// Package testenv starts a real kube-apiserver and etcd for integration
// tests (internal/controlplane, through controller-runtime's envtest),
// plus a kube-controller-manager running the garbage collector and the
// namespace controller (so that owner-reference cascades and namespace
// deletion happen as in a cluster), one control plane per test package
// (Main), or one shared by the packages of a run (testcluster, make test).
// The binaries come from KUBEBUILDER_ASSETS when set, and
// otherwise from hack/controlplane.sh, which builds them once into a cache
// outside the checkout.
//
// The control plane's processes die with the test binary, however it ends
// (see internal/controlplane), so a test binary killed by `go test
// -timeout`, a panic or a signal leaves no kube-apiserver or etcd behind.
package testenv

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
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

// ControlPlane is a kube-apiserver and etcd whose processes can be killed
// and started again while a test runs (internal/controlplane keeps their
// certificate and data directories fixed, so a restart keeps the serving
// certificate, the client CA and every stored object, on the same ports:
// clients built from Config keep working across restarts, as they would
// against a real cluster).
type ControlPlane struct {
	*controlplane.ControlPlane
	// Config is the administrator's client configuration.
	Config *rest.Config
}

// ControllerManagerControllers are the controllers the control plane's
// kube-controller-manager runs: the garbage collector (children of a
// deleted owner are deleted, as in a cluster), the namespace controller (a
// deleted namespace is emptied and goes) and the PersistentVolumeClaim
// protection controller (a deleted claim no Pod uses goes: the API server
// adds its finalizer). The others would only cost CPU in tests that run
// no Pods, and the ServiceAccount controller would put a default account
// in every test namespace, which tests that list ServiceAccounts count.
// Without it Start does not wait for the controllers: they start within
// seconds, and a test that relies on one waits for the effect it expects.
var ControllerManagerControllers = []string{"garbage-collector-controller", "namespace-controller",
	"persistentvolumeclaim-protection-controller"}

// Start starts a control plane with the CRDs in crdPaths (relative to the
// repository root) installed, keeping its state in a new temporary
// directory that Stop removes. Control planes an earlier, killed test run
// left behind are reaped first.
func Start(crdPaths ...string) (*ControlPlane, error) {
	return start(MainOptions{}, crdPaths...)
}

// start is Start with kube-apiserver's feature gates and audit policy
// from opts (controlplane.Options).
func start(mopts MainOptions, crdPaths ...string) (*ControlPlane, error) {
	controlplane.ReapOrphans(func(line string) { fmt.Fprintln(os.Stderr, "testenv:", line) })
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	opts := controlplane.Options{Assets: assets, Controllers: ControllerManagerControllers, FeatureGates: mopts.FeatureGates, AuditPolicy: mopts.AuditPolicy}
	for _, p := range crdPaths {
		opts.CRDDirs = append(opts.CRDDirs, filepath.Join(testwasm.RepoRoot(), p))
	}
	if _, err := os.Stat(filepath.Join(assets, controlplane.KubeControllerManager)); err != nil {
		// Most tests need no garbage collector: run them, and fail the
		// ones that do (RequireControllerManager) with what to do.
		fmt.Fprintf(os.Stderr, "testenv: no kube-controller-manager in %s: the tests that need garbage collection or namespace deletion fail; rebuild the control plane with hack/controlplane.sh (it builds only what is missing), or point KUBEBUILDER_ASSETS at a directory that has it\n", assets)
		opts.NoControllerManager = true
	}
	cp, err := controlplane.Start(context.Background(), opts)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return &ControlPlane{ControlPlane: cp, Config: cp.RESTConfig()}, nil
}

// RequireControllerManager fails the test unless the control plane runs a
// kube-controller-manager: a test of garbage collection or namespace
// deletion cannot pass without one.
func (cp *ControlPlane) RequireControllerManager(t testing.TB) {
	t.Helper()
	if !cp.ControllerManagerRunning() {
		t.Fatal("this test needs kube-controller-manager (garbage collection, namespace deletion), and the control plane has none: rebuild it with hack/controlplane.sh, which builds only what is missing, or point KUBEBUILDER_ASSETS at a directory that has it")
	}
}

// ControllerManagerLog returns the kube-controller-manager's log so far,
// for a test's failure message.
func (cp *ControlPlane) ControllerManagerLog() string {
	return cp.Log(controlplane.KubeControllerManager)
}

// WriteKubeconfig writes a kubeconfig for cfg (envtest's admin client
// certificate) to path, for tests that run the operator binary.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	return controlplane.WriteKubeconfig(cfg, path)
}

// shared is the package's control plane, set by Main; nil under -short.
var shared *ControlPlane

// MainOptions configure Main.
type MainOptions struct {
	// OwnControlPlane starts a control plane for the package even when
	// one is shared (SharedControlPlaneEnv): for tests that kill its
	// components, or whose cluster-scoped objects other packages' tests
	// would see. Default false: the package uses the shared one if there
	// is one.
	OwnControlPlane bool
	// ForExamples starts the control plane under -short too, and points
	// KUBECONFIG at it, so that runnable examples, which cannot be skipped,
	// find a cluster with ctrl.GetConfig() as a program would.
	ForExamples bool
	// FeatureGates are kube-apiserver's --feature-gates (NAME=true, such
	// as "ShardedListAndWatch=true"); the package then gets a control
	// plane of its own with them, as with OwnControlPlane. Default: none.
	FeatureGates []string
	// AuditPolicy is kube-apiserver's audit policy (controlplane.Options);
	// the package then gets a control plane of its own, whose AuditLog
	// holds the events. Default: none.
	AuditPolicy string
}

// SharedControlPlaneEnv names the environment variable that holds the
// directory of a control plane shared by the test packages of one run
// (make test starts it with testenv/testcluster, which sets the variable).
const SharedControlPlaneEnv = "WASMRECONCILE_TEST_CONTROLPLANE"

// Main runs a test package's tests against one control plane with the
// CRDs in CRDs installed: the run's shared one (SharedControlPlaneEnv)
// unless opts.OwnControlPlane, else one of the package's own, started now
// and stopped afterwards. Call it from TestMain as
// os.Exit(testenv.Main(m, testenv.MainOptions{})). Under
// `go test -short` it starts none (unless ForExamples), and the tests that
// need one (Shared) are skipped: -short is the inner loop of unit tests.
func Main(m *testing.M, opts MainOptions) int {
	flag.Parse()
	if testing.Short() && !opts.ForExamples {
		return m.Run()
	}
	cp, err := mainControlPlane(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !testing.Short() {
		shared = cp
	}
	if opts.ForExamples {
		os.Setenv("KUBECONFIG", cp.Kubeconfig())
	}
	code := m.Run()
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	return code
}

// mainControlPlane is the run's shared control plane or a new one.
func mainControlPlane(opts MainOptions) (*ControlPlane, error) {
	dir := os.Getenv(SharedControlPlaneEnv)
	if dir == "" || opts.OwnControlPlane || len(opts.FeatureGates) > 0 || opts.AuditPolicy != "" {
		return start(opts, CRDs...)
	}
	cp, err := controlplane.Attach(dir)
	if err != nil {
		return nil, fmt.Errorf("testenv: %s=%s: %w", SharedControlPlaneEnv, dir, err)
	}
	return &ControlPlane{ControlPlane: cp, Config: cp.RESTConfig()}, nil
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
