// Package crd carries the ReconcileModule CustomResourceDefinition that
// this directory holds (wasmreconcile.io_reconcilemodules.yaml, written by
// controller-gen: make generate), for programs that install it themselves:
// operator dev.
package crd

import _ "embed"

// ReconcileModule is the CRD of ReconcileModule (wasmreconcile.io), YAML.
//
//go:embed wasmreconcile.io_reconcilemodules.yaml
var ReconcileModule []byte
