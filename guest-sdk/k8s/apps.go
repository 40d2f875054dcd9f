package k8s

import (
	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// Deployment is an apps/v1 Deployment.
type Deployment struct {
	ObjectMeta `json:"metadata"`
	Spec       DeploymentSpec `json:"spec"`
	Extra      map[string]any `json:"-"`
}

// Child returns d as an element of guest.Response.Children: apiVersion,
// kind and metadata are plain values (guest.Object's Name, Namespace,
// Labels and Annotations read them), and spec is &d.Spec, which the SDK encodes straight into the
// response. The child refers to d: a change to d shows in it until the
// response is encoded. Extra's members replace the modelled ones.
func (d *Deployment) Child() guest.Object {
	o := d.ObjectMeta.child("apps/v1", "Deployment", 1)
	o["spec"] = &d.Spec
	return withExtra(o, d.Extra)
}

// AppendJSON appends d's JSON encoding to b.
func (d *Deployment) AppendJSON(b []byte) ([]byte, error) {
	return jsontree.Append(b, map[string]any(d.Child()))
}

// MarshalJSON is AppendJSON for encoding/json.
func (d Deployment) MarshalJSON() ([]byte, error) { return d.AppendJSON(nil) }

// DeploymentSpec keeps Replicas pods of Template running. Selector is
// required and must match Template's labels; it cannot change once the
// Deployment exists. A nil Replicas is the API's default, 1, and leaves the
// count to whoever else sets it (an autoscaler); new(int32(0)) scales to
// zero.
type DeploymentSpec struct {
	Replicas             *int32             `json:"replicas,omitempty"`
	Selector             *LabelSelector     `json:"selector,omitempty"`
	Template             PodTemplateSpec    `json:"template,omitzero"`
	Strategy             DeploymentStrategy `json:"strategy,omitzero"`
	MinReadySeconds      int32              `json:"minReadySeconds,omitempty"`
	RevisionHistoryLimit *int32             `json:"revisionHistoryLimit,omitempty"`
	Paused               bool               `json:"paused,omitempty"`
	Extra                map[string]any     `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *DeploymentSpec) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	w.int32("minReadySeconds", s.MinReadySeconds)
	w.boolean("paused", s.Paused)
	w.int32Ptr("replicas", s.Replicas)
	w.int32Ptr("revisionHistoryLimit", s.RevisionHistoryLimit)
	if s.Selector != nil && w.key("selector") {
		w.value(s.Selector.AppendJSON(w.b))
	}
	if w.key("strategy") {
		w.object(s.Strategy.AppendJSON(w.b))
	}
	if w.key("template") {
		w.object(s.Template.AppendJSON(w.b))
	}
	return w.close()
}

// MarshalJSON is AppendJSON for encoding/json, which the SDK falls back to
// for a response it cannot encode itself.
func (s *DeploymentSpec) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil) }

// DeploymentStrategyType is how a Deployment replaces its pods.
type DeploymentStrategyType string

// The strategies of a Deployment; the API's default is RollingUpdate.
const (
	RecreateDeploymentStrategyType      DeploymentStrategyType = "Recreate"
	RollingUpdateDeploymentStrategyType DeploymentStrategyType = "RollingUpdate"
)

// DeploymentStrategy is how a Deployment replaces its pods.
type DeploymentStrategy struct {
	Type          DeploymentStrategyType   `json:"type,omitempty"`
	RollingUpdate *RollingUpdateDeployment `json:"rollingUpdate,omitempty"`
	Extra         map[string]any           `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *DeploymentStrategy) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	if s.RollingUpdate != nil && w.key("rollingUpdate") {
		w.value(s.RollingUpdate.AppendJSON(w.b))
	}
	w.str("type", string(s.Type))
	return w.close()
}

// RollingUpdateDeployment bounds a rolling update: how many pods may be
// missing (MaxUnavailable) or extra (MaxSurge), as a number or a
// percentage ("25%", the API's default for both).
type RollingUpdateDeployment struct {
	MaxUnavailable IntOrString    `json:"maxUnavailable,omitzero"`
	MaxSurge       IntOrString    `json:"maxSurge,omitzero"`
	Extra          map[string]any `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *RollingUpdateDeployment) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.intOrString("maxSurge", r.MaxSurge)
	w.intOrString("maxUnavailable", r.MaxUnavailable)
	return w.close()
}
