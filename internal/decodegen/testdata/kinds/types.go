// Package kinds is decodegen's test package: a kind's types with every
// shape operator generate decodes. decodegen_test generates its decoders
// in a copy and checks them against encoding/json.
package kinds

import guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"

type Phase string

type Replicas int32

type Names []string

type Base struct {
	Owner string `json:"owner,omitempty"`
	Tier  int    `json:"tier"`
}

type Port struct {
	Name     string  `json:"name"`
	Port     int32   `json:"port"`
	Weight   float64 `json:"weight,omitempty"`
	Disabled bool    `json:"disabled,omitempty"`
}

type WidgetSpec struct {
	Base `json:",inline"`

	Message    string              `json:"message,omitempty"`
	Replicas   *Replicas           `json:"replicas,omitempty"`
	Size       int64               `json:"size"`
	Ratio      *float64            `json:"ratio,omitempty"`
	Phase      Phase               `json:"phase,omitempty"`
	Ports      []Port              `json:"ports,omitempty"`
	PortPtrs   []*Port             `json:"portPtrs,omitempty"`
	ByName     map[string]Port     `json:"byName,omitempty"`
	Matrix     [][]int             `json:"matrix,omitempty"`
	Labels     map[string]string   `json:"labels,omitempty"`
	Nested     map[string][]string `json:"nested,omitempty"`
	Names      Names               `json:"names,omitempty"`
	Raw        map[string]any      `json:"raw,omitempty"`
	Anything   any                 `json:"anything,omitempty"`
	Legacy     interface{}         `json:"legacy,omitempty"`
	Primary    *Port               `json:"primary,omitempty"`
	Untagged   string
	Skipped    string `json:"-"`
	unexported string
	A, B       string
}

type WidgetStatus struct {
	ObservedGeneration int64             `json:"observedGeneration,omitempty"`
	Conditions         []guest.Condition `json:"conditions,omitempty"`
	Last               *guest.Condition  `json:"last,omitempty"`
}

type Widget struct {
	Spec   WidgetSpec   `json:"spec"`
	Status WidgetStatus `json:"status"`
}
