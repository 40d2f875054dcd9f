package packed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/wasmreconcile/wasmreconcile/host/internal/jsonwalk"
)

// Decode packs one object from its JSON as an API server serves it,
// without decoding it into maps: only its metadata is decoded; the JSON is
// checked to be well-formed and kept as a copy. An object that still has
// metadata.managedFields is decoded in full and packed by Pack, which drops
// them.
//
// It fails as client-go's unstructured decoder does on an object without
// apiVersion or kind, and on JSON that is not an object.
func Decode(data []byte) (*Object, error) { return decode(data, "", "", false) }

// decode is Decode for an object expected to be of apiVersion and kind
// (those of its list, or of its watch): equal strings are shared, not
// allocated per object. A list item with neither gets the list's, as
// client-go's unstructured list decoder gives them (an API server leaves
// them out of the items of a built-in kind's list); an object of a watch
// has its own (itemTypes false).
func decode(data []byte, apiVersion, kind string, itemTypes bool) (*Object, error) {
	if !json.Valid(data) {
		var v any
		err := utiljson.Unmarshal(data, &v) // says where and why
		if err == nil {
			err = errors.New("not well-formed JSON")
		}
		return nil, fmt.Errorf("decoding an object for the cache: %w", err)
	}
	o := &Object{}
	var md []byte
	isObject := eachMember(data, func(key, v []byte) {
		switch {
		case jsonwalk.Is(key, "apiVersion"):
			o.APIVersion = textOr(v, apiVersion)
		case jsonwalk.Is(key, "kind"):
			o.Kind = textOr(v, kind)
		case jsonwalk.Is(key, "metadata"):
			md = v
		}
	})
	if !isObject {
		return nil, fmt.Errorf("decoding an object for the cache: not a JSON object: %.40q", data)
	}
	inferred := itemTypes && o.Kind == "" && o.APIVersion == "" && kind != ""
	if inferred {
		o.APIVersion, o.Kind = apiVersion, kind
	}
	switch {
	case o.Kind == "":
		return nil, fmt.Errorf("decoding an object for the cache: Object 'Kind' is missing in '%.200s'", data)
	case o.APIVersion == "":
		return nil, fmt.Errorf("decoding an object for the cache: Object 'apiVersion' is missing in '%.200s'", data)
	}
	if md != nil { // null leaves the metadata empty
		if err := utiljson.Unmarshal(md, &o.ObjectMeta); err != nil {
			return nil, fmt.Errorf("decoding the metadata of %s for the cache: %w", o.Kind, err)
		}
	}
	if o.ManagedFields != nil {
		m := map[string]any{}
		if err := utiljson.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decoding %s for the cache: %w", o.Kind, err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(o.APIVersion)
		u.SetKind(o.Kind)
		return Pack(u)
	}
	if inferred {
		o.raw = withType(data, o.APIVersion, o.Kind)
	} else {
		o.raw = bytes.Clone(data)
	}
	return o, nil
}

// withType returns a copy of the JSON object data with apiVersion and kind
// as its first members.
func withType(data []byte, apiVersion, kind string) []byte {
	i := jsonwalk.Space(data, 0) + 1 // past '{'
	v, _ := json.Marshal(apiVersion)
	k, _ := json.Marshal(kind)
	out := make([]byte, 0, len(data)+len(v)+len(k)+24)
	out = append(out, `{"apiVersion":`...)
	out = append(out, v...)
	out = append(out, `,"kind":`...)
	out = append(out, k...)
	if j := jsonwalk.Space(data, i); data[j] != '}' {
		out = append(out, ',')
	}
	return append(out, data[i:]...)
}

// eachMember calls f with the key (from between its quotes) and the value
// of each member of the JSON object data, and reports whether data is one
// object.
func eachMember(data []byte, f func(key, value []byte)) bool {
	end, ok := jsonwalk.Object(data, jsonwalk.Space(data, 0), func(_ int, key []byte, at int) (int, bool) {
		e, ok := jsonwalk.Value(data, at)
		if ok {
			f(key, data[at:e])
		}
		return e, ok
	})
	return ok && jsonwalk.Space(data, end) == len(data)
}

// textOr is text, sharing common when the value is common.
func textOr(v []byte, common string) string {
	if len(v) == len(common)+2 && v[0] == '"' && string(v[1:len(v)-1]) == common {
		return common
	}
	return text(v)
}

// text returns a JSON string's value; any other value is "", as the
// unstructured accessors read a member of the wrong type.
func text(v []byte) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	return jsonwalk.Unescape(v[1 : len(v)-1])
}

// List is a list of packed objects, as DecodeList returns it. Its items
// are *Object; client-go's reflector and pager read them with
// meta.ExtractList and meta.EachListItem.
type List struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

