package jsontree

import (
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Lazy access: a scanner that locates every value of a JSON document
// without decoding it, so that a guest decodes only the parts of a request
// it reads.
// It checks the syntax of what it skips, but not the range of numbers or the
// validity of \u escapes, which only matter when a value is decoded.

// Tape locates every value of one JSON document, in document order,
// without decoding any: entry 0 is the document, and the entries of a
// container's members or elements follow it, each followed by its own.
// Index fills it in one pass over the bytes with no recursion and, when
// the Tape is reused, no allocation.
type Tape struct {
	Data    []byte
	Entries []Entry
	stack   []uint32 // open containers while indexing
}

// Entry is one located value.
type Entry struct {
	Start, End       uint32 // the value's raw bytes: Data[Start:End]
	KeyStart, KeyEnd uint32 // an object member's raw key, between the quotes
	Next             uint32 // the entry after this value and everything in it
	KeyEscaped       bool   // the key's raw bytes differ from it (an escape, invalid UTF-8): decode it with Key
}

// Raw returns entry i's raw bytes.
func (t *Tape) Raw(i uint32) []byte { e := &t.Entries[i]; return t.Data[e.Start:e.End] }

// Key returns entry i's raw key bytes.
func (t *Tape) Key(i uint32) []byte { e := &t.Entries[i]; return t.Data[e.KeyStart:e.KeyEnd] }

// Index locates every value in data, which must hold exactly one JSON value
// (leading and trailing spaces allowed). It reuses t's memory.
func (t *Tape) Index(data []byte) error {
	t.Data, t.Entries, t.stack = data, t.Entries[:0], t.stack[:0]
	d := decoder{data: data}
	d.space()
	var keyStart, keyEnd uint32
	var keyEscaped bool
	for {
		// A value starts at d.pos.
		if d.pos >= len(data) {
			return d.errorAt("unexpected end of input")
		}
		i := uint32(len(t.Entries))
		t.Entries = append(t.Entries, Entry{Start: uint32(d.pos), KeyStart: keyStart, KeyEnd: keyEnd, KeyEscaped: keyEscaped})
		keyStart, keyEnd, keyEscaped = 0, 0, false
		open := false
		switch c := data[d.pos]; {
		case c == '{' || c == '[':
			if len(t.stack) >= maxDepth {
				return d.errorAt("exceeded max depth")
			}
			d.pos++
			d.space()
			if d.pos < len(data) && (data[d.pos] == '}' && c == '{' || data[d.pos] == ']' && c == '[') {
				d.pos++
				break
			}
			t.stack = append(t.stack, i)
			open = true
		case c == '"':
			if _, err := d.skipString(); err != nil {
				return err
			}
		case c == 't':
			if err := d.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := d.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := d.literal("null"); err != nil {
				return err
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if err := d.skipNumber(); err != nil {
				return err
			}
		default:
			return d.errorAt("invalid character " + strconv.QuoteRune(rune(c)) + " looking for beginning of value")
		}
		if !open {
			t.Entries[i].End, t.Entries[i].Next = uint32(d.pos), i+1
		}
		// Close what ends here, then find where the next value starts.
		for {
			if !open {
				d.space()
			}
			if len(t.stack) == 0 {
				if d.pos != len(data) {
					return d.errorAt("unexpected data after the top-level value")
				}
				return nil
			}
			top := t.stack[len(t.stack)-1]
			object := data[t.Entries[top].Start] == '{'
			if !open { // after a member or an element: ',' or the close
				if d.pos >= len(data) {
					return d.errorAt("unexpected end of object or array")
				}
				if c := data[d.pos]; c == '}' && object || c == ']' && !object {
					d.pos++
					t.Entries[top].End, t.Entries[top].Next = uint32(d.pos), uint32(len(t.Entries))
					t.stack = t.stack[:len(t.stack)-1]
					continue
				} else if c != ',' {
					if object {
						return d.errorAt("want ',' or '}' in object")
					}
					return d.errorAt("want ',' or ']' in array")
				}
				d.pos++
				d.space()
			}
			if object { // a member's key and ':'
				if d.pos >= len(data) || data[d.pos] != '"' {
					return d.errorAt("want a string object key")
				}
				ks := d.pos + 1
				esc, err := d.skipString()
				if err != nil {
					return err
				}
				keyStart, keyEnd, keyEscaped = uint32(ks), uint32(d.pos-1), esc
				d.space()
				if d.pos >= len(data) || data[d.pos] != ':' {
					return d.errorAt("want ':' after object key")
				}
				d.pos++
				d.space()
			}
			break
		}
	}
}

// Key decodes a raw object key, as Members passes it, with its escapes.
func Key(raw []byte) (string, error) {
	b := make([]byte, 0, len(raw)+2)
	b = append(b, '"')
	b = append(b, raw...)
	b = append(b, '"')
	d := decoder{data: b}
	return d.string()
}

// skipString moves past the string at d.pos (which is '"') and reports
// whether its raw bytes differ from its value: it holds an escape or
// invalid UTF-8.
func (d *decoder) skipString() (escaped bool, err error) {
	// Locals, not d's fields: Go's wasm code keeps them out of memory.
	data, pos := d.data, d.pos+1
	start, high := pos, false
	for pos < len(data) {
		// Eight plain bytes at a time: none is '"', '\\', a control
		// character or a non-ASCII byte. One unaligned 64-bit load, which
		// wasm and every Go target allow.
		for pos+8 <= len(data) && plain8(*(*uint64)(unsafe.Pointer(&data[pos]))) {
			pos += 8
		}
		if pos >= len(data) {
			break
		}
		switch c := data[pos]; {
		case c == '"':
			pos++
			d.pos = pos
			if high && !escaped && !utf8.Valid(data[start:pos-1]) {
				escaped = true // invalid bytes decode as U+FFFD
			}
			return escaped, nil
		case c >= utf8.RuneSelf:
			high = true
			pos++
		case c == '\\':
			escaped = true
			pos += 2
		case c < 0x20:
			d.pos = pos
			return false, d.errorAt("invalid control character in string")
		default:
			pos++
		}
	}
	d.pos = pos
	return false, d.errorAt("unexpected end of string")
}

// plain8 reports whether none of the eight bytes packed in x (in either
// byte order) is '"', '\\',
// below 0x20 or above 0x7f (the classic SWAR tests for a zero byte and a
// byte below n).
func plain8(x uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	special := (q-lo) & ^q | (bs-lo) & ^bs | (x-lo*0x20) & ^x | x
	return special&hi == 0
}

func (d *decoder) skipNumber() error {
	if d.data[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.pos < len(d.data) && d.data[d.pos] == '0' {
		d.pos++
	} else if digits() == 0 {
		return d.errorAt("invalid number")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return d.errorAt("invalid number: no digits after '.'")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return d.errorAt("invalid number: no digits in exponent")
		}
	}
	return nil
}
