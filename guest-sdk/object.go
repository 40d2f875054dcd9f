package guest

import (
	"strconv"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// Object wraps an unstructured Kubernetes object decoded from JSON.
// Numbers decode as float64, as encoding/json does.
type Object map[string]any

// NestedField returns the value at path and whether it was present.
func (o Object) NestedField(path ...string) (any, bool) {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// NestedString returns the string at path, or "" when absent or not a string.
func (o Object) NestedString(path ...string) string {
	v, _ := o.NestedField(path...)
	s, _ := v.(string)
	return s
}

// NestedInt64 returns the integer at path. ok is false when the value is
// absent or not a whole number.
func (o Object) NestedInt64(path ...string) (n int64, ok bool) {
	v, found := o.NestedField(path...)
	if !found {
		return 0, false
	}
	switch x := v.(type) {
	case float64:
		if x != float64(int64(x)) {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// Generation is metadata.generation, or 0.
func (o Object) Generation() int64 {
	n, _ := o.NestedInt64("metadata", "generation")
	return n
}

// Name is metadata.name.
func (o Object) Name() string { return o.NestedString("metadata", "name") }

// Namespace is metadata.namespace.
func (o Object) Namespace() string { return o.NestedString("metadata", "namespace") }

// Condition is a metav1.Condition as a guest sees it. Its markers give a
// kind's CRD the schema of metav1.Condition when controller-gen reads a
// status with a []guest.Condition (a scaffold's make manifests).
type Condition struct {
	// Type of the condition, in CamelCase, such as Ready.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`
	// Status of the condition: True, False or Unknown.
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status string `json:"status"`
	// ObservedGeneration is the .metadata.generation the condition was set from.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when the condition last changed from one status to another.
	// +kubebuilder:validation:Format=date-time
	LastTransitionTime string `json:"lastTransitionTime"`
	// Reason is a CamelCase word for the last transition.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// Message is a human-readable message about the transition; it may be empty.
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message"`
}

// AppendJSON appends c's JSON encoding (its json tags' members, keys
// sorted), so that a Condition in a status needs no encoding/json.
func (c Condition) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"lastTransitionTime":`...)
	b = jsontree.AppendString(b, c.LastTransitionTime)
	b = append(b, `,"message":`...)
	b = jsontree.AppendString(b, c.Message)
	if c.ObservedGeneration != 0 {
		b = append(b, `,"observedGeneration":`...)
		b = strconv.AppendInt(b, c.ObservedGeneration, 10)
	}
	b = append(b, `,"reason":`...)
	b = jsontree.AppendString(b, c.Reason)
	b = append(b, `,"status":`...)
	b = jsontree.AppendString(b, c.Status)
	b = append(b, `,"type":`...)
	b = jsontree.AppendString(b, c.Type)
	return append(b, '}'), nil
}

// Condition returns the status condition of type t, if the object has one.
func (o Object) Condition(t string) (Condition, bool) {
	v, _ := o.NestedField("status", "conditions")
	list, _ := v.([]any)
	for _, item := range list {
		m, _ := item.(map[string]any)
		if m["type"] != t {
			continue
		}
		c := Condition{Type: t}
		c.Status, _ = m["status"].(string)
		c.LastTransitionTime, _ = m["lastTransitionTime"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		c.ObservedGeneration, _ = Object(m).NestedInt64("observedGeneration")
		return c, true
	}
	return Condition{}, false
}

// SetCondition returns c as it should be stored, given the object's current
// conditions: LastTransitionTime is kept from the existing condition of the
// same type when Status did not change, and set to now otherwise. This keeps
// the desired status stable across reconciles, so the host does not write.
func (o Object) SetCondition(c Condition, now string) map[string]any {
	old, ok := o.Condition(c.Type)
	return conditionMap(c, old, ok, now)
}

// conditionMap is SetCondition given the object's condition of c's type
// (old, when ok).
func conditionMap(c Condition, old Condition, ok bool, now string) map[string]any {
	c.LastTransitionTime = now
	if ok && old.Status == c.Status && old.LastTransitionTime != "" {
		c.LastTransitionTime = old.LastTransitionTime
	}
	m := map[string]any{
		"type":               c.Type,
		"status":             c.Status,
		"lastTransitionTime": c.LastTransitionTime,
		"reason":             c.Reason,
		"message":            c.Message,
	}
	if c.ObservedGeneration != 0 {
		m["observedGeneration"] = c.ObservedGeneration
	}
	return m
}

// stringMap returns the map[string]string at path.
func (o Object) stringMap(path ...string) map[string]string {
	out := map[string]string{}
	v, _ := o.NestedField(path...)
	switch m := v.(type) {
	case map[string]any:
		for k, x := range m {
			if s, ok := x.(string); ok {
				out[k] = s
			}
		}
	case map[string]string:
		for k, s := range m {
			out[k] = s
		}
	}
	return out
}

// Labels returns metadata.labels (empty when there are none).
func (o Object) Labels() map[string]string { return o.stringMap("metadata", "labels") }

// Annotations returns metadata.annotations (empty when there are none).
func (o Object) Annotations() map[string]string { return o.stringMap("metadata", "annotations") }

// UID is metadata.uid.
func (o Object) UID() string { return o.NestedString("metadata", "uid") }

// SetNestedField sets value at path, creating intermediate objects. It
// returns false when a non-object is in the way.
func (o Object) SetNestedField(value any, path ...string) bool {
	if len(path) == 0 {
		return false
	}
	cur := map[string]any(o)
	for _, p := range path[:len(path)-1] {
		next, ok := cur[p]
		if !ok || next == nil {
			m := map[string]any{}
			cur[p] = m
			cur = m
			continue
		}
		if cur, ok = next.(map[string]any); !ok {
			return false
		}
	}
	cur[path[len(path)-1]] = value
	return true
}

// SetLabel sets one label.
func (o Object) SetLabel(key, value string) { o.SetNestedField(value, "metadata", "labels", key) }

// OwnerReference is an entry of metadata.ownerReferences.
type OwnerReference struct {
	APIVersion string
	Kind       string
	Name       string
	UID        string
	Controller bool
}

// OwnerReferences returns metadata.ownerReferences.
func (o Object) OwnerReferences() []OwnerReference {
	v, _ := o.NestedField("metadata", "ownerReferences")
	list, _ := v.([]any)
	out := make([]OwnerReference, 0, len(list))
	for _, e := range list {
		r := Object(asMap(e))
		c, _ := r.NestedField("controller")
		isController, _ := c.(bool)
		out = append(out, OwnerReference{
			APIVersion: r.NestedString("apiVersion"), Kind: r.NestedString("kind"),
			Name: r.NestedString("name"), UID: r.NestedString("uid"), Controller: isController,
		})
	}
	return out
}

// IsControlledBy reports whether owner is o's controller (by UID).
func (o Object) IsControlledBy(owner Object) bool {
	for _, r := range o.OwnerReferences() {
		if r.Controller && r.UID != "" && r.UID == owner.UID() {
			return true
		}
	}
	return false
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
