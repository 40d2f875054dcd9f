package protocol

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
)

// CheckOwnership refuses a manifest whose owned kinds no reconcile could
// write: a namespaced reconciled kind owning a cluster-scoped kind (an
// object in a namespace cannot be the controller of one outside every
// namespace, and would escape the namespace rule). A cluster-scoped kind
// may own cluster-scoped kinds, and namespaced kinds in any namespace
// (each child names its namespace). Kinds scopes does not know are not
// checked here (their CRD may be installed later); each response's
// children are checked again.
func CheckOwnership(m abi.Manifest, scopes Scopes) error {
	if scopes == nil {
		scopes = Builtin
	}
	forNamespaced, known := scopes.Namespaced(schema.GroupKind{Group: m.For.Group, Kind: m.For.Kind})
	if !known || !forNamespaced {
		return nil
	}
	for i, g := range m.Owns {
		gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
		if namespaced, known := scopes.Namespaced(gk); known && !namespaced {
			return fmt.Errorf("owns[%d] is %s, a cluster-scoped kind, but the reconciled kind %s is namespaced: a namespaced object cannot own a cluster-scoped one; remove it from owns, or reconcile a cluster-scoped kind", i, gk, m.For.Kind)
		}
	}
	return nil
}

// Scopes tells whether the objects of a kind live in a namespace. The
// children rules need it: a namespaced owner cannot own a cluster-scoped
// object, and a cluster-scoped child has no namespace.
type Scopes interface {
	// Namespaced reports whether objects of gk are namespaced; known is
	// false when the kind is unknown here.
	Namespaced(gk schema.GroupKind) (namespaced, known bool)
}

// Builtin knows the scope of every kind the kube-apiserver serves (as of
// Kubernetes v1.37; TestBuiltinScopesMatchDiscovery checks the table against
// a real API server's discovery). A kind of a built-in group that is not in
// the cluster-scoped table is namespaced; a kind of any other group is
// unknown.
var Builtin Scopes = builtinScopes{}

type builtinScopes struct{}

func (builtinScopes) Namespaced(gk schema.GroupKind) (bool, bool) {
	if clusterScoped[gk] {
		return false, true
	}
	if builtinGroups[gk.Group] {
		return true, true
	}
	return false, false
}

// builtinGroups are the API groups served by the kube-apiserver itself.
var builtinGroups = map[string]bool{
	"": true, "admissionregistration.k8s.io": true, "apiextensions.k8s.io": true, "apiregistration.k8s.io": true,
	"apps": true, "authentication.k8s.io": true, "authorization.k8s.io": true, "autoscaling": true, "batch": true,
	"certificates.k8s.io": true, "coordination.k8s.io": true, "discovery.k8s.io": true, "events.k8s.io": true,
	"flowcontrol.apiserver.k8s.io": true, "internal.apiserver.k8s.io": true, "networking.k8s.io": true,
	"node.k8s.io": true, "policy": true, "rbac.authorization.k8s.io": true, "resource.k8s.io": true,
	"scheduling.k8s.io": true, "storage.k8s.io": true, "storagemigration.k8s.io": true,
}

// clusterScoped are the built-in kinds whose objects have no namespace.
var clusterScoped = map[schema.GroupKind]bool{
	{Group: "", Kind: "ComponentStatus"}:                                              true,
	{Group: "", Kind: "Namespace"}:                                                    true,
	{Group: "", Kind: "Node"}:                                                         true,
	{Group: "", Kind: "PersistentVolume"}:                                             true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:                       true,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:                             true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:                  true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:                   true,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:                      true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                      true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:                               true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}:               true,
}

// MapperScopes asks a RESTMapper, as the cluster reconciler does; a kind the
// mapper cannot map is unknown.
func MapperScopes(m meta.RESTMapper) Scopes { return mapperScopes{m} }

type mapperScopes struct{ m meta.RESTMapper }

func (s mapperScopes) Namespaced(gk schema.GroupKind) (bool, bool) {
	mapping, err := s.m.RESTMapping(gk)
	if err != nil {
		return false, false
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace, true
}

// Chain asks each Scopes in turn; the first that knows a kind answers.
func Chain(scopes ...Scopes) Scopes { return chain(scopes) }

type chain []Scopes

func (c chain) Namespaced(gk schema.GroupKind) (bool, bool) {
	for _, s := range c {
		if s == nil {
			continue
		}
		if ns, ok := s.Namespaced(gk); ok {
			return ns, true
		}
	}
	return false, false
}
