// Package testenv starts a real kube-apiserver and etcd for integration tests
// through controller-runtime's envtest. The binaries come from
// KUBEBUILDER_ASSETS when set, and otherwise from hack/controlplane.sh, which
// builds them once into a cache outside the checkout.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

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

// Start starts a control plane with the CRDs in crdPaths (relative to the
// repository root) installed. Call Stop on the returned environment.
func Start(crdPaths ...string) (*envtest.Environment, *rest.Config, error) {
	env, err := environment(crdPaths)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := start(env)
	if err != nil {
		return nil, nil, err
	}
	return env, cfg, nil
}

// environment returns an envtest environment with the control plane
// binaries and the CRDs in crdPaths (relative to the repository root).
func environment(crdPaths []string) (*envtest.Environment, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range crdPaths {
		paths = append(paths, filepath.Join(testwasm.RepoRoot(), p))
	}
	return &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true}, nil
}

func start(env *envtest.Environment) (*rest.Config, error) {
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest control plane from %s: %w", env.BinaryAssetsDirectory, err)
	}
	return cfg, nil
}

// Restartable is a control plane whose kube-apiserver and etcd processes can
// be stopped and started again while a test runs. Its certificate and data
// directories are fixed (not randomly allocated by envtest), so a restart
// keeps the serving certificate, the client CA and every stored object, and
// the processes come back on the same ports: clients built from Config keep
// working across restarts, exactly as they would against a real cluster.
type Restartable struct {
	Env    *envtest.Environment
	Config *rest.Config
}

// StartRestartable starts a control plane like Start, keeping its state in
// dir (which the caller owns and removes).
func StartRestartable(dir string, crdPaths ...string) (*Restartable, error) {
	env, err := environment(crdPaths)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"apiserver", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	env.ControlPlane.GetAPIServer().CertDir = filepath.Join(dir, "apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	cfg, err := start(env)
	if err != nil {
		return nil, err
	}
	return &Restartable{Env: env, Config: cfg}, nil
}

// KillAPIServer kills the kube-apiserver process with SIGKILL, as a crash
// or an OOM kill would, and reaps it; etcd keeps running. (A graceful stop
// drains in-flight requests for up to a minute.)
func (r *Restartable) KillAPIServer() error {
	if err := killProcessWithArg("--cert-dir=" + r.Env.ControlPlane.APIServer.CertDir); err != nil {
		return err
	}
	return r.Env.ControlPlane.APIServer.Stop()
}

// StartAPIServer starts the kube-apiserver again on the same port and
// certificates. It returns once the server reports healthy.
func (r *Restartable) StartAPIServer() error { return r.Env.ControlPlane.APIServer.Start() }

// KillEtcd kills the etcd process with SIGKILL and reaps it; the
// kube-apiserver keeps running and answers with errors until etcd is back.
func (r *Restartable) KillEtcd() error {
	if err := killProcessWithArg("--data-dir=" + r.Env.ControlPlane.Etcd.DataDir); err != nil {
		return err
	}
	return r.Env.ControlPlane.Etcd.Stop()
}

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

// StartEtcd starts etcd again on the same URL and data directory.
func (r *Restartable) StartEtcd() error { return r.Env.ControlPlane.Etcd.Start() }

// Stop stops the whole control plane.
func (r *Restartable) Stop() error { return r.Env.Stop() }

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
