package subset

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	got := map[string]any{
		"a": int64(1), "b": "x", "c": map[string]any{"d": 2.5, "e": "keep"},
		"l": []any{map[string]any{"k": "v", "extra": true}},
	}
	cases := []struct {
		want any
		diff string // "" means contained
	}{
		{map[string]any{"a": 1.0}, ""},                      // numbers compare by value
		{map[string]any{"c": map[string]any{"d": 2.5}}, ""}, // nested subset
		{map[string]any{"l": []any{map[string]any{"k": "v"}}}, ""},
		{map[string]any{"a": 2.0}, ".a: want 2, got 1"},
		{map[string]any{"z": "x"}, `.z: want "x", missing`},
		{map[string]any{"l": []any{}}, ".l: want [], got"},
		{map[string]any{"b": map[string]any{}}, ".b: want an object"},
		{map[string]any{"b": "y"}, `.b: want "y", got "x"`},
	}
	for _, c := range cases {
		d := Diff("", c.want, got)
		if c.diff == "" {
			if len(d) != 0 || !Contains(c.want, got) {
				t.Errorf("Diff(%v) = %v, want contained", c.want, d)
			}
			continue
		}
		if len(d) != 1 || !strings.HasPrefix(d[0], c.diff) || Contains(c.want, got) {
			t.Errorf("Diff(%v) = %v, want %q", c.want, d, c.diff)
		}
	}
}
