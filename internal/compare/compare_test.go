package compare

import (
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

func ok(status map[string]any, children ...map[string]any) Answer {
	return Answer{Response: &abi.Response{Status: status}, Children: children, Kind: protocol.Success}
}

func cm(ns, name string, data map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": name}, "data": data}
}

func TestCompare(t *testing.T) {
	base := ok(map[string]any{"replicas": int64(3), "conditions": []any{map[string]any{"type": "Ready", "message": "v1"}}},
		cm("ns", "web", map[string]any{"k": "a"}))
	for _, c := range []struct {
		name      string
		candidate Answer
		allowed   []string
		want      Verdict
		lines     []string // each must be one of the lines, in order
	}{
		{"same, numbers of other types", ok(map[string]any{"replicas": float64(3), "conditions": []any{map[string]any{"type": "Ready", "message": "v1"}}},
			cm("ns", "web", map[string]any{"k": "a"})), nil, Agree, nil},
		{"status field", ok(map[string]any{"replicas": int64(4), "conditions": []any{map[string]any{"type": "Ready", "message": "v2"}}},
			cm("ns", "web", map[string]any{"k": "a"})), nil, Differ,
			[]string{`status.conditions[0].message: "v1" → "v2"`, "status.replicas: 3 → 4"}},
		{"allowed status field", ok(map[string]any{"replicas": int64(3), "conditions": []any{map[string]any{"type": "Ready", "message": "v2"}}},
			cm("ns", "web", map[string]any{"k": "a"})), []string{"status.conditions[*].message"}, Agree, nil},
		{"child data", ok(base.Response.Status, cm("ns", "web", map[string]any{"k": "b"})), nil, Differ,
			[]string{`children[ConfigMap ns/web].data.k: "a" → "b"`}},
		{"allowed child subtree", ok(base.Response.Status, cm("ns", "web", map[string]any{"k": "b"})), []string{"children[*].data"}, Agree, nil},
		{"child missing and added", ok(base.Response.Status, cm("ns", "other", nil)), nil, Differ,
			[]string{"children[ConfigMap ns/other]: (absent) → a child", "children[ConfigMap ns/web]: a child → (absent)"}},
		{"candidate fails", Answer{Kind: protocol.FuelExhausted, Err: "fuel exhausted"}, nil, CandidateError,
			[]string{"outcome: Success → FuelExhausted (fuel exhausted)"}},
	} {
		v, lines := Compare(base, c.candidate, c.allowed)
		if v != c.want {
			t.Errorf("%s: verdict %v, want %v (%q)", c.name, v, c.want, lines)
			continue
		}
		if strings.Join(lines, "\n") != strings.Join(c.lines, "\n") {
			t.Errorf("%s: lines\n%s\nwant\n%s", c.name, strings.Join(lines, "\n"), strings.Join(c.lines, "\n"))
		}
	}

	// Failures: the same kind agrees; the serving failing alone differs.
	failed := Answer{Kind: protocol.GuestTrapped, Err: "unreachable"}
	if v, _ := Compare(failed, Answer{Kind: protocol.GuestTrapped, Err: "unreachable at another offset"}, nil); v != Agree {
		t.Errorf("both trapping: %v", v)
	}
	if v, lines := Compare(failed, base, nil); v != Differ || !strings.HasPrefix(lines[0], "outcome: GuestTrapped (unreachable) → Success") {
		t.Errorf("only the serving trapping: %v %q", v, lines)
	}

	// Events are a multiset; order does not matter.
	e1, e2 := abi.Event{Type: "Normal", Reason: "A", Message: "x"}, abi.Event{Type: "Normal", Reason: "B", Message: "y"}
	a, b := ok(nil), ok(nil)
	a.Response.Events, b.Response.Events = []abi.Event{e1, e2}, []abi.Event{e2, e1}
	if v, _ := Compare(a, b, nil); v != Agree {
		t.Errorf("events reordered: %v", v)
	}
	b.Response.Events = []abi.Event{e2}
	if v, lines := Compare(a, b, nil); v != Differ || !strings.Contains(lines[0], `Normal A "x" only from the serving version (1)`) {
		t.Errorf("event missing: %v %q", v, lines)
	}
	if v, _ := Compare(a, b, []string{"events"}); v != Agree {
		t.Errorf("events allowed: %v", v)
	}
}

func TestAllowed(t *testing.T) {
	for _, p := range []string{"status", "status.conditions[*].lastTransitionTime", "children[*].metadata.annotations", "events", "requeueAfterSeconds"} {
		if err := Allowed([]string{p}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"", "spec.x", "status..x", "metadata"} {
		if err := Allowed([]string{p}); err == nil {
			t.Errorf("%q accepted", p)
		}
	}
	if got := strings.Join(splitPattern("children[ConfigMap ns/web].data.k"), "|"); got != "children|ConfigMap ns/web|data|k" {
		t.Errorf("split: %s", got)
	}
	if got := strings.Join(splitPattern("status.conditions[0].message"), "|"); got != "status|conditions|0|message" {
		t.Errorf("split: %s", got)
	}
}
