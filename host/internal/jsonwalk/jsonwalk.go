// Package jsonwalk finds the members and values of JSON text by index,
// without decoding it and without allocating.
//
// It is for bytes an API server sent: it checks structure (brackets,
// strings, separators), not the grammar of numbers and literals, so a
// caller that needs well-formed JSON must still decode what it keeps. Every
// function takes the index of a value's first byte (after whitespace) and
// returns the index after its last, or ok false when the bytes end early
// or are out of place.
package jsonwalk

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Value skips any value starting at i.
func Value(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return String(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, ok := String(b, j)
				if !ok {
					return 0, false
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default: // a number, true, false or null
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || IsSpace(c) {
				break
			}
			j++
		}
		if j == i {
			return 0, false
		}
		return j, true
	}
}

// String skips a string starting at its opening quote.
func String(b []byte, i int) (end int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// Object walks the object starting at i, calling member with the index of
// each key's opening quote, the key's text from between its quotes and the
// index of its value; member returns the index after the value.
func Object(b []byte, i int, member func(keyStart int, key []byte, at int) (end int, ok bool)) (end int, ok bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = Space(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		keyEnd, ok := String(b, i)
		if !ok {
			return 0, false
		}
		key := b[i+1 : keyEnd-1]
		j := Space(b, keyEnd)
		if j >= len(b) || b[j] != ':' {
			return 0, false
		}
		end, ok := member(i, key, Space(b, j+1))
		if !ok {
			return 0, false
		}
		if i, ok = Next(b, end, '}'); !ok || b[i-1] == '}' {
			return i, ok
		}
	}
}

// Array walks the array starting at i, calling element with the index of
// each element; element returns the index after it.
func Array(b []byte, i int, element func(at int) (end int, ok bool)) (end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	i = Space(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		end, ok := element(i)
		if !ok {
			return 0, false
		}
		if i, ok = Next(b, end, ']'); !ok || b[i-1] == ']' {
			return i, ok
		}
	}
}

// Next reads what follows an element that ends at end: a comma, after
// which it returns the index of the next element, or close, after which
// it returns the index past it (b[i-1] == close tells them apart).
func Next(b []byte, end int, close byte) (i int, ok bool) {
	i = Space(b, end)
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case ',':
		return Space(b, i+1), true
	case close:
		return i + 1, true
	}
	return 0, false
}

// Space returns the index of the first byte at or after i that is not
// whitespace.
func Space(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// IsSpace reports whether c is JSON whitespace.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Is reports whether a string's text, from between its quotes, is want.
// Only an escaped one (an API server never escapes the names of fields)
// allocates.
func Is(quoted []byte, want string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted) == want
	}
	return Unescape(quoted) == want
}

// HasSuffix is Is for the end of a string.
func HasSuffix(quoted []byte, suffix string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return bytes.HasSuffix(quoted, []byte(suffix))
	}
	return strings.HasSuffix(Unescape(quoted), suffix)
}

// Unescape returns a string's text, from between its quotes, with its
// escapes decoded, or "" if they do not decode.
func Unescape(quoted []byte) string {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted)
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, quoted...), '"'), &s) != nil {
		return ""
	}
	return s
}
