package guest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
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
					return nil, fieldError(fmt.Sprintf("%s[%d]", k, i), "an object", e)
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
					return nil, fieldError(fmt.Sprintf("%s[%d]", k, i), "an object", e)
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
	return fmt.Errorf("request field %q must be %s, got %T", field, want, got)
}

// encodeResponse encodes a Response with the fast codec, appending to b,
// falling back to encoding/json for values it does not handle (for example
// structs in a status). The output is the same either way: the fields in
// encoding/json's order, which is sorted.
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
			return fallback(b[:start], r, err)
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
			return fallback(b[:start], r, err)
		}
	}
	return append(b, '}'), nil
}

func fallback(b []byte, r *Response, err error) ([]byte, error) {
	if !errors.Is(err, jsontree.ErrUnsupported) {
		return nil, err
	}
	out, err := json.Marshal(r)
	return append(b, out...), err
}
