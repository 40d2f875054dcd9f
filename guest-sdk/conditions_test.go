package guest

import (
	"testing"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

func TestConditionsSetAsMetaSetStatusCondition(t *testing.T) {
	const t0, t1, t2 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"
	var cs Conditions
	if !cs.Set(Condition{Type: "Ready", Status: ConditionFalse, Reason: "Progressing", Message: "waiting"}, t0) {
		t.Error("adding a condition: not changed")
	}
	if c := cs.Find("Ready"); c == nil || c.LastTransitionTime != t0 || c.Status != ConditionFalse {
		t.Fatalf("added: %+v", c)
	}
	// The same status and words: nothing changes, the time stays.
	if cs.Set(Condition{Type: "Ready", Status: ConditionFalse, Reason: "Progressing", Message: "waiting"}, t1) {
		t.Error("the same condition again: changed")
	}
	// New words, same status: they change, the time stays.
	if !cs.Set(Condition{Type: "Ready", Status: ConditionFalse, Reason: "Progressing", Message: "1 of 2", ObservedGeneration: 2}, t1) {
		t.Error("a new message: not changed")
	}
	if c := cs.Find("Ready"); c.LastTransitionTime != t0 || c.Message != "1 of 2" || c.ObservedGeneration != 2 {
		t.Errorf("after a new message: %+v, want the time of %s kept", c, t0)
	}
	// A new status: the time moves.
	cs.Set(Condition{Type: "Ready", Status: ConditionTrue, Reason: "Done"}, t2)
	if c := cs.Find("Ready"); c.LastTransitionTime != t2 || !cs.IsTrue("Ready") || cs.IsFalse("Ready") {
		t.Errorf("after a status change: %+v, want the time %s", c, t2)
	}
	// A time given wins over now.
	cs.Set(Condition{Type: "Degraded", Status: ConditionFalse, Reason: "Fine", LastTransitionTime: t0}, t2)
	if c := cs.Find("Degraded"); c.LastTransitionTime != t0 {
		t.Errorf("a given time: %+v", c)
	}
	if len(cs) != 2 || !cs.Remove("Degraded") || cs.Remove("Degraded") || len(cs) != 1 || cs.Find("Degraded") != nil {
		t.Errorf("Remove: %+v", cs)
	}
	if cs.IsTrue("Missing") || cs.IsFalse("Missing") {
		t.Error("a missing condition is neither true nor false")
	}
}

func TestConditionsReadAndEncode(t *testing.T) {
	obj := Object{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": float64(3)},
		"not a condition",
		map[string]any{"type": "Synced", "status": "False", "reason": "No", "message": "m", "lastTransitionTime": "2026-01-02T00:00:00Z"},
	}}}
	cs := ConditionsOf(obj)
	if len(cs) != 2 || !cs.IsTrue("Ready") || cs.Find("Ready").ObservedGeneration != 3 || !cs.IsFalse("Synced") {
		t.Fatalf("ConditionsOf = %+v", cs)
	}
	// In a status, the list encodes as the maps it was read from, so an
	// unchanged status is not written.
	got, err := jsontree.Append(nil, map[string]any{"conditions": cs})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := jsontree.Append(nil, map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "True", "reason": "Done", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(3)},
		map[string]any{"type": "Synced", "status": "False", "reason": "No", "message": "m", "lastTransitionTime": "2026-01-02T00:00:00Z"},
	}})
	if string(got) != string(want) {
		t.Errorf("encoded\n%s\nwant\n%s", got, want)
	}
	if string(mustAppend(t, Conditions{})) != "[]" {
		t.Error("an empty list does not encode as []")
	}
}

func mustAppend(t *testing.T, v any) []byte {
	t.Helper()
	b, err := jsontree.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFindChild(t *testing.T) {
	children := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "a"}},
	}
	if o, ok := FindChild(children, "apps/v1", "Deployment", "a"); !ok || o.NestedString("kind") != "Deployment" {
		t.Errorf("FindChild Deployment a: %v %v", o, ok)
	}
	for _, q := range [][3]string{{"apps/v1", "Deployment", "b"}, {"v2", "ConfigMap", "a"}, {"v1", "Secret", "a"}} {
		if _, ok := FindChild(children, q[0], q[1], q[2]); ok {
			t.Errorf("FindChild %v: found", q)
		}
	}
	if EventNormal != "Normal" || EventWarning != "Warning" {
		t.Error("event types")
	}
}
