package decode

import (
	"math"
	"testing"
)

func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{float64(3), 3, true}, {int64(-4), -4, true}, {7, 7, true}, {nil, 0, true},
		{1.5, 0, false}, {float64(1 << 63), 0, false}, {-float64(1 << 63), math.MinInt64, true},
		{math.NaN(), 0, false}, {math.Inf(1), 0, false}, {"3", 0, false}, {true, 0, false},
	} {
		got, err := Int64(c.v, "n")
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Int64(%v) = %d, %v; want %d, ok %v", c.v, got, err, c.want, c.ok)
		}
	}
	if _, err := Int32(float64(math.MaxInt32+1), "p"); err == nil || err.Error() != "p: want a 32-bit integer, got the number 2.147483648e+09" {
		t.Errorf("Int32 overflow: %v", err)
	}
	if f, err := Float64(2, "f"); err != nil || f != 2 {
		t.Errorf("Float64(2) = %v, %v", f, err)
	}
	long := "0123456789012345678901234567890123456789tail"
	if _, err := Bool(long, "b"); err == nil || err.Error() != `b: want a boolean, got a string "0123456789012345678901234567890123456789..."` {
		t.Errorf("a long string is cut in the error: %v", err)
	}
}

func TestComposites(t *testing.T) {
	p, err := Ptr(nil, "p", String)
	if p != nil || err != nil {
		t.Errorf("Ptr(nil) = %v, %v", p, err)
	}
	if p, err := Ptr("x", "p", String); err != nil || *p != "x" {
		t.Errorf("Ptr(x) = %v, %v", p, err)
	}
	if _, err := Slice(map[string]any{}, "s", String); err == nil || err.Error() != "s: want an array, got an object" {
		t.Errorf("Slice of an object: %v", err)
	}
	if _, err := Map(map[string]any{"k": 1.0}, "m", String); err == nil || err.Error() != "m.k: want a string, got the number 1" {
		t.Errorf("Map of numbers: %v", err)
	}
	if m, err := Map(nil, "m", String); m != nil || err != nil {
		t.Errorf("Map(nil) = %v, %v", m, err)
	}
	if c, err := Condition(map[string]any{"type": "Ready", "status": "True", "observedGeneration": 2.0}, "c"); err != nil || c.Type != "Ready" || c.ObservedGeneration != 2 {
		t.Errorf("Condition = %+v, %v", c, err)
	}
}
