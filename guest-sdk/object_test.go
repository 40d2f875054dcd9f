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

func TestLabelsOwnersAndSetters(t *testing.T) {
	o := obj(t, `{"metadata":{"uid":"u1","labels":{"app":"web","n":3},"annotations":{"a":"b"},
		"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"x","uid":"p1","controller":true},{"kind":"Y","uid":"p2"}]}}`)
	if l := o.Labels(); len(l) != 1 || l["app"] != "web" {
		t.Errorf("Labels = %v (non-strings must be skipped)", l)
	}
	if a := o.Annotations(); a["a"] != "b" {
		t.Errorf("Annotations = %v", a)
	}
	refs := o.OwnerReferences()
	if len(refs) != 2 || refs[0] != (OwnerReference{APIVersion: "v1", Kind: "X", Name: "x", UID: "p1", Controller: true}) || refs[1].Controller {
		t.Errorf("OwnerReferences = %+v", refs)
	}
	if !o.IsControlledBy(Object{"metadata": map[string]any{"uid": "p1"}}) || o.IsControlledBy(Object{"metadata": map[string]any{"uid": "p2"}}) {
		t.Error("IsControlledBy")
	}
	e := Object{}
	e.SetLabel("tier", "db")
	if !e.SetNestedField(int64(2), "spec", "replicas") || e.Labels()["tier"] != "db" {
		t.Errorf("setters: %v", e)
	}
	if n, _ := e.NestedInt64("spec", "replicas"); n != 2 {
		t.Errorf("spec.replicas = %d", n)
	}
	if e.SetNestedField(1, "metadata", "labels", "tier", "deeper") {
		t.Error("SetNestedField walked through a string")
	}
	if len((Object{}).Labels()) != 0 || len((Object{}).OwnerReferences()) != 0 {
		t.Error("empty object")
	}
}

// A child built with package k8s holds map[string]string labels.
func TestStringMapLabels(t *testing.T) {
	o := Object{"metadata": map[string]any{"name": "n", "labels": map[string]string{"a": "b"}, "annotations": map[string]string{"c": "d"}}}
	if o.Labels()["a"] != "b" || o.Annotations()["c"] != "d" {
		t.Errorf("labels %v, annotations %v", o.Labels(), o.Annotations())
	}
}
