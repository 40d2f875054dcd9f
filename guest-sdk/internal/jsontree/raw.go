package jsontree

import "unicode/utf8"

// Lazy access: a scanner that finds the bounds of a JSON value without
// building it, so that a guest decodes only the parts of a request it reads.
// It checks the syntax of what it skips, but not the range of numbers or the
// validity of \u escapes, which only matter when a value is decoded.

// Skip returns the offset just past the JSON value that starts at
// data[pos] (leading spaces allowed), without decoding it.
func Skip(data []byte, pos int) (int, error) {
	d := decoder{data: data, pos: pos}
	d.space()
	if err := d.skip(0); err != nil {
		return 0, err
	}
	return d.pos, nil
}

// Members calls fn with the key and the raw value of each member of the
// JSON object in data, in order, until fn returns false. A key is passed
// as its raw bytes between the quotes; escaped reports whether it holds a
// backslash (decode it with Key). It returns an error when data is not an
// object or is malformed.
func Members(data []byte, fn func(key []byte, escaped bool, value []byte) bool) error {
	d := decoder{data: data}
	d.space()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return d.errorf("not a JSON object")
	}
	d.pos++
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		return d.end()
	}
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return d.errorf("want a string object key")
		}
		kstart := d.pos + 1
		escaped, err := d.skipString()
		if err != nil {
			return err
		}
		key := d.data[kstart : d.pos-1]
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return d.errorf("want ':' after object key")
		}
		d.pos++
		d.space()
		vstart := d.pos
		if err := d.skip(1); err != nil {
			return err
		}
		if !fn(key, escaped, d.data[vstart:d.pos]) {
			return nil
		}
		d.space()
		if d.pos >= len(d.data) {
			return d.errorf("unexpected end of object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			return d.end()
		default:
			return d.errorf("want ',' or '}' in object")
		}
	}
}

// Elements calls fn with the raw bytes of each element of the JSON array
// in data, in order, until fn returns false. It returns an error when data
// is not an array or is malformed.
func Elements(data []byte, fn func(elem []byte) bool) error {
	d := decoder{data: data}
	d.space()
	if d.pos >= len(d.data) || d.data[d.pos] != '[' {
		return d.errorf("not a JSON array")
	}
	d.pos++
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		return d.end()
	}
	for {
		d.space()
		start := d.pos
		if err := d.skip(1); err != nil {
			return err
		}
		if !fn(d.data[start:d.pos]) {
			return nil
		}
		d.space()
		if d.pos >= len(d.data) {
			return d.errorf("unexpected end of array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			return d.end()
		default:
			return d.errorf("want ',' or ']' in array")
		}
	}
}

// end checks that nothing but spaces follows the closing byte at d.pos.
func (d *decoder) end() error {
	d.pos++
	d.space()
	if d.pos != len(d.data) {
		return d.errorf("unexpected data after the top-level value")
	}
	return nil
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

func (d *decoder) skip(depth int) error {
	if depth > maxDepth {
		return d.errorf("exceeded max depth")
	}
	if d.pos >= len(d.data) {
		return d.errorf("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		d.pos++
		d.space()
		if d.pos < len(d.data) && d.data[d.pos] == '}' {
			d.pos++
			return nil
		}
		for {
			d.space()
			if d.pos >= len(d.data) || d.data[d.pos] != '"' {
				return d.errorf("want a string object key")
			}
			if _, err := d.skipString(); err != nil {
				return err
			}
			d.space()
			if d.pos >= len(d.data) || d.data[d.pos] != ':' {
				return d.errorf("want ':' after object key")
			}
			d.pos++
			d.space()
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			d.space()
			if d.pos >= len(d.data) {
				return d.errorf("unexpected end of object")
			}
			switch d.data[d.pos] {
			case ',':
				d.pos++
			case '}':
				d.pos++
				return nil
			default:
				return d.errorf("want ',' or '}' in object")
			}
		}
	case c == '[':
		d.pos++
		d.space()
		if d.pos < len(d.data) && d.data[d.pos] == ']' {
			d.pos++
			return nil
		}
		for {
			d.space()
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			d.space()
			if d.pos >= len(d.data) {
				return d.errorf("unexpected end of array")
			}
			switch d.data[d.pos] {
			case ',':
				d.pos++
			case ']':
				d.pos++
				return nil
			default:
				return d.errorf("want ',' or ']' in array")
			}
		}
	case c == '"':
		_, err := d.skipString()
		return err
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.skipNumber()
	}
	return d.errorf("invalid character %q looking for beginning of value", d.data[d.pos])
}

// skipString moves past the string at d.pos (which is '"') and reports
// whether its raw bytes differ from its value: it holds an escape or
// invalid UTF-8.
func (d *decoder) skipString() (escaped bool, err error) {
	d.pos++
	start, high := d.pos, false
	for d.pos < len(d.data) {
		switch c := d.data[d.pos]; {
		case c == '"':
			d.pos++
			if high && !escaped && !utf8.Valid(d.data[start:d.pos-1]) {
				escaped = true // invalid bytes decode as U+FFFD
			}
			return escaped, nil
		case c >= utf8.RuneSelf:
			high = true
			d.pos++
		case c == '\\':
			escaped = true
			d.pos += 2
		case c < 0x20:
			return false, d.errorf("invalid control character in string")
		default:
			d.pos++
		}
	}
	return false, d.errorf("unexpected end of string")
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
		return d.errorf("invalid number")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return d.errorf("invalid number: no digits after '.'")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return d.errorf("invalid number: no digits in exponent")
		}
	}
	return nil
}
