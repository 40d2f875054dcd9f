package jsontree

import (
	"reflect"
	"testing"
)

// FuzzSkip: the scanner never panics, accepts every value Decode accepts
// and ends where it ends, and Members and Elements rebuild the same tree
// from the raw parts as Decode builds from the whole.
func FuzzSkip(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		end, serr := Skip(data, 0)
		want, err := Decode(data)
		if err != nil {
			return // Skip checks syntax only: it may accept what Decode refuses
		}
		if serr != nil {
			t.Fatalf("%q: Decode accepts, Skip refuses: %v", data, serr)
		}
		d := decoder{data: data, pos: end}
		d.space()
		if d.pos != len(data) {
			t.Fatalf("%q: Skip ended at %d, want the end of the value", data, end)
		}
		if got := rebuild(t, data); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: rebuilt %#v, Decode %#v", data, got, want)
		}
	})
}

// rebuild decodes data through Members and Elements down to the leaves.
func rebuild(t *testing.T, data []byte) any {
	d := decoder{data: data}
	d.space()
	switch data[d.pos] {
	case '{':
		m := map[string]any{}
		if err := Members(data, func(k []byte, escaped bool, v []byte) bool {
			key := string(k)
			if escaped {
				var err error
				if key, err = Key(k); err != nil {
					t.Fatalf("key %q: %v", k, err)
				}
			}
			m[key] = rebuild(t, v)
			return true
		}); err != nil {
			t.Fatalf("%q: Members: %v", data, err)
		}
		return m
	case '[':
		a := []any{}
		if err := Elements(data, func(e []byte) bool { a = append(a, rebuild(t, e)); return true }); err != nil {
			t.Fatalf("%q: Elements: %v", data, err)
		}
		return a
	}
	v, err := Decode(data)
	if err != nil {
		t.Fatalf("leaf %q: %v", data, err)
	}
	return v
}

func TestMembersAndElementsRefuseOtherKinds(t *testing.T) {
	if err := Members([]byte(`[1]`), func([]byte, bool, []byte) bool { return true }); err == nil {
		t.Error("Members accepted an array")
	}
	if err := Elements([]byte(`{"a":1}`), func([]byte) bool { return true }); err == nil {
		t.Error("Elements accepted an object")
	}
	if err := Members([]byte(`{"a":1,"b":`), func([]byte, bool, []byte) bool { return true }); err == nil {
		t.Error("Members accepted a truncated object")
	}
}
