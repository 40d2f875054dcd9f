package k8s

import (
	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// The kinds of this package implement AppendJSON and MarshalJSON by
// encoding their Child: the whole object, apiVersion and kind included.
// MarshalJSON has a value receiver, so that encoding/json writes a kind's
// value, not only a pointer to one, as the whole object.

// ConfigMap is a v1 ConfigMap: string Data and binary BinaryData, under
// distinct keys.
type ConfigMap struct {
	ObjectMeta `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
	BinaryData map[string][]byte `json:"binaryData,omitempty"`
	// Immutable, when true, makes the API server refuse any change to
	// the data: a new one needs a new name.
	Immutable *bool          `json:"immutable,omitempty"`
	Extra     map[string]any `json:"-"`
}

// Child returns c as an element of guest.Response.Children, made of plain
// values: guest.Object's Name, Namespace, Labels and Annotations read its
// metadata; data is c.Data itself and binaryData a map of base64 strings,
// as the API encodes bytes, both map[string]string, which the Nested
// accessors do not step into (read child["data"].(map[string]string), or
// use Plain). Extra's members replace the modelled ones.
func (c *ConfigMap) Child() guest.Object {
	o := c.ObjectMeta.child("v1", "ConfigMap", 3)
	if len(c.Data) > 0 {
		o["data"] = c.Data
	}
	if len(c.BinaryData) > 0 {
		o["binaryData"] = base64Map(c.BinaryData)
	}
	if c.Immutable != nil {
		o["immutable"] = *c.Immutable
	}
	return withExtra(o, c.Extra)
}

// AppendJSON appends c's JSON encoding to b.
func (c *ConfigMap) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(c.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (c ConfigMap) MarshalJSON() ([]byte, error) { return c.AppendJSON(nil) }

// SecretType is a Secret's type.
type SecretType string

// Common Secret types; the API's default is Opaque.
const (
	SecretTypeOpaque           SecretType = "Opaque"
	SecretTypeTLS              SecretType = "kubernetes.io/tls"
	SecretTypeDockerConfigJSON SecretType = "kubernetes.io/dockerconfigjson"
	SecretTypeBasicAuth        SecretType = "kubernetes.io/basic-auth"
	SecretTypeSSHAuth          SecretType = "kubernetes.io/ssh-auth"
)

// Secret is a v1 Secret. Prefer Data to StringData in a child: the API
// server moves stringData into data and keeps no stringData, so a child
// that has some never matches the observed Secret, and the host applies it
// again on every reconcile.
type Secret struct {
	ObjectMeta `json:"metadata"`
	Type       SecretType        `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
	StringData map[string]string `json:"stringData,omitempty"`
	// Immutable, when true, makes the API server refuse any change to
	// the data: a new one needs a new name.
	Immutable *bool          `json:"immutable,omitempty"`
	Extra     map[string]any `json:"-"`
}

// Child returns s as an element of guest.Response.Children, made of plain
// values: guest.Object's Name, Namespace, Labels and Annotations read its
// metadata; data is a map of base64 strings, as the API encodes bytes,
// and stringData is s.StringData itself, both map[string]string, which the
// Nested accessors do not step into (use Plain). Extra's members replace
// the modelled ones.
func (s *Secret) Child() guest.Object {
	o := s.ObjectMeta.child("v1", "Secret", 4)
	if len(s.Data) > 0 {
		o["data"] = base64Map(s.Data)
	}
	if len(s.StringData) > 0 {
		o["stringData"] = s.StringData
	}
	if s.Type != "" {
		o["type"] = string(s.Type)
	}
	if s.Immutable != nil {
		o["immutable"] = *s.Immutable
	}
	return withExtra(o, s.Extra)
}

// AppendJSON appends s's JSON encoding to b.
func (s *Secret) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(s.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (s Secret) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// Service is a v1 Service.
type Service struct {
	ObjectMeta `json:"metadata"`
	Spec       ServiceSpec    `json:"spec"`
	Extra      map[string]any `json:"-"`
}

// Child returns s as an element of guest.Response.Children: apiVersion,
// kind and metadata are plain values (guest.Object's Name, Namespace,
// Labels and Annotations read them), and spec is &s.Spec, which the SDK encodes straight into the
// response. The child refers to s: a change to s shows in it until the
// response is encoded. Extra's members replace the modelled ones.
func (s *Service) Child() guest.Object {
	o := s.ObjectMeta.child("v1", "Service", 1)
	o["spec"] = &s.Spec
	return withExtra(o, s.Extra)
}

// AppendJSON appends s's JSON encoding to b.
func (s *Service) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(s.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (s Service) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// ServiceType is how a Service is exposed.
type ServiceType string

// The Service types; the API's default is ClusterIP.
const (
	ServiceTypeClusterIP    ServiceType = "ClusterIP"
	ServiceTypeNodePort     ServiceType = "NodePort"
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
	ServiceTypeExternalName ServiceType = "ExternalName"
)

// ClusterIPNone is the ClusterIP of a headless Service.
const ClusterIPNone = "None"

// ServiceSpec routes the Service's Ports to the pods whose labels include
// Selector.
type ServiceSpec struct {
	Type      ServiceType       `json:"type,omitempty"`
	Selector  map[string]string `json:"selector,omitempty"`
	Ports     []ServicePort     `json:"ports,omitempty"`
	ClusterIP string            `json:"clusterIP,omitempty"`
	Extra     map[string]any    `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *ServiceSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.str("clusterIP", s.ClusterIP)
	list(&w, "ports", s.Ports)
	w.strMap("selector", s.Selector)
	w.str("type", string(s.Type))
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json, which the SDK falls back to
// for a response it cannot encode itself.
func (s *ServiceSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// ServicePort is a port of a Service: Port, forwarded to the pods'
// TargetPort (a number, or the name of a container port; absent, the same
// number as Port).
type ServicePort struct {
	Name       string         `json:"name,omitempty"`
	Protocol   Protocol       `json:"protocol,omitempty"`
	Port       int32          `json:"port,omitempty"`
	TargetPort IntOrString    `json:"targetPort,omitzero"`
	NodePort   int32          `json:"nodePort,omitempty"`
	Extra      map[string]any `json:"-"`
}

// AppendJSON appends p's JSON encoding to b.
func (p *ServicePort) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, p.Extra)
	w.str("name", p.Name)
	w.int32("nodePort", p.NodePort)
	w.int32("port", p.Port)
	w.str("protocol", string(p.Protocol))
	w.intOrString("targetPort", p.TargetPort)
	return w.close()
}

// ServiceAccount is a v1 ServiceAccount: an identity for pods
// (PodSpec.ServiceAccountName).
type ServiceAccount struct {
	ObjectMeta `json:"metadata"`
	// ImagePullSecrets are added to the pods that run as this account.
	ImagePullSecrets []LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// AutomountServiceAccountToken, when false, mounts no API token in
	// the pods by default.
	AutomountServiceAccountToken *bool          `json:"automountServiceAccountToken,omitempty"`
	Extra                        map[string]any `json:"-"`
}

// Child returns a as an element of guest.Response.Children, made of plain
// values: guest.Object's Name, Namespace, Labels and Annotations read its
// metadata; imagePullSecrets is a []any of {"name": ...} maps. Extra's
// members replace the modelled ones.
func (a *ServiceAccount) Child() guest.Object {
	o := a.ObjectMeta.child("v1", "ServiceAccount", 2)
	if len(a.ImagePullSecrets) > 0 {
		refs := make([]any, len(a.ImagePullSecrets))
		for i, r := range a.ImagePullSecrets {
			m := make(map[string]any, 1+len(r.Extra))
			if r.Name != "" {
				m["name"] = r.Name
			}
			refs[i] = withExtra(m, r.Extra)
		}
		o["imagePullSecrets"] = refs
	}
	if a.AutomountServiceAccountToken != nil {
		o["automountServiceAccountToken"] = *a.AutomountServiceAccountToken
	}
	return withExtra(o, a.Extra)
}

// AppendJSON appends a's JSON encoding to b.
func (a *ServiceAccount) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(a.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (a ServiceAccount) MarshalJSON() ([]byte, error) { return a.AppendJSON(nil) }

// PersistentVolumeClaim is a v1 PersistentVolumeClaim. Most of its spec
// cannot change once it is bound: the API server refuses the apply (the
// host reports it in the next request's childFailures). Only a larger
// storage request is accepted, where the storage class allows expansion.
type PersistentVolumeClaim struct {
	ObjectMeta `json:"metadata"`
	Spec       PersistentVolumeClaimSpec `json:"spec"`
	Extra      map[string]any            `json:"-"`
}

// Child returns c as an element of guest.Response.Children: apiVersion,
// kind and metadata are plain values (guest.Object's Name, Namespace,
// Labels and Annotations read them), and spec is &c.Spec, which the SDK encodes straight into the
// response. The child refers to c: a change to c shows in it until the
// response is encoded. Extra's members replace the modelled ones.
func (c *PersistentVolumeClaim) Child() guest.Object {
	o := c.ObjectMeta.child("v1", "PersistentVolumeClaim", 1)
	o["spec"] = &c.Spec
	return withExtra(o, c.Extra)
}

// AppendJSON appends c's JSON encoding to b.
func (c *PersistentVolumeClaim) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(c.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (c PersistentVolumeClaim) MarshalJSON() ([]byte, error) { return c.AppendJSON(nil) }

// PersistentVolumeAccessMode is how a volume may be mounted.
type PersistentVolumeAccessMode string

// The access modes of a volume.
const (
	ReadWriteOnce    PersistentVolumeAccessMode = "ReadWriteOnce"
	ReadOnlyMany     PersistentVolumeAccessMode = "ReadOnlyMany"
	ReadWriteMany    PersistentVolumeAccessMode = "ReadWriteMany"
	ReadWriteOncePod PersistentVolumeAccessMode = "ReadWriteOncePod"
)

// PersistentVolumeClaimSpec asks for a volume: at least the storage request
// (Resources.Requests[ResourceStorage]) and an access mode. A nil
// StorageClassName takes the cluster's default class; a pointer to "" asks
// for a volume of no class.
type PersistentVolumeClaimSpec struct {
	AccessModes      []PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	Selector         *LabelSelector               `json:"selector,omitempty"`
	Resources        VolumeResourceRequirements   `json:"resources,omitzero"`
	VolumeName       string                       `json:"volumeName,omitempty"`
	StorageClassName *string                      `json:"storageClassName,omitempty"`
	VolumeMode       *string                      `json:"volumeMode,omitempty"`
	Extra            map[string]any               `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *PersistentVolumeClaimSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	if len(s.AccessModes) > 0 && w.key("accessModes") {
		w.b = append(w.b, '[')
		for i, m := range s.AccessModes {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = jsontree.AppendString(w.b, string(m))
		}
		w.b = append(w.b, ']')
	}
	if w.key("resources") {
		w.object(s.Resources.AppendJSON(w.b))
	}
	if s.Selector != nil && w.key("selector") {
		w.value(s.Selector.AppendJSON(w.b))
	}
	w.strPtr("storageClassName", s.StorageClassName)
	w.strPtr("volumeMode", s.VolumeMode)
	w.str("volumeName", s.VolumeName)
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json, which the SDK falls back to
// for a response it cannot encode itself.
func (s *PersistentVolumeClaimSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// VolumeResourceRequirements are a claim's storage request and limit.
type VolumeResourceRequirements struct {
	Limits   ResourceList   `json:"limits,omitempty"`
	Requests ResourceList   `json:"requests,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *VolumeResourceRequirements) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.strMap("limits", r.Limits)
	w.strMap("requests", r.Requests)
	return w.close()
}
