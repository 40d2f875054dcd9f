package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
)

// controlPlane is a fresh kube-apiserver and etcd (internal/controlplane,
// no kube-controller-manager: nothing here needs garbage collection), in a
// directory of its own that stop removes. Its processes die with the
// driver however the driver ends.
type controlPlane struct {
	*controlplane.ControlPlane
	config *rest.Config // the administrator's, not rate limited
}

// startControlPlane starts etcd and kube-apiserver from assets with crds
// installed and kube-apiserver's featureGates (NAME=true) on.
func startControlPlane(assets string, crds []*apiextensionsv1.CustomResourceDefinition, featureGates ...string) (*controlPlane, error) {
	log.SetLogger(logr.Discard()) // envtest logs through controller-runtime; the driver prints its own progress
	cp, err := controlplane.Start(context.Background(), controlplane.Options{Assets: assets, CRDs: crds, NoControllerManager: true, FeatureGates: featureGates,
		Progress: func(line string) {
			if strings.HasPrefix(line, "warning:") {
				fmt.Fprintln(os.Stderr, "benche2e:", line)
			}
		}})
	if err != nil {
		return nil, err
	}
	config := cp.RESTConfig()
	config.QPS, config.Burst = -1, -1 // the driver's own writes are not rate limited
	return &controlPlane{ControlPlane: cp, config: config}, nil
}

// pids returns the control plane's processes (kube-apiserver and etcd):
// those with its directory in a --flag=value argument (the operators the
// driver starts name its kubeconfig in an argument of their own).
func (cp *controlPlane) pids() []int { return pidsWithArgPrefix(cp.Dir() + "/") }

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
	if err := cp.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "benche2e: stopping the control plane:", err)
	}
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
