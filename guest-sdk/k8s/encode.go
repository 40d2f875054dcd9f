package k8s

import (
	"encoding/base64"
	"slices"
	"strconv"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// writer appends one JSON object: the members a type models, which its
// AppendJSON passes in sorted key order, merged with the members of the
// type's Extra map. Members are written in sorted key order, as
// encoding/json and the SDK write a map, so a typed child encodes to the
// very bytes of the same child built as maps.
type writer struct {
	b     []byte
	err   error
	extra map[string]any
	keys  []string // Extra's keys not yet written, sorted
	n     int      // members written
	mark  int      // len(b) before the last member's separator
	val   int      // len(b) at the start of the last member's value
}

func open(b []byte, extra map[string]any) writer {
	w := writer{b: append(b, '{'), extra: extra}
	if len(extra) > 0 {
		w.keys = make([]string, 0, len(extra))
		for k := range extra {
			w.keys = append(w.keys, k)
		}
		slices.Sort(w.keys)
	}
	return w
}

// key starts the modelled member k, whose value the caller then appends,
// after writing the members of Extra that sort before it. It returns false,
// having written Extra's member instead, when Extra has the key k. k must
// need no escaping (every JSON name of the Kubernetes API).
func (w *writer) key(k string) bool {
	for len(w.keys) > 0 && w.keys[0] <= k {
		ek := w.keys[0]
		w.keys = w.keys[1:]
		w.extraMember(ek)
		if ek == k {
			return false
		}
	}
	w.mark = len(w.b)
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
	w.val = len(w.b)
	return true
}

// extraMember writes Extra's member k. A value the SDK's encoder does not
// handle (a struct, say) is an error, unless package stdjson made
// encoding/json the fallback.
func (w *writer) extraMember(k string) {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
	w.b = jsontree.AppendString(w.b, k)
	w.b = append(w.b, ':')
	b, err := jsontree.Append(w.b, w.extra[k])
	if err != nil {
		w.fail(err)
		return
	}
	w.b = b
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// close writes the rest of Extra and the closing brace.
func (w *writer) close() ([]byte, error) {
	for _, k := range w.keys {
		w.extraMember(k)
	}
	w.keys = nil
	if w.err != nil {
		return nil, w.err
	}
	return append(w.b, '}'), nil
}

// object ends a member whose value, an object, AppendJSON just wrote: it
// drops the member when the object is empty, so that a struct with nothing
// set is omitted as encoding/json's omitzero omits it.
func (w *writer) object(b []byte, err error) {
	if err != nil {
		w.fail(err)
		return
	}
	if len(b) == w.val+2 { // {}
		b = b[:w.mark]
		w.n--
	}
	w.b = b
}

// value ends a member whose value AppendJSON just wrote.
func (w *writer) value(b []byte, err error) {
	if err != nil {
		w.fail(err)
		return
	}
	w.b = b
}

func (w *writer) str(k, v string) {
	if v != "" && w.key(k) {
		w.b = jsontree.AppendString(w.b, v)
	}
}

func (w *writer) strPtr(k string, v *string) {
	if v != nil && w.key(k) {
		w.b = jsontree.AppendString(w.b, *v)
	}
}

func (w *writer) strs(k string, v []string) {
	if len(v) > 0 && w.key(k) {
		w.b = appendStrings(w.b, v)
	}
}

func appendStrings(b []byte, v []string) []byte {
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontree.AppendString(b, s)
	}
	return append(b, ']')
}

func (w *writer) strMap(k string, v map[string]string) {
	if len(v) > 0 && w.key(k) {
		w.b = jsontree.AppendStringMap(w.b, v)
	}
}

func (w *writer) int32(k string, v int32) {
	if v != 0 && w.key(k) {
		w.b = appendInt(w.b, int64(v))
	}
}

func (w *writer) int32Ptr(k string, v *int32) {
	if v != nil && w.key(k) {
		w.b = appendInt(w.b, int64(*v))
	}
}

func (w *writer) int64Ptr(k string, v *int64) {
	if v != nil && w.key(k) {
		w.b = appendInt(w.b, *v)
	}
}

func (w *writer) boolean(k string, v bool) {
	if v && w.key(k) {
		w.b = append(w.b, "true"...)
	}
}

func (w *writer) boolPtr(k string, v *bool) {
	if v != nil && w.key(k) {
		w.b = appendBool(w.b, *v)
	}
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func (w *writer) intOrString(k string, v IntOrString) {
	if v.kind != 0 && w.key(k) {
		w.b = v.appendJSON(w.b)
	}
}

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// base64Map is m with its values in base64, as the API encodes the bytes of
// a Secret's or a ConfigMap's data.
func base64Map(m map[string][]byte) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = base64.StdEncoding.EncodeToString(v)
	}
	return out
}
