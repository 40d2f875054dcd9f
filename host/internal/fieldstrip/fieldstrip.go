// Package fieldstrip removes metadata.managedFields from the JSON the API
// server sends to the operator's cache, before it is decoded.
//
// The cache drops managedFields from every object it stores (guests never
// see them and the host never reads them), but an unstructured object is
// decoded in full first: its managedFields, nested maps of "f:" keys, are
// often the larger half of a small object and made decoding a watch event
// three times as costly as decoding the same object without them
// (docs/benchmarks.md). Cutting them out of the bytes costs one pass over
// the bytes and no allocation per field.
//
// Only these members are removed, and only in a body whose Content-Type is
// application/json:
//
//   - metadata.managedFields of the body's object;
//   - items[*].metadata.managedFields when the body is a list (its kind ends
//     in "List");
//   - object.metadata.managedFields when the body is a watch event (a "type"
//     member and no "apiVersion" or "kind").
//
// Anything else, such as a custom resource's own spec.template.metadata or a
// top-level field named "items" or "object" in a kind that is not a list or
// an event, passes through as it came. Bytes that are not well-formed JSON
// pass through unchanged, so the decoder reports exactly what it would have.
package fieldstrip

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
)

// WrapTransport returns rt with managedFields stripped from JSON response
// bodies, as described in the package comment. It suits
// rest.Config.Wrap. Requests are sent as they are.
func WrapTransport(rt http.RoundTripper) http.RoundTripper { return transport{rt} }

type transport struct{ inner http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.inner.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	if resp.Header.Get("Content-Encoding") != "" { // compressed by a layer that did not undo it
		return resp, nil
	}
	if mt, _, perr := mime.ParseMediaType(resp.Header.Get("Content-Type")); perr != nil || mt != "application/json" {
		return resp, nil
	}
	resp.Body = NewReader(resp.Body)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp, nil
}

// readSize is how much NewReader's reader asks its source for at once.
const readSize = 32 << 10

// NewReader returns a reader of src's JSON values, each stripped by Strip as
// soon as it is complete: a watch stream's events pass one by one, never
// held back for the next. Closing it closes src.
func NewReader(src io.ReadCloser) io.ReadCloser { return &reader{src: src} }

type reader struct {
	src io.ReadCloser

	in    []byte // read, not yet emitted; a value starts at 0
	scan  int    // in[:scan] has been scanned
	depth int
	str   bool // inside a string
	esc   bool // after a backslash in a string
	raw   bool // not JSON values: pass the rest through

	out  []byte // out[sent:] is ready to hand out; the buffer is reused
	sent int
	err  error // the source's error, returned once in and out are drained
}

func (r *reader) Close() error { return r.src.Close() }

func (r *reader) Read(p []byte) (int, error) {
	for r.sent == len(r.out) {
		r.out, r.sent = r.out[:0], 0
		if r.err != nil {
			if len(r.in) == 0 {
				return 0, r.err
			}
			// An incomplete value: the decoder says what is wrong.
			r.out, r.in = append(r.out, r.in...), r.in[:0]
			break
		}
		if cap(r.in)-len(r.in) < readSize {
			grown := make([]byte, len(r.in), 2*cap(r.in)+readSize)
			copy(grown, r.in)
			r.in = grown
		}
		n, err := r.src.Read(r.in[len(r.in):cap(r.in)])
		r.in = r.in[:len(r.in)+n]
		r.err = err
		r.frame()
	}
	n := copy(p, r.out[r.sent:])
	r.sent += n
	return n, nil
}

