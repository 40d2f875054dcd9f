package format

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type panicky struct{}

func (panicky) String() string { panic("boom") }

var verbs = []string{"%v", "%s", "%d", "%q", "%x", "%X", "%t", "%f", "%g", "%e", "%E", "%G", "%b", "%o", "%O", "%c", "%U", "%T", "%w",
	"%5d", "%-5d|", "%05d", "%+d", "% d", "%.3d", "%8.3f", "%-8.2f|", "%08.3f", "%+.2e", "%.0f", "%.10g", "%#x", "%#o", "%#q", "%+q",
	"%10s|", "%-10s|", "%.2s", "%5.1s|", "%x", "% x", "%# x", "%5t", "%05s", "%6v", "%-6v|", "%.1v", "%10.3v", "%+v", "%#b", "%*d", "%.*f", "%-*d|"}

var values = []any{
	nil, "", "hello", "héllo wörld", "quote\"me\n", []byte("bytes"), true, false,
	0, 1, -1, 42, math.MaxInt64, math.MinInt64, int8(-7), int16(300), int32(-70000), int64(1 << 40),
	uint(7), uint8(255), uint16(65535), uint32(1 << 31), uint64(math.MaxUint64), uintptr(12),
	0.0, 1.0, -1.5, 3.14159, 1e6, 1e21, 1e-7, 123456789.0, 0.000123, float32(2.5), math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1),
	errors.New("an error"), stringer{"a stringer"}, fmt.Errorf("wrapped: %w", errors.New("inner")),
	map[string]any{"b": 2.0, "a": "x", "c": []any{1.0, "two", nil, true}, "d": map[string]any{"z": nil}},
	map[string]string{"k": "v", "a": "b"}, []any{}, []any{"a", 1.5, map[string]any{}}, []string{"x", "y"},
	[]map[string]any{{"a": 1.0}}, []int{1, 2, 3}, []int64{-1}, []float64{0.5, 1e22}, map[string]any{},
}

// TestSprintf compares Sprintf with fmt.Sprintf for every verb on every
// value the package supports.
func TestSprintf(t *testing.T) {
	n := 0
	for _, verb := range verbs {
		for _, v := range values {
			args := []any{v}
			if verb == "%*d" || verb == "%.*f" || verb == "%-*d|" {
				args = []any{7, v}
			}
			want := fmt.Sprintf(verb, args...)
			if verb == "%w" {
				want = fmt.Errorf(verb, args...).Error()
			}
			got := Sprintf(verb, args...)
			if methodOnly(v, verb) {
				want = "%!" + strings.TrimSuffix(verb, "|")[len(strings.TrimSuffix(verb, "|"))-1:] + "(" + fmt.Sprintf("%T", v) + "=" + fmt.Sprint(v) + ")"
				if strings.HasSuffix(verb, "|") {
					want += "|"
				}
			}
			if strings.Contains(verb, "#") && hasFloat(v) {
				continue // fmt's # forms for floats are not supported
			}
			if got != want {
				t.Errorf("Sprintf(%q, %#v) = %q, fmt says %q", verb, args, got, want)
			}
			n++
		}
	}
	t.Logf("%d comparisons", n)
}

// methodOnly reports a value whose Error or String method fmt does not call
// for the verb: fmt prints its fields, which takes reflect; Sprintf reports
// a bad verb with the method's text.
func methodOnly(v any, verb string) bool {
	switch v.(type) {
	case error, fmt.Stringer:
		verb = strings.TrimSuffix(verb, "|")
		switch verb[len(verb)-1] {
		case 'v', 's', 'x', 'X', 'q', 'T':
			return false
		case 'w':
			_, isErr := v.(error)
			return !isErr
		}
		return true
	}
	return false
}

func TestSprintfArguments(t *testing.T) {
	for _, c := range []struct {
		format string
		args   []any
	}{
		{"no verbs", nil},
		{"%d %s", []any{1}},
		{"%d", []any{1, "extra", nil}},
		{"100%%", nil},
		{"%", nil},
		{"%!", nil},
		{"trailing %5", nil},
		{"%[1]d", []any{1}}, // unsupported: must not panic
		{"%*d", []any{"x", 3}},
		{"%.*d", []any{-2, 3}},
		{"%-*d|", []any{-4, 3}},
		{"ünïcode %s ✓", []any{"ok"}},
		{"%v", []any{panicky{}}},
	} {
		got := Sprintf(c.format, c.args...)
		want := fmt.Sprintf(c.format, c.args...)
		if c.format == "%[1]d" {
			continue // only that it did not panic
		}
		if got != want {
			t.Errorf("Sprintf(%q, %v) = %q, fmt says %q", c.format, c.args, got, want)
		}
	}
}

func TestSprint(t *testing.T) {
	for _, args := range [][]any{
		{}, {"a", "b"}, {1, 2}, {"a", 1, 2, "b", 3.5}, {nil, nil}, {errors.New("e"), "x"}, {map[string]any{"a": 1.0}, []any{"x"}},
	} {
		if got, want := Sprint(args...), fmt.Sprint(args...); got != want {
			t.Errorf("Sprint(%v) = %q, fmt says %q", args, got, want)
		}
	}
}

type point struct{ X, Y int }

// TestTypesWithoutReflect: %T names every type as fmt does; a value that
// needs reflect to print says so instead of printing something wrong.
func TestTypesWithoutReflect(t *testing.T) {
	for _, v := range []any{point{1, 2}, &point{}, []point{}, map[int]string{}, make(chan int), func() {}, stringer{}, values} {
		if got, want := Sprintf("%T", v), fmt.Sprintf("%T", v); got != want {
			t.Errorf("%%T: got %q, fmt says %q", got, want)
		}
	}
	if got, want := Sprintf("at %v!", point{1, 2}), "at %!v(format.point)!"; got != want {
		t.Errorf("a struct: got %q, want %q", got, want)
	}
	if got, want := Sprintf("%v", []any{point{}}), "[%!v(format.point)]"; got != want {
		t.Errorf("a struct in a list: got %q, want %q", got, want)
	}
}

func FuzzSprintf(f *testing.F) {
	f.Add("%d items, %s", int64(3), "x", 1.5)
	f.Add("%08.3f|%-5s|%+q", int64(-9), "héllo", math.Copysign(0, -1))
	f.Fuzz(func(t *testing.T, format string, n int64, s string, x float64) {
		args := []any{n, s, x, n, s}
		if strings.ContainsAny(format, "[#") {
			return // argument indexes and fmt's # forms for floats are not supported
		}
		if want, got := fmt.Sprintf(format, args...), Sprintf(format, args...); got != want {
			t.Errorf("Sprintf(%q, %v) = %q, fmt says %q", format, args, got, want)
		}
	})
}

func hasFloat(v any) bool {
	switch x := v.(type) {
	case float64, float32, []float64:
		return true
	case []any:
		for _, e := range x {
			if hasFloat(e) {
				return true
			}
		}
	case []map[string]any:
		for _, e := range x {
			if hasFloat(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasFloat(e) {
				return true
			}
		}
	}
	return false
}
