// Package v1alpha1 is the wasmreconcile.io/v1alpha1 API: the ReconcileModule
// kind, which declares one wasm reconcile module for the operator to run.
//
// The CRD (config/crd) and the deepcopy functions are generated from these
// types by controller-gen: run `make generate` after changing them.
//
// +kubebuilder:object:generate=true
// +groupName=wasmreconcile.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "wasmreconcile.io", Version: "v1alpha1"}

	// SchemeBuilder adds this API's types to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
