// Package jsontree decodes and encodes JSON as the generic Go tree that
// encoding/json produces for an `any`: map[string]any, []any, string,
// float64, bool and nil. It exists because encoding/json's byte-by-byte
// scanner is slow in WebAssembly, where every indirect call is expensive;
// this is a recursive-descent parser with no reflection. FuzzEquivalence
// checks it against encoding/json.
package jsontree

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/format"
)

// Decode parses one JSON value; trailing non-space bytes are an error.
func Decode(data []byte) (any, error) {
	d := decoder{data: data}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.pos != len(d.data) {
		return nil, d.errorAt("unexpected data after the top-level value")
	}
	return v, nil
}

const maxDepth = 10000 // as encoding/json

type decoder struct {
	data []byte
	pos  int
}

func (d *decoder) errorAt(msg string) error {
	return errors.New("json: offset " + strconv.Itoa(d.pos) + ": " + msg)
}

func (d *decoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.errorAt("exceeded max depth")
	}
	if d.pos >= len(d.data) {
		return nil, d.errorAt("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.string()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errorAt("invalid character " + strconv.QuoteRune(rune(d.data[d.pos])) + " looking for beginning of value")
}

func (d *decoder) literal(lit string) error {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		return d.errorAt("invalid literal, want " + lit)
	}
	d.pos += len(lit)
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	d.pos++ // {
	m := map[string]any{}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return m, nil
	}
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.errorAt("want a string object key")
		}
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.errorAt("want ':' after object key")
		}
		d.pos++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.errorAt("unexpected end of object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return m, nil
		default:
			return nil, d.errorAt("want ',' or '}' in object")
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	d.pos++ // [
	a := []any{}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return a, nil
	}
	for {
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.errorAt("unexpected end of array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return a, nil
		default:
			return nil, d.errorAt("want ',' or ']' in array")
		}
	}
}

func (d *decoder) number() (any, error) {
	start := d.pos
	if err := d.skipNumber(); err != nil {
		return nil, err
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.pos]), 64)
	if err != nil {
		return nil, d.errorAt("number " + string(d.data[start:d.pos]) + " out of range")
	}
	return f, nil
}

// string parses a string at d.pos (which is '"').
func (d *decoder) string() (string, error) {
	d.pos++
	start := d.pos
	// Fast path: no escapes, valid UTF-8, no control characters.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := d.data[start:d.pos]
			d.pos++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return string([]rune(string(s))), nil // invalid bytes become U+FFFD, as encoding/json
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.pos++
	}
	d.pos = start
	var b []byte
	for {
		if d.pos >= len(d.data) {
			return "", d.errorAt("unexpected end of string")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			if !utf8.Valid(b) {
				return string([]rune(string(b))), nil
			}
			return string(b), nil
		case c < 0x20:
			return "", d.errorAt("invalid control character in string")
		case c != '\\':
			b = append(b, c)
			d.pos++
			continue
		}
		d.pos++ // backslash
		if d.pos >= len(d.data) {
			return "", d.errorAt("unexpected end of string escape")
		}
		e := d.data[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errorAt("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
					save := d.pos
					d.pos += 2
					if x, ok := d.hex4(); ok {
						if dec := utf16.DecodeRune(r, x); dec != utf8.RuneError {
							r2 = dec
						} else {
							d.pos = save
						}
					} else {
						return "", d.errorAt("invalid \\u escape")
					}
				}
				r = r2
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", d.errorAt("invalid escape character " + strconv.QuoteRune(rune(e)))
		}
	}
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.data)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	d.pos += 4
	return r, true
}

// ErrUnsupported reports a value Append cannot encode; errors.Is finds it
// in an *UnsupportedError.
var ErrUnsupported = errors.New("json: unsupported value")

// UnsupportedError is a value of a type Append does not encode, with no
// fallback set, or a float that JSON cannot hold.
type UnsupportedError struct {
	Type  string // as fmt's %T writes it
	Value string // for a float: NaN, +Inf or -Inf
}

func (e *UnsupportedError) Error() string {
	if e.Value != "" {
		return "json: unsupported value: " + e.Value
	}
	return "json: cannot encode a value of type " + e.Type + ": the guest SDK encodes maps, slices, strings, " +
		"numbers, booleans and values with an AppendJSON method (package k8s's types); build the value from those, " +
		"or import _ \"github.com/wasmreconcile/wasmreconcile/guest-sdk/stdjson\" to encode other types with " +
		"encoding/json (it makes the module about 1.2 MB larger)"
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// fallback encodes what Append does not; package stdjson sets it.
var fallback func(v any) ([]byte, error)

// SetFallback makes Append encode the values of the types it does not
// handle with f, such as json.Marshal; nil restores the default, an
// *UnsupportedError. It is for package stdjson's init and for tests: it is
// not safe to call while Append runs.
func SetFallback(f func(v any) ([]byte, error)) { fallback = f }

// Appender is a value that encodes itself, such as the typed objects of
// package k8s. AppendJSON appends exactly one JSON value to b, written as
// Append writes (object keys sorted, encoding/json's escapes), and returns
// the extended buffer; on an error, the returned buffer is undefined.
type Appender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// Append encodes v, which must be made of map[string]any, []any,
// []map[string]any, map[string]string, string, bool, nil, float64, float32,
// the integer types and Appenders, appending to b. Object keys are sorted,
// as encoding/json sorts them.
func Append(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, x), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case float64:
		return appendFloat(b, x)
	case float32:
		return appendFloat(b, float64(x))
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case map[string]any:
		var small [16]string // most objects: no allocation for the keys
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = Append(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case map[string]string:
		return AppendStringMap(b, x), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = Append(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case []map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = Append(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case Appender: // after the concrete types, which pay nothing for it
		return x.AppendJSON(b)
	}
	if fallback != nil {
		out, err := fallback(v)
		if err != nil {
			return nil, err
		}
		return append(b, out...), nil
	}
	return nil, &UnsupportedError{Type: format.TypeName(v)}
}

// AppendStringMap appends m as a JSON object with sorted keys; nil is
// {}, unlike encoding/json's null, as Append writes a nil map[string]any.
func AppendStringMap(b []byte, m map[string]string) []byte {
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// AppendString appends s quoted as encoding/json quotes it, with its
// HTML-safe escapes.
func AppendString(b []byte, s string) []byte { return appendString(b, s) }

// appendFloat formats like encoding/json.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, &UnsupportedError{Type: "float64", Value: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

const hex = "0123456789abcdef"

// appendString quotes s like encoding/json, including its HTML-safe escapes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
