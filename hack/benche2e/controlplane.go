package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

// controlPlane is a fresh kube-apiserver and etcd, in a directory of its
// own that stop removes.
type controlPlane struct {
	env        *envtest.Environment
	dir        string
	config     *rest.Config
	kubeconfig string
}

// startControlPlane starts etcd and kube-apiserver from assets with crds
// installed, as host/internal/testenv does: each binary runs through
// `setpriv --pdeathsig KILL`, so that it dies with the driver however the
// driver ends.
func startControlPlane(assets string, crds []*apiextensionsv1.CustomResourceDefinition) (*controlPlane, error) {
	dir, err := os.MkdirTemp("", "wasmreconcile-benche2e-")
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir}
	for _, d := range []string{"apiserver", "etcd", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	wrapped, err := wrapAssets(assets, filepath.Join(dir, "bin"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	log.SetLogger(logr.Discard()) // envtest logs through controller-runtime; the driver prints its own progress
	cp.env = &envtest.Environment{BinaryAssetsDirectory: wrapped, CRDs: crds}
	cp.env.ControlPlane.GetAPIServer().CertDir = filepath.Join(dir, "apiserver")
	cp.env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	if cp.config, err = cp.env.Start(); err != nil {
		_ = cp.env.Stop()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the control plane from %s: %w", assets, err)
	}
	cp.config.QPS, cp.config.Burst = -1, -1 // the driver's own writes are not rate limited
	cp.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cp.config, cp.kubeconfig); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

// pids returns the control plane's processes (kube-apiserver and etcd).
func (cp *controlPlane) pids() []int { return pidsWithArgPrefix(cp.dir + "/") }

// cpu returns the CPU time the control plane's processes have used.
func (cp *controlPlane) cpu() time.Duration {
	var total time.Duration
	for _, pid := range cp.pids() {
		if c, err := cpuTime(pid); err == nil {
			total += c
		}
	}
	return total
}

// stop stops the control plane and removes its directory.
func (cp *controlPlane) stop() {
	if err := cp.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "benche2e: stopping the control plane:", err)
	}
	os.RemoveAll(cp.dir)
}

// wrapAssets writes scripts into dir that run the binaries of assets
// through `setpriv --pdeathsig KILL`; without setpriv it returns assets.
func wrapAssets(assets, dir string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		fmt.Fprintln(os.Stderr, "benche2e: setpriv (util-linux) not found; a killed driver may leave kube-apiserver and etcd running")
		return assets, nil
	}
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, filepath.Join(assets, bin))
		if err := os.WriteFile(filepath.Join(dir, bin), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// writeKubeconfig writes a kubeconfig for cfg (envtest's admin client
// certificate) to path.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// kind is one kind of the Widget's schema, and the module that reconciles
// it.
type kind struct {
	Group, Kind, Plural string
	Module              string // the module's name: the field owner and controller name
	Wasm                string // the module built for this kind
}

// exampleWidget is the example Widget kind, reconciled by modules/widget as
// built.
var exampleWidget = kind{Group: "examples.wasmreconcile.io", Kind: "Widget", Plural: "widgets", Module: "widget"}

// benchKind returns the i-th kind of the many-module case: Widget<i> in
// group w<i>.bench.wasmreconcile.io, reconciled by module widget<i>.
func benchKind(i int) kind {
	return kind{
		Group:  fmt.Sprintf("w%d.bench.wasmreconcile.io", i),
		Kind:   fmt.Sprintf("Widget%d", i),
		Plural: fmt.Sprintf("widget%ds", i),
		Module: fmt.Sprintf("widget%d", i),
	}
}

// crdsFor returns the CRDs of kinds: copies of the Widget CRD in file (the
// example's) with their names and groups changed.
func crdsFor(file string, kinds []kind) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	base := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, base); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, k := range kinds {
		crd := base.DeepCopy()
		crd.Name = k.Plural + "." + k.Group
		crd.Spec.Group = k.Group
		crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{
			Kind: k.Kind, ListKind: k.Kind + "List", Plural: k.Plural, Singular: strings.ToLower(k.Kind),
		}
		out = append(out, crd)
	}
	return out, nil
}
