package guest

import "github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"

// Event types, for Event.Type.
const (
	EventNormal  = abi.EventNormal
	EventWarning = abi.EventWarning
)

// Condition statuses.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Conditions is a status's list of conditions, with the helpers of
// k8s.io/apimachinery's meta.SetStatusCondition and friends. It encodes
// itself (AppendJSON), so it goes into a Response's status as it is:
//
//	conditions := guest.ConditionsOf(obj)
//	conditions.Set(guest.Condition{Type: "Ready", Status: guest.ConditionTrue, Reason: "Done", ObservedGeneration: gen}, req.Now)
//	return &guest.Response{Status: map[string]any{"conditions": conditions}}
type Conditions []Condition

// ConditionsOf returns obj's status.conditions; entries of the wrong
// shape are skipped.
func ConditionsOf(obj Object) Conditions {
	v, _ := obj.NestedField("status", "conditions")
	list, _ := v.([]any)
	out := make(Conditions, 0, len(list)+1)
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		if c, ok := obj.Condition(t); ok && t != "" {
			out = append(out, c)
		}
	}
	return out
}

// Set sets c in the list as meta.SetStatusCondition does: a condition of a
// new type is added; for an existing type, Reason, Message and
// ObservedGeneration are replaced, and Status and LastTransitionTime only
// when the status changes. LastTransitionTime is c's when set, else now
// (the request's time: guests have no clock). It reports whether the list
// changed; an unchanged list keeps the status the same, so the host does
// not write it.
func (cs *Conditions) Set(c Condition, now string) (changed bool) {
	if c.LastTransitionTime == "" {
		c.LastTransitionTime = now
	}
	for i := range *cs {
		old := &(*cs)[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status != c.Status {
			old.Status, old.LastTransitionTime = c.Status, c.LastTransitionTime
			changed = true
		}
		if old.Reason != c.Reason || old.Message != c.Message || old.ObservedGeneration != c.ObservedGeneration {
			old.Reason, old.Message, old.ObservedGeneration = c.Reason, c.Message, c.ObservedGeneration
			changed = true
		}
		return changed
	}
	*cs = append(*cs, c)
	return true
}

// Remove removes the condition of type t; it reports whether there was one.
func (cs *Conditions) Remove(t string) bool {
	for i, c := range *cs {
		if c.Type == t {
			*cs = append((*cs)[:i], (*cs)[i+1:]...)
			return true
		}
	}
	return false
}

// Find returns the condition of type t, or nil.
func (cs Conditions) Find(t string) *Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// IsTrue reports whether the condition of type t is True.
func (cs Conditions) IsTrue(t string) bool {
	c := cs.Find(t)
	return c != nil && c.Status == ConditionTrue
}

// IsFalse reports whether the condition of type t is False.
func (cs Conditions) IsFalse(t string) bool {
	c := cs.Find(t)
	return c != nil && c.Status == ConditionFalse
}

// AppendJSON appends the list's JSON encoding: an array of the
// conditions, each as Condition.AppendJSON writes it.
func (cs Conditions) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '[')
	for i, c := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = c.AppendJSON(b); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// FindChild returns the child of apiVersion, kind and name among
// children (such as req.Children, the observed children), or false.
func FindChild(children []map[string]any, apiVersion, kind, name string) (Object, bool) {
	for _, c := range children {
		o := Object(c)
		if o.NestedString("kind") == kind && o.NestedString("apiVersion") == apiVersion && o.Name() == name {
			return o, true
		}
	}
	return nil, false
}
