package k8s

import (
	"errors"
	"strconv"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// ObjectMeta is the metadata a module sets on an object. The host sets the
// owner reference and its own label (docs/abi.md); a child's namespace,
// when empty, is its owner's.
type ObjectMeta struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Extra       map[string]any    `json:"-"`
}

// AppendJSON appends m's JSON encoding to b.
func (m *ObjectMeta) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, m.Extra)
	w.strMap("annotations", m.Annotations)
	w.strMap("labels", m.Labels)
	w.str("name", m.Name)
	w.str("namespace", m.Namespace)
	return w.close()
}

// child starts the map of an object for Child, with room for more top-level
// members: apiVersion, kind and metadata, all plain values, so that
// guest.Object's Name, Namespace, Labels and Annotations read them. The
// labels and annotations are m's maps (map[string]string), not copies.
// apiVersion and kind are interfaces so that the callers' constants are
// boxed without an allocation.
func (m *ObjectMeta) child(apiVersion, kind any, more int) guest.Object {
	md := make(map[string]any, 2+len(m.Extra))
	if m.Name != "" {
		md["name"] = m.Name
	}
	if m.Namespace != "" {
		md["namespace"] = m.Namespace
	}
	if len(m.Labels) > 0 {
		md["labels"] = m.Labels
	}
	if len(m.Annotations) > 0 {
		md["annotations"] = m.Annotations
	}
	if len(m.Extra) > 0 { // a range over a nil map still costs an iterator
		for k, v := range m.Extra {
			md[k] = v
		}
	}
	o := make(guest.Object, 3+more)
	o["apiVersion"], o["kind"], o["metadata"] = apiVersion, kind, md
	return o
}

// withExtra sets the members of extra in o, replacing modelled ones.
func withExtra(o map[string]any, extra map[string]any) map[string]any {
	if len(extra) > 0 {
		for k, v := range extra {
			o[k] = v
		}
	}
	return o
}

// LabelSelector selects objects by their labels: those that have every
// label of MatchLabels and meet every requirement of MatchExpressions.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
	Extra            map[string]any             `json:"-"`
}

// AppendJSON appends s's JSON encoding to b.
func (s *LabelSelector) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, s.Extra)
	list(&w, "matchExpressions", s.MatchExpressions)
	w.strMap("matchLabels", s.MatchLabels)
	return w.close()
}

// LabelSelectorOperator is a LabelSelectorRequirement's operator.
type LabelSelectorOperator string

// The operators of a LabelSelectorRequirement.
const (
	LabelSelectorOpIn           LabelSelectorOperator = "In"
	LabelSelectorOpNotIn        LabelSelectorOperator = "NotIn"
	LabelSelectorOpExists       LabelSelectorOperator = "Exists"
	LabelSelectorOpDoesNotExist LabelSelectorOperator = "DoesNotExist"
)

// LabelSelectorRequirement is one requirement on the label Key: its value
// is (In) or is not (NotIn) one of Values, or the label exists (Exists)
// or does not (DoesNotExist), with no Values.
type LabelSelectorRequirement struct {
	Key      string                `json:"key,omitempty"`
	Operator LabelSelectorOperator `json:"operator,omitempty"`
	Values   []string              `json:"values,omitempty"`
	Extra    map[string]any        `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *LabelSelectorRequirement) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.str("key", r.Key)
	w.str("operator", string(r.Operator))
	w.strs("values", r.Values)
	return w.close()
}

// LocalObjectReference names an object in the same namespace, such as an
// image pull Secret.
type LocalObjectReference struct {
	Name  string         `json:"name,omitempty"`
	Extra map[string]any `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *LocalObjectReference) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.str("name", r.Name)
	return w.close()
}

// IntOrString is a number or a string, such as a Service port's targetPort
// (8080, or the name of a container port, "http"). The zero value is
// absent; FromInt32 and FromString make the others.
type IntOrString struct {
	kind uint8 // 0 absent, 1 number, 2 string
	num  int32
	str  string
}

// FromInt32 is the number n.
func FromInt32(n int32) IntOrString { return IntOrString{kind: 1, num: n} }

// FromString is the string s.
func FromString(s string) IntOrString { return IntOrString{kind: 2, str: s} }

// IsZero reports whether v is absent; encoding/json's omitzero asks it.
func (v IntOrString) IsZero() bool { return v.kind == 0 }

// String is the number in decimal or the string; "" when absent.
func (v IntOrString) String() string {
	if v.kind == 1 {
		return strconv.FormatInt(int64(v.num), 10)
	}
	return v.str
}

func (v IntOrString) appendJSON(b []byte) []byte {
	switch v.kind {
	case 1:
		return appendInt(b, int64(v.num))
	case 2:
		return jsontree.AppendString(b, v.str)
	}
	return append(b, "null"...)
}

// MarshalJSON encodes v as a JSON number or string, or null when absent.
func (v IntOrString) MarshalJSON() ([]byte, error) { return v.appendJSON(nil), nil }

// UnmarshalJSON decodes a JSON number (an integer of 32 bits) or string;
// null is absent.
func (v *IntOrString) UnmarshalJSON(b []byte) error {
	x, err := jsontree.Decode(b)
	if err != nil {
		return err
	}
	switch x := x.(type) {
	case nil:
		*v = IntOrString{}
	case string:
		*v = FromString(x)
	case float64:
		if x != float64(int32(x)) {
			return errors.New("k8s: IntOrString: " + strconv.FormatFloat(x, 'g', -1, 64) + " is not a 32-bit integer")
		}
		*v = FromInt32(int32(x))
	default:
		return errors.New("k8s: IntOrString: want a number or a string")
	}
	return nil
}

// ResourceList maps a resource name (ResourceCPU, ResourceMemory, ...) to
// a quantity, such as "250m" or "64Mi".
type ResourceList map[string]string

// Common resource names.
const (
	ResourceCPU              = "cpu"
	ResourceMemory           = "memory"
	ResourceStorage          = "storage"
	ResourceEphemeralStorage = "ephemeral-storage"
)

// ResourceRequirements are a container's resource requests and limits.
type ResourceRequirements struct {
	Limits   ResourceList   `json:"limits,omitempty"`
	Requests ResourceList   `json:"requests,omitempty"`
	Extra    map[string]any `json:"-"`
}

// AppendJSON appends r's JSON encoding to b.
func (r *ResourceRequirements) AppendJSON(b []byte) ([]byte, error) {
	w := open(b, r.Extra)
	w.strMap("limits", r.Limits)
	w.strMap("requests", r.Requests)
	return w.close()
}
