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
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/wasmreconcile/wasmreconcile/host/internal/jsonwalk"
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
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	if d, ok := req.Context().Value(divertKey{}).(*Diversion); ok && resp.StatusCode == http.StatusOK && d.values == nil {
		d.values = newValues(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(d.placeholder))
		return resp, nil
	}
	resp.Body = NewReader(resp.Body)
	return resp, nil
}

// A Diversion takes the body of one successful JSON response away from the
// client that asked for it, for a caller that decodes the values itself:
// the operator's cache decodes lists and watch events straight into its
// packed objects this way, under client-go's own request, retry and error
// handling. Only a 200 response is diverted; any other reaches the client,
// which makes its error from it as always.
type Diversion struct {
	placeholder []byte
	values      *Values
}

type divertKey struct{}

// Divert returns ctx and a Diversion for the first request made with it
// through WrapTransport's transport. The client receives placeholder as the
// body (for a list, an empty list; for a watch, nothing) and the Diversion
// the real one.
func Divert(ctx context.Context, placeholder []byte) (context.Context, *Diversion) {
	d := &Diversion{placeholder: placeholder}
	return context.WithValue(ctx, divertKey{}, d), d
}

// Values returns the diverted body's values, or nil if no response was
// diverted. The caller must Close them.
func (d *Diversion) Values() *Values { return d.values }

// Values reads a body's JSON values one at a time, each stripped by Strip.
type Values struct{ r reader }

func newValues(src io.ReadCloser) *Values {
	v := &Values{r: reader{src: src}}
	v.r.ends = []int{}
	return v
}

// Next returns the next value, without the whitespace around it; it is
// valid until the next call. At the end of the body it returns io.EOF, or
// io.ErrUnexpectedEOF if a value was cut short; bytes that are not a JSON
// object or array are an error.
func (v *Values) Next() ([]byte, error) {
	r := &v.r
	for {
		if len(r.ends) > 0 {
			end := r.ends[0]
			r.ends = r.ends[1:]
			val := bytes.TrimLeft(r.out[r.sent:end], " \t\r\n")
			r.sent = end
			return val, nil
		}
		if r.raw {
			return nil, fmt.Errorf("the response is not a stream of JSON objects: %.40q", r.out[r.sent:])
		}
		r.out, r.sent, r.ends = r.out[:0], 0, r.ends[:0]
		if r.err != nil {
			if r.err == io.EOF && len(bytes.TrimSpace(r.in)) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, r.err
		}
		r.fill()
	}
}

// Close closes the body.
func (v *Values) Close() error { return v.r.src.Close() }

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
	ends []int // for Values: where each value in out ends; nil for a reader
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
		r.fill()
	}
	n := copy(p, r.out[r.sent:])
	r.sent += n
	return n, nil
}

// fill reads from the source once and frames what it can.
func (r *reader) fill() {
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
				if r.ends != nil {
					r.ends = append(r.ends, len(r.out))
				}
				start = i + 1
			}
		case r.depth == 0 && !jsonwalk.IsSpace(c): // a number or literal at the top
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
	i := jsonwalk.Space(p.b, 0)
	if i >= len(p.b) || p.b[i] != '{' {
		return nil, false
	}
	var own, items, object []span
	var isList, hasType, isResource bool
	end, ok := jsonwalk.Object(p.b, i, func(_ int, key []byte, at int) (int, bool) {
		switch {
		case jsonwalk.Is(key, "metadata"):
			return p.metadata(at, &own)
		case jsonwalk.Is(key, "items"):
			return p.items(at, &items)
		case jsonwalk.Is(key, "object"):
			return p.inner(at, &object)
		case jsonwalk.Is(key, "kind"):
			isResource = true
			e, ok := jsonwalk.Value(p.b, at)
			isList = ok && p.b[at] == '"' && jsonwalk.HasSuffix(p.b[at+1:e-1], "List")
			return e, ok
		case jsonwalk.Is(key, "apiVersion"):
			isResource = true
		case jsonwalk.Is(key, "type"):
			hasType = true
		}
		return jsonwalk.Value(p.b, at)
	})
	if !ok || jsonwalk.Space(p.b, end) != len(p.b) {
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
		return jsonwalk.Value(p.b, i)
	}
	return jsonwalk.Array(p.b, i, func(at int) (int, bool) { return p.inner(at, cuts) })
}

// inner walks an object (an item or a watch event's object) whose
// metadata.managedFields is to be cut.
func (p *parser) inner(i int, cuts *[]span) (int, bool) {
	if i >= len(p.b) || p.b[i] != '{' {
		return jsonwalk.Value(p.b, i)
	}
	return jsonwalk.Object(p.b, i, func(_ int, key []byte, at int) (int, bool) {
		if jsonwalk.Is(key, "metadata") {
			return p.metadata(at, cuts)
		}
		return jsonwalk.Value(p.b, at)
	})
}

// metadata walks an object's metadata and cuts its managedFields member,
// with the comma that separates it from a neighbour.
func (p *parser) metadata(i int, cuts *[]span) (int, bool) {
	if i >= len(p.b) || p.b[i] != '{' {
		return jsonwalk.Value(p.b, i)
	}
	prevEnd := -1 // the end of the previous member's value
	var pending *span
	end, ok := jsonwalk.Object(p.b, i, func(keyStart int, key []byte, at int) (int, bool) {
		e, ok := jsonwalk.Value(p.b, at)
		if !ok {
			return 0, false
		}
		if pending != nil { // the cut first member takes the comma after it
			pending.to = keyStart
			*cuts = append(*cuts, *pending)
			pending = nil
		}
		if jsonwalk.Is(key, "managedFields") {
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

// sortSpans orders cuts by position; they come from disjoint members, so
// an insertion sort of a handful is enough.
func sortSpans(s []span) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].from < s[j-1].from; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
