// Package decode turns the generic JSON tree a module receives (maps,
// slices, strings, float64 numbers, booleans and nil, as guest.Request
// holds its objects) into typed Go values, without reflection. It is what
// the decoders that `operator generate` writes for a module's own kind
// (api/VERSION/zz_generated.decode.go) are made of; modules rarely call it
// directly.
//
// Every function takes the value and its path in the object ("spec.replicas",
// "spec.items[2].name"), for the error. An absent member and JSON null
// decode to the zero value (a nil pointer, slice or map): the API server
// has already applied the CRD's defaults. A value of the wrong JSON type
// is an *Error that names the path, what the type declares and what the
// object holds; members the type does not declare are ignored, as the API
// server prunes them.
package decode

import (
	"math"
	"strconv"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// Error is a value of the wrong JSON type for the Go type that declares it.
type Error struct {
	Path string // such as "spec.replicas"
	Want string // such as "an integer"
	Got  string // what the object holds, such as `a string "3"`
}

func (e *Error) Error() string {
	return e.Path + ": want " + e.Want + ", got " + e.Got
}

// wrong is the error for v at path where want was declared.
func wrong(path, want string, v any) error {
	return &Error{Path: path, Want: want, Got: describe(v)}
}

// describe names v's JSON type, with a short value.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return "a string " + strconv.Quote(x)
	case float64:
		return "the number " + strconv.FormatFloat(x, 'g', -1, 64)
	case int64:
		return "the number " + strconv.FormatInt(x, 10)
	case int:
		return "the number " + strconv.Itoa(x)
	case bool:
		return "the boolean " + strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a value the JSON tree does not hold"
}

// Func decodes one value at a path; Ptr, Slice and Map take one for their
// elements.
type Func[T any] func(v any, path string) (T, error)

// Object returns v as a JSON object, or nil when it is absent or null.
func Object(v any, path string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, wrong(path, "an object", v)
	}
	return m, nil
}

// String decodes a JSON string.
func String(v any, path string) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", wrong(path, "a string", v)
	}
	return s, nil
}

// Bool decodes a JSON boolean.
func Bool(v any, path string) (bool, error) {
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, wrong(path, "a boolean", v)
	}
	return b, nil
}

// Float64 decodes a JSON number.
func Float64(v any, path string) (float64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	}
	return 0, wrong(path, "a number", v)
}

// Int64 decodes a JSON number that is an integer.
func Int64(v any, path string) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case float64:
		if x == math.Trunc(x) && x >= -(1<<63) && x < 1<<63 {
			return int64(x), nil
		}
	}
	return 0, wrong(path, "an integer", v)
}

// Int32 decodes a JSON integer that fits in 32 bits.
func Int32(v any, path string) (int32, error) {
	n, err := Int64(v, path)
	if err != nil {
		return 0, err
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, wrong(path, "a 32-bit integer", v)
	}
	return int32(n), nil
}

// Int decodes a JSON integer.
func Int(v any, path string) (int, error) {
	n, err := Int64(v, path)
	return int(n), err
}

// Any returns v as it is: for a field of type any (a schema with
// x-kubernetes-preserve-unknown-fields).
func Any(v any, _ string) (any, error) { return v, nil }

// Condition decodes a status condition.
func Condition(v any, path string) (guest.Condition, error) {
	m, err := Object(v, path)
	if err != nil || m == nil {
		return guest.Condition{}, err
	}
	var c guest.Condition
	if c.Type, err = String(m["type"], path+".type"); err != nil {
		return c, err
	}
	if c.Status, err = String(m["status"], path+".status"); err != nil {
		return c, err
	}
	if c.ObservedGeneration, err = Int64(m["observedGeneration"], path+".observedGeneration"); err != nil {
		return c, err
	}
	if c.LastTransitionTime, err = String(m["lastTransitionTime"], path+".lastTransitionTime"); err != nil {
		return c, err
	}
	if c.Reason, err = String(m["reason"], path+".reason"); err != nil {
		return c, err
	}
	c.Message, err = String(m["message"], path+".message")
	return c, err
}

// Ptr decodes v with f into a new value, or returns nil when v is absent
// or null: for an optional field whose zero value means something.
func Ptr[T any](v any, path string, f Func[T]) (*T, error) {
	if v == nil {
		return nil, nil
	}
	x, err := f(v, path)
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// Slice decodes a JSON array, each element with f.
func Slice[T any](v any, path string, f Func[T]) ([]T, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, wrong(path, "an array", v)
	}
	out := make([]T, len(list))
	for i, e := range list {
		x, err := f(e, path+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// Map decodes a JSON object as a map, each member's value with f.
func Map[T any](v any, path string, f Func[T]) (map[string]T, error) {
	m, err := Object(v, path)
	if err != nil || m == nil {
		return nil, err
	}
	out := make(map[string]T, len(m))
	for k, e := range m {
		x, err := f(e, path+"."+k)
		if err != nil {
			return nil, err
		}
		out[k] = x
	}
	return out, nil
}
