package main

import (
	"testing"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

func widget(gen int64, spec map[string]any, status map[string]any) *guest.LazyRequest {
	obj := map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "w", "namespace": "default", "generation": float64(gen)},
		"spec":       spec,
	}
	if status != nil {
		obj["status"] = status
	}
	req, err := guest.Lazy(&guest.Request{Object: obj, Now: "2026-01-02T03:04:05Z"})
	if err != nil {
		panic(err)
	}
	return req
}

func TestReconcileValid(t *testing.T) {
	resp := Reconcile(widget(3, map[string]any{"size": float64(4), "color": "blue"}, nil))
	if resp.Error != nil {
		t.Fatalf("unexpected error: %+v", resp.Error)
	}
	if got := resp.Status["summary"]; got != "4 x blue" {
		t.Errorf("summary = %v, want 4 x blue", got)
	}
	if got := resp.Status["observedGeneration"]; got != int64(3) {
		t.Errorf("observedGeneration = %v, want 3", got)
	}
	c := resp.Status["conditions"].([]any)[0].(map[string]any)
	if c["status"] != "True" || c["lastTransitionTime"] != "2026-01-02T03:04:05Z" {
		t.Errorf("Ready condition = %v", c)
	}
}

func TestReconcileKeepsTransitionTime(t *testing.T) {
	old := map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z",
	}}}
	resp := Reconcile(widget(1, map[string]any{}, old))
	c := resp.Status["conditions"].([]any)[0].(map[string]any)
	if c["lastTransitionTime"] != "2025-01-01T00:00:00Z" {
		t.Errorf("lastTransitionTime changed to %v although status did not", c["lastTransitionTime"])
	}
	if resp.Status["summary"] != "1 x grey" {
		t.Errorf("defaults not applied: summary = %v", resp.Status["summary"])
	}
}

func TestReconcileInvalidIsTerminal(t *testing.T) {
	resp := Reconcile(widget(2, map[string]any{"size": float64(MaxSize + 1)}, nil))
	if resp.Error == nil || !resp.Error.Terminal {
		t.Fatalf("want terminal error, got %+v", resp.Error)
	}
	c := resp.Status["conditions"].([]any)[0].(map[string]any)
	if c["status"] != "False" || c["reason"] != "InvalidSpec" {
		t.Errorf("Ready condition = %v", c)
	}
	if logs := guest.TakeLogs(); len(logs) == 0 {
		t.Errorf("expected a warning log line")
	}
}

// spin is FNV-1a's step over the round numbers: each round changes the hash, so
// that the work -X main.Work sets cannot be skipped.
func TestSpinHashesEachRound(t *testing.T) {
	const offset, prime = uint64(14695981039346656037), uint64(1099511628211)
	if got := spin(0); got != offset {
		t.Errorf("spin(0) = %d, want the offset basis %d", got, offset)
	}
	want := offset
	for i := range 3 {
		want = (want ^ uint64(i)) * prime
	}
	if got := spin(3); got != want {
		t.Errorf("spin(3) = %d, want %d", got, want)
	}
	if spin(1000) == spin(1001) {
		t.Error("spin(1000) = spin(1001): a round changed nothing")
	}
}
