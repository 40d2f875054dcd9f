// Package subset compares decoded JSON values: does one contain another?
// The host uses it to decide whether a desired child would change anything,
// and `operator test` to compare responses with expectations.
package subset

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Diff reports where got does not contain want: every key of a wanted map
// must be present and match; lists must have the same length and match
// element by element; numbers compare by value.
func Diff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object %s, got %s", path, compact(want), compact(got))}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var diff []string
		for _, k := range keys {
			gv, present := g[k]
			if !present {
				diff = append(diff, fmt.Sprintf("%s.%s: want %s, missing", path, k, compact(w[k])))
				continue
			}
			diff = append(diff, Diff(path+"."+k, w[k], gv)...)
		}
		return diff
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %s, got %s", path, compact(want), compact(got))}
		}
		var diff []string
		for i := range w {
			diff = append(diff, Diff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diff
	}
	if wn, ok := number(want); ok {
		if gn, ok := number(got); ok && wn == gn {
			return nil
		}
	} else if want == got {
		return nil
	}
	return []string{fmt.Sprintf("%s: want %s, got %s", path, compact(want), compact(got))}
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// Contains reports whether got contains want (Diff is empty).
func Contains(want, got any) bool { return len(Diff("", want, got)) == 0 }

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
