package guest

import (
	"errors"
	"strconv"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/format"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// decodeRequest decodes a Request with the fast codec. It is as strict as
// encoding/json about field types.
func decodeRequest(data []byte) (*Request, error) {
	v, err := jsontree.Decode(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("request is not a JSON object")
	}
	req := &Request{}
	for k, v := range m {
		if v == nil {
			continue
		}
		switch k {
		case "object":
			if req.Object, ok = v.(map[string]any); !ok {
				return nil, fieldError(k, "an object", v)
			}
		case "children", "related":
			list, ok := v.([]any)
			if !ok {
				return nil, fieldError(k, "an array of objects", v)
			}
			objs := make([]map[string]any, len(list))
			for i, e := range list {
				if objs[i], ok = e.(map[string]any); !ok && e != nil {
					return nil, fieldError(k+"["+strconv.Itoa(i)+"]", "an object", e)
				}
			}
			if k == "children" {
				req.Children = objs
			} else {
				req.Related = objs
			}
		case "finalizing":
			if req.Finalizing, ok = v.(bool); !ok {
				return nil, fieldError(k, "a boolean", v)
			}
		case "config":
			if req.Config, ok = v.(map[string]any); !ok {
				return nil, fieldError(k, "an object", v)
			}
		case "attempt":
			f, ok := v.(float64)
			if !ok || f != float64(int(f)) {
				return nil, fieldError(k, "an integer", v)
			}
			req.Attempt = int(f)
		case "now":
			if req.Now, ok = v.(string); !ok {
				return nil, fieldError(k, "a string", v)
			}
		case "childFailures":
			list, ok := v.([]any)
			if !ok {
				return nil, fieldError(k, "an array of objects", v)
			}
			req.ChildFailures = make([]abi.ChildFailure, len(list))
			for i, e := range list {
				f, ok := e.(map[string]any)
				if !ok {
					return nil, fieldError(k+"["+strconv.Itoa(i)+"]", "an object", e)
				}
				str := func(key string) string { s, _ := f[key].(string); return s }
				req.ChildFailures[i] = abi.ChildFailure{APIVersion: str("apiVersion"), Kind: str("kind"), Namespace: str("namespace"),
					Name: str("name"), Reason: str("reason"), Message: str("message")}
			}
		}
	}
	return req, nil
}

func fieldError(field, want string, got any) error {
	return errors.New("request field " + strconv.Quote(field) + " must be " + want + ", got " + format.TypeName(got))
}

// encodeResponse encodes a Response with the fast codec, appending to b: the
// fields in encoding/json's order, which is sorted. A value the codec does
// not handle (a struct in a status, say) is an *jsontree.UnsupportedError
// unless package stdjson set encoding/json as the fallback.
func encodeResponse(b []byte, r *Response) ([]byte, error) {
	start := len(b)
	b = append(b, '{')
	sep := func() {
		if len(b) > start+1 {
			b = append(b, ',')
		}
	}
	var err error
	if r.Children != nil { // nil leaves the children alone; [] deletes them all
		sep()
		b = append(b, `"children":`...)
		if b, err = jsontree.Append(b, r.Children); err != nil {
			return nil, err
		}
	}
	if r.Error != nil {
		sep()
		b = append(b, `"error":{"message":`...)
		b, _ = jsontree.Append(b, r.Error.Message)
		if r.Error.Terminal {
			b = append(b, `,"terminal":true`...)
		}
		b = append(b, '}')
	}
	if len(r.Events) > 0 {
		sep()
		b = append(b, `"events":[`...)
		for i, e := range r.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"message":`...)
			b, _ = jsontree.Append(b, e.Message)
			b = append(b, `,"reason":`...)
			b, _ = jsontree.Append(b, e.Reason)
			b = append(b, `,"type":`...)
			b, _ = jsontree.Append(b, string(e.Type))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Finalized {
		sep()
		b = append(b, `"finalized":true`...)
	}
	if r.RequeueAfterSeconds != 0 {
		sep()
		b = append(b, `"requeueAfterSeconds":`...)
		b, _ = jsontree.Append(b, r.RequeueAfterSeconds)
	}
	if r.Status != nil {
		sep()
		b = append(b, `"status":`...)
		if b, err = jsontree.Append(b, r.Status); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendRequest encodes r as encoding/json would, appending to b.
func appendRequest(b []byte, r *Request) ([]byte, error) {
	var err error
	b = append(b, `{"object":`...)
	if b, err = appendObject(b, r.Object); err != nil {
		return nil, err
	}
	for _, list := range []struct {
		name string
		objs []map[string]any
	}{{"children", r.Children}, {"related", r.Related}} {
		if len(list.objs) == 0 {
			continue
		}
		b = append(b, `,"`...)
		b = append(b, list.name...)
		b = append(b, `":`...)
		if b, err = jsontree.Append(b, list.objs); err != nil {
			return nil, err
		}
	}
	if r.Finalizing {
		b = append(b, `,"finalizing":true`...)
	}
	if len(r.Config) > 0 {
		b = append(b, `,"config":`...)
		if b, err = jsontree.Append(b, r.Config); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"now":`...)
	b = jsontree.AppendString(b, r.Now)
	if len(r.ChildFailures) > 0 {
		b = append(b, `,"childFailures":[`...)
		for i, f := range r.ChildFailures {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"apiVersion":`...)
			b = jsontree.AppendString(b, f.APIVersion)
			b = append(b, `,"kind":`...)
			b = jsontree.AppendString(b, f.Kind)
			if f.Namespace != "" {
				b = append(b, `,"namespace":`...)
				b = jsontree.AppendString(b, f.Namespace)
			}
			b = append(b, `,"name":`...)
			b = jsontree.AppendString(b, f.Name)
			b = append(b, `,"reason":`...)
			b = jsontree.AppendString(b, f.Reason)
			b = append(b, `,"message":`...)
			b = jsontree.AppendString(b, f.Message)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendObject is jsontree.Append for an object, nil as null (as
// encoding/json writes a nil map; jsontree writes {}).
func appendObject(b []byte, o map[string]any) ([]byte, error) {
	if o == nil {
		return append(b, "null"...), nil
	}
	return jsontree.Append(b, o)
}

// appendManifest encodes m as encoding/json would, appending to b.
func appendManifest(b []byte, m *Manifest) []byte {
	b = append(b, `{"name":`...)
	b = jsontree.AppendString(b, m.Name)
	b = append(b, `,"for":`...)
	b = appendGVK(b, m.For)
	for _, list := range []struct {
		name  string
		kinds []GroupVersionKind
	}{{"owns", m.Owns}, {"reads", m.Reads}} {
		if len(list.kinds) == 0 {
			continue
		}
		b = append(b, `,"`...)
		b = append(b, list.name...)
		b = append(b, `":[`...)
		for i, k := range list.kinds {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendGVK(b, k)
		}
		b = append(b, ']')
	}
	if len(m.Triggers) > 0 {
		b = append(b, `,"triggers":[`...)
		for i, t := range m.Triggers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"kind":`...)
			b = appendGVK(b, t.Kind)
			if t.OwnerReference {
				b = append(b, `,"ownerReference":true`...)
			}
			if t.Field != "" {
				b = append(b, `,"field":`...)
				b = jsontree.AppendString(b, t.Field)
			}
			if t.Selector != "" {
				b = append(b, `,"selector":`...)
				b = jsontree.AppendString(b, t.Selector)
			}
			if t.All {
				b = append(b, `,"all":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if m.Finalizer {
		b = append(b, `,"finalizer":true`...)
	}
	if l := m.Limits; l != nil {
		b = append(b, `,"limits":{`...)
		n := len(b)
		comma := func() {
			if len(b) > n {
				b = append(b, ',')
			}
		}
		if l.Fuel != 0 {
			b = append(b, `"fuel":`...)
			b = strconv.AppendUint(b, l.Fuel, 10)
		}
		if l.TimeoutMillis != 0 {
			comma()
			b = append(b, `"timeoutMillis":`...)
			b = strconv.AppendInt(b, l.TimeoutMillis, 10)
		}
		if l.MemoryPages != 0 {
			comma()
			b = append(b, `"memoryPages":`...)
			b = strconv.AppendUint(b, uint64(l.MemoryPages), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendGVK(b []byte, k GroupVersionKind) []byte {
	b = append(b, `{"group":`...)
	b = jsontree.AppendString(b, k.Group)
	b = append(b, `,"version":`...)
	b = jsontree.AppendString(b, k.Version)
	b = append(b, `,"kind":`...)
	b = jsontree.AppendString(b, k.Kind)
	return append(b, '}')
}

// appendCacheRequest encodes r as encoding/json would, appending to b.
func appendCacheRequest(b []byte, r *abi.CacheRequest) []byte {
	b = append(b, `{"op":`...)
	b = jsontree.AppendString(b, r.Op)
	b = append(b, `,"apiVersion":`...)
	b = jsontree.AppendString(b, r.APIVersion)
	b = append(b, `,"kind":`...)
	b = jsontree.AppendString(b, r.Kind)
	if r.Namespace != "" {
		b = append(b, `,"namespace":`...)
		b = jsontree.AppendString(b, r.Namespace)
	}
	if r.Name != "" {
		b = append(b, `,"name":`...)
		b = jsontree.AppendString(b, r.Name)
	}
	if r.LabelSelector != "" {
		b = append(b, `,"labelSelector":`...)
		b = jsontree.AppendString(b, r.LabelSelector)
	}
	return append(b, '}')
}