// structural marks the bytes that matter to framing outside a string.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// frame moves every complete value (and the whitespace before it) from in
// to out, stripped.
func (r *reader) frame() {
	start, i := 0, r.scan
	for i < len(r.in) && !r.raw {
		if r.esc { // the byte after a backslash that ended the last read
			r.esc = false
			i++
			continue
		}
		if r.str {
			j := bytes.IndexByte(r.in[i:], '"')
			if j < 0 {
				j = len(r.in) - i
			}
			if k := bytes.IndexByte(r.in[i:i+j], '\\'); k >= 0 { // an escape first
				i += k
				if i+1 == len(r.in) { // the escaped byte is in the next read
					r.esc = true
					i++
					break
				}
				i += 2
				continue
			}
			i += j
			if i == len(r.in) {
				break
			}
			r.str = false
			i++
			continue
		}
		if r.depth > 0 {
			for i < len(r.in) && !structural[r.in[i]] {
				i++
			}
			if i == len(r.in) {
				break
			}
		}
		switch c := r.in[i]; {
		case c == '"':
			r.str = true
			if r.depth == 0 { // a string at the top: not what an API server sends
				r.raw = true
			}
		case c == '{' || c == '[':
			r.depth++
		case c == '}' || c == ']':
			if r.depth == 0 {
				r.raw = true
				break
			}
			r.depth--
			if r.depth == 0 {
				r.out = appendStripped(r.out, r.in[start:i+1])
				start = i + 1
			}
		case r.depth == 0 && !isSpace(c): // a number or literal at the top
			r.raw = true
		}
		i++
	}
	if r.raw {
		r.out = append(r.out, r.in[start:]...)
		r.in, r.scan = r.in[:0], 0
		return
	}
	if r.depth == 0 && !r.str && !r.esc { // whitespace after the last value goes out now
		r.out = append(r.out, r.in[start:]...)
		start = len(r.in)
	}
	rest := copy(r.in, r.in[start:])
	r.in = r.in[:rest]
	r.scan = i - start
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Strip returns v, one JSON value, without the managedFields members the
// package comment lists. It returns v itself when there are none, or when v
// is not well-formed JSON.
func Strip(v []byte) []byte {
	p := parser{b: v}
	cuts, ok := p.root()
	if !ok || len(cuts) == 0 {
		return v
	}
	return appendCut(make([]byte, 0, len(v)), v, cuts)
}

// appendStripped appends Strip(v) to dst.
func appendStripped(dst, v []byte) []byte {
	p := parser{b: v}
	cuts, ok := p.root()
	if !ok {
		return append(dst, v...)
	}
	return appendCut(dst, v, cuts)
}

func appendCut(dst, v []byte, cuts []span) []byte {
	at := 0
	for _, c := range cuts {
		dst = append(dst, v[at:c.from]...)
		at = c.to
	}
	return append(dst, v[at:]...)
}

// span is a range of bytes to cut.
type span struct{ from, to int }

// parser finds the spans to cut in one value. Its methods take the index
// of a value's first byte (after whitespace) and return the index after its
// last, or ok false on malformed input.
type parser struct {
	b []byte
}

// root walks the top-level value and returns the cuts that its kind allows.
func (p *parser) root() (cuts []span, ok bool) {
	i := p.ws(0)
	if i >= len(p.b) || p.b[i] != '{' {
		return nil, false
	}
	var own, items, object []span
	var isList, hasType, isResource bool
	end, ok := p.object(i, func(_ int, key []byte, at int) (int, bool) {
		switch {
		case is(key, "metadata"):
			return p.metadata(at, &own)
		case is(key, "items"):
			return p.items(at, &items)
		case is(key, "object"):
			return p.inner(at, &object)
		case is(key, "kind"):
			isResource = true
			e, ok := p.value(at)
			isList = ok && p.b[at] == '"' && hasSuffix(p.b[at+1:e-1], "List")
			return e, ok
		case is(key, "apiVersion"):
			isResource = true
		case is(key, "type"):
			hasType = true
		}
		return p.value(at)
	})
	if !ok || p.ws(end) != len(p.b) {
		return nil, false
	}
	cuts = own
	if isList {
		cuts = append(cuts, items...)
	}
	if hasType && !isResource {
		cuts = append(cuts, object...)
	}
	sortSpans(cuts)
	return cuts, true
}

// items walks a list's items, collecting each one's managedFields.
func (p *parser) items(i int, cuts *[]span) (int, bool) {
	if i >= len(p.b) || p.b[i] != '[' {
		return p.value(i)
	}
	i = p.ws(i + 1)
	if i < len(p.b) && p.b[i] == ']' {
		return i + 1, true
	}
	for {
		end, ok := p.inner(i, cuts)
		if !ok {
			return 0, false
		}
		if i, ok = p.next(end, ']'); !ok || p.b[i-1] == ']' {
			return i, ok
		}
	}
}

// next reads what follows an element that ends at end: a comma, after
// which it returns the index of the next element, or close, after which
// it returns the index past it (p.b[i-1] == close tells them apart).
func (p *parser) next(end int, close byte) (i int, ok bool) {
	i = p.ws(end)
	if i >= len(p.b) {
		return 0, false
	}
	switch p.b[i] {
	case ',':
		return p.ws(i + 1), true
	case close:
		return i + 1, true
	}
	return 0, false
}

// inner walks an object (an item or a watch event's object) whose
// metadata.managedFields is to be cut.
func (p *parser) inner(i int, cuts *[]span) (int, bool) {
	if i >= len(p.b) || p.b[i] != '{' {
		return p.value(i)
	}
	return p.object(i, func(_ int, key []byte, at int) (int, bool) {
		if is(key, "metadata") {
			return p.metadata(at, cuts)
		}
		return p.value(at)
	})
}

// metadata walks an object's metadata and cuts its managedFields member,
// with the comma that separates it from a neighbour.
func (p *parser) metadata(i int, cuts *[]span) (int, bool) {
	if i >= len(p.b) || p.b[i] != '{' {
		return p.value(i)
	}
	prevEnd := -1 // the end of the previous member's value
	var pending *span
	end, ok := p.object(i, func(keyStart int, key []byte, at int) (int, bool) {
		e, ok := p.value(at)
		if !ok {
			return 0, false
		}
		if pending != nil { // the cut first member takes the comma after it
			pending.to = keyStart
			*cuts = append(*cuts, *pending)
			pending = nil
		}
		if is(key, "managedFields") {
			if prevEnd >= 0 {
				*cuts = append(*cuts, span{prevEnd, e})
				prevEnd = e // a duplicate's cut starts at its own comma
			} else {
				pending = &span{keyStart, e}
			}
			return e, true
		}
		prevEnd = e
		return e, true
	})
	if ok && pending != nil { // the only member
		*cuts = append(*cuts, *pending)
	}
	return end, ok
}

// object walks an object, calling member with the index of each key's
// opening quote, the key and the index of its value; member returns the
// index after the value.
func (p *parser) object(i int, member func(keyStart int, key []byte, at int) (int, bool)) (int, bool) {
	i = p.ws(i + 1) // past '{'
	if i < len(p.b) && p.b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(p.b) || p.b[i] != '"' {
			return 0, false
		}
		keyEnd, ok := p.str(i)
		if !ok {
			return 0, false
		}
		key := p.b[i+1 : keyEnd-1]
		j := p.ws(keyEnd)
		if j >= len(p.b) || p.b[j] != ':' {
			return 0, false
		}
		end, ok := member(i, key, p.ws(j+1))
		if !ok {
			return 0, false
		}
		if i, ok = p.next(end, '}'); !ok || p.b[i-1] == '}' {
			return i, ok
		}
	}
}

