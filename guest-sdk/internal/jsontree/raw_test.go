package jsontree

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"
)

// FuzzIndex: the scanner never panics, accepts every document Decode
// accepts, and the values it locates decode, leaf by leaf, to the tree
// Decode builds. One Tape serves every input, as in a guest.
func FuzzIndex(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	var tape Tape
	f.Fuzz(func(t *testing.T, data []byte) {
		ierr := tape.Index(data)
		want, err := Decode(data)
		if err != nil {
			return // Index checks syntax only: it may accept what Decode refuses
		}
		if ierr != nil {
			t.Fatalf("%q: Decode accepts, Index refuses: %v", data, ierr)
		}
		got, next := rebuild(t, &tape, 0)
		if next != uint32(len(tape.Entries)) {
			t.Fatalf("%q: the document ends at entry %d of %d", data, next, len(tape.Entries))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: rebuilt %#v, Decode %#v", data, got, want)
		}
	})
}

// rebuild decodes the value at entry i down to its leaves and returns it
// with the entry after it.
func rebuild(t *testing.T, tape *Tape, i uint32) (any, uint32) {
	raw := tape.Raw(i)
	e := tape.Entries[i]
	switch raw[0] {
	case '{':
		m := map[string]any{}
		for c := i + 1; c < e.Next; c = tape.Entries[c].Next {
			key := string(tape.Key(c))
			if tape.Entries[c].KeyEscaped {
				var err error
				if key, err = Key(tape.Key(c)); err != nil {
					t.Fatalf("key %q: %v", tape.Key(c), err)
				}
			}
			m[key], _ = rebuild(t, tape, c)
		}
		return m, e.Next
	case '[':
		a := []any{}
		for c := i + 1; c < e.Next; c = tape.Entries[c].Next {
			v, _ := rebuild(t, tape, c)
			a = append(a, v)
		}
		return a, e.Next
	}
	if e.Next != i+1 {
		t.Fatalf("leaf %q: next %d, want %d", raw, e.Next, i+1)
	}
	v, err := Decode(raw)
	if err != nil {
		t.Fatalf("leaf %q: %v", raw, err)
	}
	return v, e.Next
}

func TestIndexRefusesMalformed(t *testing.T) {
	for _, in := range []string{`{"a":1,"b":`, `[1,]`, `{"a" 1}`, `{"a":1} x`, "\"\x01\"", `[`, `{"a":tru}`} {
		var tape Tape
		if err := tape.Index([]byte(in)); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}

// TestPlain8 checks the eight-byte test against the byte-by-byte rule on
// random words biased towards the bytes it must catch.
func TestPlain8(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff, 'a', 'v', '/', '[', ']', '{'}
	for i := 0; i < 1_000_000; i++ {
		var b [8]byte
		for j := range b {
			if r.IntN(2) == 0 {
				b[j] = pick[r.IntN(len(pick))]
			} else {
				b[j] = byte(r.IntN(256))
			}
		}
		want := true
		for _, c := range b {
			if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
				want = false
			}
		}
		if got := plain8(binary.LittleEndian.Uint64(b[:])); got != want {
			t.Fatalf("plain8(%q) = %v, want %v", b[:], got, want)
		}
	}
}
