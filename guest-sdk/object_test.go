package guest

import (
	"encoding/json"
	"testing"
)

func obj(t *testing.T, s string) Object {
	var o Object
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestNestedAccessors(t *testing.T) {
	o := obj(t, `{"metadata":{"name":"n","namespace":"ns","generation":4},"spec":{"size":3,"ratio":1.5,"s":"12","color":"red"}}`)
	if o.Name() != "n" || o.Namespace() != "ns" || o.Generation() != 4 {
		t.Errorf("metadata accessors: %q %q %d", o.Name(), o.Namespace(), o.Generation())
	}
	if n, ok := o.NestedInt64("spec", "size"); !ok || n != 3 {
		t.Errorf("size = %d %v", n, ok)
	}
	if _, ok := o.NestedInt64("spec", "ratio"); ok {
		t.Error("1.5 accepted as an integer")
	}
	if n, ok := o.NestedInt64("spec", "s"); !ok || n != 12 {
		t.Errorf("numeric string = %d %v", n, ok)
	}
	if _, ok := o.NestedInt64("spec", "missing"); ok {
		t.Error("missing field reported present")
	}
	if _, ok := o.NestedField("spec", "color", "deeper"); ok {
		t.Error("walked through a string")
	}
	if o.NestedString("spec", "color") != "red" || o.NestedString("spec", "size") != "" {
		t.Error("NestedString")
	}
}

func TestSetConditionKeepsTransitionTime(t *testing.T) {
	o := obj(t, `{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2020-01-01T00:00:00Z","observedGeneration":3}]}}`)
	c, ok := o.Condition("Ready")
	if !ok || c.Status != "True" || c.ObservedGeneration != 3 {
		t.Fatalf("Condition = %+v %v", c, ok)
	}
	same := o.SetCondition(Condition{Type: "Ready", Status: "True", Reason: "R"}, "2030-01-01T00:00:00Z")
	if same["lastTransitionTime"] != "2020-01-01T00:00:00Z" {
		t.Errorf("unchanged status moved lastTransitionTime: %v", same)
	}
	flipped := o.SetCondition(Condition{Type: "Ready", Status: "False", Reason: "R"}, "2030-01-01T00:00:00Z")
	if flipped["lastTransitionTime"] != "2030-01-01T00:00:00Z" {
		t.Errorf("changed status kept old lastTransitionTime: %v", flipped)
	}
	fresh := (Object{}).SetCondition(Condition{Type: "Ready", Status: "True"}, "2030-01-01T00:00:00Z")
	if fresh["lastTransitionTime"] != "2030-01-01T00:00:00Z" {
		t.Errorf("new condition: %v", fresh)
	}
	if _, ok := (Object{}).Condition("Ready"); ok {
		t.Error("condition found on empty object")
	}
}