// value skips any value.
func (p *parser) value(i int) (int, bool) {
	if i >= len(p.b) {
		return 0, false
	}
	switch c := p.b[i]; c {
	case '"':
		return p.str(i)
	case '{', '[':
		depth := 0
		for j := i; j < len(p.b); j++ {
			switch p.b[j] {
			case '"':
				e, ok := p.str(j)
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
		for j < len(p.b) {
			c := p.b[j]
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
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

// str skips a string starting at its opening quote.
func (p *parser) str(i int) (int, bool) {
	for j := i + 1; j < len(p.b); j++ {
		switch p.b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// is reports whether a string's text, from between its quotes, is want.
// Only an escaped one (an API server never escapes these names) allocates.
func is(quoted []byte, want string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted) == want
	}
	return unescape(quoted) == want
}

// hasSuffix is is for the end of a string.
func hasSuffix(quoted []byte, suffix string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return bytes.HasSuffix(quoted, []byte(suffix))
	}
	return strings.HasSuffix(unescape(quoted), suffix)
}

func unescape(quoted []byte) string {
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, quoted...), '"'), &s) != nil {
		return ""
	}
	return s
}

func (p *parser) ws(i int) int {
	for i < len(p.b) && isSpace(p.b[i]) {
		i++
	}
	return i
}

// sortSpans orders cuts by position; they come from disjoint members, so
// an insertion sort of a handful is enough.
func sortSpans(s []span) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].from < s[j-1].from; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
