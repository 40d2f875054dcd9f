package guest

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// LazyHandlerFunc reconciles one object from a LazyRequest. It must not
// retain req, or any Value from it, after returning.
type LazyHandlerFunc func(req *LazyRequest) *Response

// HandleLazy registers the module's manifest and a handler that reads its
// request lazily: nothing is decoded until the handler asks for it, and
// what it does not ask for (annotations, most of the spec, children it
// does not look at) is only skipped over by a scanner. In WebAssembly,
// where Go's generated code is slow on maps and interfaces, this is most
// of a reconcile's cost (docs/benchmarks.md). Call it, or Handle, exactly
// once, from an init function.
func HandleLazy(m Manifest, h LazyHandlerFunc) {
	if h == nil {
		panic("guest.HandleLazy: nil handler")
	}
	register(m, func(request []byte) (*Response, error) {
		tape := getTape()
		defer func() {
			if cap(tape.Entries) <= maxPooledEntries { // keep no huge request's tape
				putTape(tape)
			}
		}()
		req, err := parseLazy(request, tape)
		if err != nil {
			return nil, err
		}
		return h(req), nil
	})
}

// Lazy returns req as a LazyRequest, for unit tests of a LazyHandlerFunc
// written with a Request.
func Lazy(req *Request) (*LazyRequest, error) {
	b, err := appendRequest(nil, req)
	if err != nil {
		return nil, err
	}
	return ParseLazy(b)
}

// LazyRequest is a Request read on demand from its JSON encoding.
type LazyRequest struct {
	tape              *jsontree.Tape
	object, config    Value
	children, related Value
	failures          Value
	finalizing        bool
	attempt           int
	now               string
}

// ParseLazy reads the top level of a JSON Request. It locates every value
// in one pass and checks the types of the request's fields, as decoding a
// Request would; their contents are decoded when asked for.
func ParseLazy(data []byte) (*LazyRequest, error) {
	return parseLazy(data, &jsontree.Tape{})
}

