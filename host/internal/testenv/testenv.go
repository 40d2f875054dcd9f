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
	"strings"

	"k8s.io/client-go/rest"
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
	assets, err := Assets()
	if err != nil {
		return nil, nil, err
	}
	var paths []string
	for _, p := range crdPaths {
		paths = append(paths, filepath.Join(testwasm.RepoRoot(), p))
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting envtest control plane from %s: %w", assets, err)
	}
	return env, cfg, nil
}
