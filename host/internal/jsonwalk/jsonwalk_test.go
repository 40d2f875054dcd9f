package jsonwalk

import (
	"strings"
	"testing"
)

// TestObject: members in order with their keys and value bytes, escapes
// and brackets inside strings skipped, and every malformed shape refused.
func TestObject(t *testing.T) {
	b := []byte(` {"a" : 1, "b\"}" :{"c":["]",{}]} ,"d":"x\\"}  `)
	var got []string
	end, ok := Object(b, Space(b, 0), func(_ int, key []byte, at int) (int, bool) {
		e, ok := Value(b, at)
		got = append(got, string(key)+"="+string(b[at:e]))
		return e, ok
	})
	want := []string{`a=1`, `b\"}={"c":["]",{}]}`, `d="x\\"`}
	if !ok || Space(b, end) != len(b) || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("members %q ok %v end %d", got, ok, end)
	}
	for _, bad := range []string{`{`, `{"a"}`, `{"a":1,}`, `{"a":1 "b":2}`, `{a:1}`, `[1]`, `{"a":"x}`, `{"a":{]`} {
		_, ok := Object([]byte(bad), 0, func(_ int, _ []byte, at int) (int, bool) { return Value([]byte(bad), at) })
		if ok {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestArray(t *testing.T) {
	b := []byte(`[ 1 , "a,]" ,{"x":[2]}, [] ]`)
	var got []string
	end, ok := Array(b, 0, func(at int) (int, bool) {
		e, ok := Value(b, at)
		got = append(got, string(b[at:e]))
		return e, ok
	})
	if !ok || end != len(b) || strings.Join(got, "|") != `1|"a,]"|{"x":[2]}|[]` {
		t.Fatalf("elements %q ok %v", got, ok)
	}
	if _, ok := Array([]byte(`[]`), 0, nil); !ok {
		t.Error("[] refused")
	}
	for _, bad := range []string{`[`, `[1,]`, `[1 2]`, `{}`, `[1}`} {
		if _, ok := Array([]byte(bad), 0, func(at int) (int, bool) { return Value([]byte(bad), at) }); ok {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestStrings(t *testing.T) {
	if !Is([]byte(`kind`), "kind") || !Is([]byte(`k\u0069nd`), "kind") || Is([]byte(`kinds`), "kind") {
		t.Error("Is")
	}
	if !HasSuffix([]byte(`WidgetList`), "List") || !HasSuffix([]byte(`WidgetLis\u0074`), "List") || HasSuffix([]byte(`List2`), "List") {
		t.Error("HasSuffix")
	}
	if Unescape([]byte(`a\"b`)) != `a"b` || Unescape([]byte(`bad\x`)) != "" {
		t.Error("Unescape")
	}
}
