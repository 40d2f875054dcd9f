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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "wasmreconcile.io", Version: "v1alpha1"}

	// SchemeBuilder adds this API's types to a scheme (apimachinery's
	// builder, as k8s.io/api's packages use: an API package depends on
	// apimachinery only).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ReconcileModule{}, &ReconcileModuleList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