func parseLazy(data []byte, tape *jsontree.Tape) (*LazyRequest, error) {
	if err := tape.Index(data); err != nil {
		return nil, err
	}
	root := Value{tape, 0}
	if root.kind() != "object" {
		return nil, errors.New("request is not a JSON object")
	}
	r := &LazyRequest{tape: tape}
	var err error
	root.Each(func(k string, v Value) bool {
		if v.IsNull() {
			return true
		}
		want := func(ok bool, what string) error {
			if !ok {
				return errors.New("request field " + strconv.Quote(k) + " must be " + what + ", got " + v.kind())
			}
			return nil
		}
		switch k {
		case "object":
			r.object, err = v, want(v.kind() == "object", "an object")
		case "config":
			r.config, err = v, want(v.kind() == "object", "an object")
		case "children":
			r.children, err = v, want(v.kind() == "array", "an array of objects")
		case "related":
			r.related, err = v, want(v.kind() == "array", "an array of objects")
		case "childFailures":
			r.failures, err = v, want(v.kind() == "array", "an array of objects")
		case "finalizing":
			var ok bool
			r.finalizing, ok = v.Bool()
			err = want(ok, "a boolean")
		case "attempt":
			n, ok := v.Int64()
			r.attempt, err = int(n), want(ok && v.kind() == "number", "an integer")
		case "now":
			r.now, err = v.String(), want(v.kind() == "string", "a string")
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Object is the object to reconcile (Request.Object).
func (r *LazyRequest) Object() Value { return r.object }

// Children are the observed children (Request.Children).
func (r *LazyRequest) Children() []Value { return r.children.Elems() }

// Related are the related objects (Request.Related).
func (r *LazyRequest) Related() []Value { return r.related.Elems() }

// Config is the module's configuration (Request.Config).
func (r *LazyRequest) Config() Value { return r.config }

// Finalizing is Request.Finalizing.
func (r *LazyRequest) Finalizing() bool { return r.finalizing }

// Attempt is Request.Attempt.
func (r *LazyRequest) Attempt() int { return r.attempt }

// Now is Request.Now.
func (r *LazyRequest) Now() string { return r.now }

// ChildFailures are Request.ChildFailures.
func (r *LazyRequest) ChildFailures() []ChildFailure {
	var out []ChildFailure
	for _, e := range r.failures.Elems() {
		out = append(out, ChildFailure{APIVersion: e.Get("apiVersion").String(), Kind: e.Get("kind").String(),
			Namespace: e.Get("namespace").String(), Name: e.Get("name").String(),
			Reason: e.Get("reason").String(), Message: e.Get("message").String()})
	}
	return out
}

// Value is one JSON value of a request, located but not decoded; the zero
// Value is an absent one. Its methods decode only what they return.
type Value struct {
	t *jsontree.Tape
	i uint32
}

// Exists reports whether the value is present (it may be null).
func (v Value) Exists() bool { return v.t != nil }

// IsNull reports whether the value is absent or JSON null.
func (v Value) IsNull() bool { return v.t == nil || string(v.Raw()) == "null" }

// Raw is the value's JSON encoding; nil when absent.
func (v Value) Raw() []byte {
	if v.t == nil {
		return nil
	}
	return v.t.Raw(v.i)
}

func (v Value) kind() string {
	if v.t == nil {
		return "nothing"
	}
	switch c := v.t.Data[v.t.Entries[v.i].Start]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	case c == 'n':
		return "null"
	}
	return "number"
}

// Get returns the value at path within nested objects; an absent Value
// when a step is missing or not an object. A key given twice in the JSON
// resolves to its last value, as decoding does.
func (v Value) Get(path ...string) Value {
	for _, key := range path {
		if v.kind() != "object" {
			return Value{}
		}
		found := false
		t, end := v.t, v.t.Entries[v.i].Next
		for c := v.i + 1; c < end; c = t.Entries[c].Next { // the last of a duplicated key wins
			k := t.Key(c)
			if t.Entries[c].KeyEscaped {
				if s, err := jsontree.Key(k); err != nil || s != key {
					continue
				}
			} else if string(k) != key {
				continue
			}
			v.i, found = c, true
		}
		if !found {
			return Value{}
		}
	}
	return v
}

// String returns the string value, or "" when absent or not a string.
func (v Value) String() string {
	if v.kind() != "string" {
		return ""
	}
	raw := v.Raw()
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	s, _ := jsontree.Key(inner)
	return s
}

// Int64 returns the value as an integer. ok is false when it is absent or
// not a whole number (a string holding one counts, as Object.NestedInt64).
func (v Value) Int64() (n int64, ok bool) {
	switch v.kind() {
	case "number":
		if n, err := strconv.ParseInt(string(v.Raw()), 10, 64); err == nil {
			return n, true
		}
		f, err := strconv.ParseFloat(string(v.Raw()), 64)
		if err != nil || f != float64(int64(f)) {
			return 0, false
		}
		return int64(f), true
	case "string":
		n, err := strconv.ParseInt(v.String(), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// Float64 returns the value as a number; ok is false when it is not one.
func (v Value) Float64() (float64, bool) {
	if v.kind() != "number" {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v.Raw()), 64)
	return f, err == nil
}

// Bool returns the value as a boolean; ok is false when it is not one.
func (v Value) Bool() (b, ok bool) {
	switch string(v.Raw()) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Elems returns the elements of an array; nil when it is not one.
func (v Value) Elems() []Value {
	if v.kind() != "array" {
		return nil
	}
	var out []Value
	for c, end := v.i+1, v.t.Entries[v.i].Next; c < end; c = v.t.Entries[c].Next {
		out = append(out, Value{v.t, c})
	}
	return out
}

// Each calls fn with each key and value of an object, in order, until fn
// returns false. It does nothing when the value is not an object.
func (v Value) Each(fn func(key string, value Value) bool) {
	if v.kind() != "object" {
		return
	}
	t := v.t
	for c, end := v.i+1, t.Entries[v.i].Next; c < end; c = t.Entries[c].Next {
		key := string(t.Key(c))
		if t.Entries[c].KeyEscaped {
			key, _ = jsontree.Key(t.Key(c))
		}
		if !fn(key, Value{t, c}) {
			return
		}
	}
}

// Decode decodes the whole value as encoding/json would into an any:
// map[string]any, []any, string, float64, bool or nil.
func (v Value) Decode() (any, error) {
	if v.t == nil {
		return nil, errors.New("guest: decoding an absent value")
	}
	return jsontree.Decode(v.Raw())
}

// Object decodes the value as an Object; nil when it is not an object.
func (v Value) Object() Object {
	if v.kind() != "object" {
		return nil
	}
	m, err := v.Decode()
	if err != nil {
		return nil
	}
	o, _ := m.(map[string]any)
	return o
}

// StringMap decodes an object of strings, such as metadata.labels; values
// that are not strings are left out.
func (v Value) StringMap() map[string]string {
	if v.kind() != "object" {
		return nil
	}
	out := map[string]string{}
	v.Each(func(k string, e Value) bool {
		if e.kind() == "string" {
			out[k] = e.String()
		}
		return true
	})
	return out
}

// Meta is the identity of an object, read in one pass over its metadata.
type Meta struct {
	Name, Namespace, UID, ResourceVersion string
	Generation                            int64
}

// Meta reads the value's metadata name, namespace, uid, resourceVersion
// and generation, and nothing else.
func (v Value) Meta() Meta {
	var m Meta
	md := v.Get("metadata")
	if md.kind() != "object" {
		return m
	}
	t := md.t
	for c, end := md.i+1, t.Entries[md.i].Next; c < end; c = t.Entries[c].Next {
		e := Value{t, c}
		switch string(memberKey(t, c)) { // compared without a copy
		case "name":
			m.Name = e.String()
		case "namespace":
			m.Namespace = e.String()
		case "uid":
			m.UID = e.String()
		case "resourceVersion":
			m.ResourceVersion = e.String()
		case "generation":
			m.Generation, _ = e.Int64()
		}
	}
	return m
}

// Labels is metadata.labels.
func (v Value) Labels() map[string]string { return v.Get("metadata", "labels").StringMap() }

// Annotations is metadata.annotations.
func (v Value) Annotations() map[string]string { return v.Get("metadata", "annotations").StringMap() }

// Condition returns the status condition of type t, if the object has one,
// as Object.Condition.
func (v Value) Condition(t string) (Condition, bool) {
	list := v.Get("status", "conditions")
	if list.kind() != "array" {
		return Condition{}, false
	}
	tp := list.t
	for i, end := list.i+1, tp.Entries[list.i].Next; i < end; i = tp.Entries[i].Next {
		e := Value{tp, i}
		if e.kind() != "object" || e.Get("type").String() != t {
			continue
		}
		c := Condition{Type: t}
		for f, fend := i+1, tp.Entries[i].Next; f < fend; f = tp.Entries[f].Next {
			fv := Value{tp, f}
			switch string(memberKey(tp, f)) {
			case "status":
				c.Status = fv.String()
			case "lastTransitionTime":
				c.LastTransitionTime = fv.String()
			case "reason":
				c.Reason = fv.String()
			case "message":
				c.Message = fv.String()
			case "observedGeneration":
				c.ObservedGeneration, _ = fv.Int64()
			}
		}
		return c, true
	}
	return Condition{}, false
}

// SetCondition returns c as it should be stored, as Object.SetCondition:
// LastTransitionTime is kept from the object's condition of the same type
// when Status did not change, and set to now otherwise.
func (v Value) SetCondition(c Condition, now string) map[string]any {
	old, ok := v.Condition(c.Type)
	return conditionMap(c, old, ok, now)
}

// memberKey is the key of member entry c, decoded only when its raw bytes
// differ from it.
func memberKey(t *jsontree.Tape, c uint32) []byte {
	k := t.Key(c)
	if t.Entries[c].KeyEscaped {
		s, _ := jsontree.Key(k)
		return []byte(s)
	}
	return k
}