var _ metav1.ListInterface = &List{}

// DeepCopyObject returns a List with the same items: packed objects are
// immutable.
func (l *List) DeepCopyObject() runtime.Object {
	c := &List{TypeMeta: l.TypeMeta, Items: append([]runtime.Object(nil), l.Items...)}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	return c
}

// DecodeList decodes a list response (a kind ending in "List" with items)
// into a List of packed objects, each as Decode decodes it.
func DecodeList(data []byte) (*List, error) {
	l := &List{}
	var md, items []byte
	isObject := eachMember(data, func(key, v []byte) {
		switch {
		case jsonwalk.Is(key, "apiVersion"):
			l.APIVersion = text(v)
		case jsonwalk.Is(key, "kind"):
			l.Kind = text(v)
		case jsonwalk.Is(key, "metadata"):
			md = v
		case jsonwalk.Is(key, "items"):
			items = v
		}
	})
	if !isObject {
		return nil, fmt.Errorf("decoding a list for the cache: not a JSON object: %.40q", data)
	}
	if md != nil {
		if err := utiljson.Unmarshal(md, &l.ListMeta); err != nil {
			return nil, fmt.Errorf("decoding the metadata of %s for the cache: %w", l.Kind, err)
		}
	}
	if items == nil || bytes.Equal(items, []byte("null")) {
		return l, nil
	}
	var err error
	itemKind := strings.TrimSuffix(l.Kind, "List")
	_, isArray := jsonwalk.Array(items, 0, func(at int) (int, bool) {
		e, ok := jsonwalk.Value(items, at)
		if !ok {
			return 0, false
		}
		var o *Object
		if o, err = decode(items[at:e], l.APIVersion, itemKind, true); err != nil {
			return 0, false
		}
		l.Items = append(l.Items, o)
		return e, true
	})
	if err != nil {
		return nil, err
	}
	if !isArray {
		return nil, fmt.Errorf("decoding %s for the cache: items is not a JSON array of objects", l.Kind)
	}
	return l, nil
}

// ValueReader yields JSON values one at a time, as fieldstrip.Values does.
type ValueReader interface {
	// Next returns the next value, valid until the next call.
	Next() ([]byte, error)
	Close() error
}

// WatchDecoder decodes a watch stream's events into packed objects: it is
// a watch.Decoder for watch.NewStreamWatcher, in place of client-go's
// decoder of unstructured objects. An ERROR event's object is a
// *metav1.Status; every other event's is an *Object.
type WatchDecoder struct {
	values     ValueReader
	expect     schema.GroupVersionKind
	apiVersion string // expect's
}

// NewWatchDecoder returns a WatchDecoder reading events from values. An
// object of another kind than expect is reported (utilruntime.HandleError)
// and skipped, as client-go's reflector skips one from an unstructured
// watch.
func NewWatchDecoder(values ValueReader, expect schema.GroupVersionKind) *WatchDecoder {
	apiVersion, _ := expect.ToAPIVersionAndKind()
	return &WatchDecoder{values: values, expect: expect, apiVersion: apiVersion}
}

var _ watch.Decoder = &WatchDecoder{}

// Decode returns the next event. At the end of the stream it returns
// io.EOF (io.ErrUnexpectedEOF for an event cut short), which the stream
// watcher takes as the end of the watch; any other error ends it with an
// error event.
func (d *WatchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	for {
		t, o, err := d.decode()
		if err == nil && t != watch.Error {
			if gvk := o.GetObjectKind().GroupVersionKind(); gvk != d.expect {
				utilruntime.HandleError(fmt.Errorf("a watch of %s sent a %s event for %s: skipped", d.expect, t, gvk))
				continue
			}
		}
		return t, o, err
	}
}

func (d *WatchDecoder) decode() (watch.EventType, runtime.Object, error) {
	v, err := d.values.Next()
	if err != nil {
		return "", nil, err
	}
	var typ string
	var obj []byte
	isObject := eachMember(v, func(key, value []byte) {
		switch {
		case jsonwalk.Is(key, "type"):
			typ = text(value)
		case jsonwalk.Is(key, "object"):
			obj = value
		}
	})
	if !isObject {
		return "", nil, fmt.Errorf("unable to decode watch event: not a JSON object: %.40q", v)
	}
	switch t := watch.EventType(typ); t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		o, err := decode(obj, d.apiVersion, d.expect.Kind, false)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		return t, o, nil
	case watch.Error:
		st := &metav1.Status{}
		if err := utiljson.Unmarshal(obj, st); err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		return t, st, nil
	}
	return "", nil, fmt.Errorf("got invalid watch event type: %v", typ)
}

// Close closes the stream.
func (d *WatchDecoder) Close() { _ = d.values.Close() }
