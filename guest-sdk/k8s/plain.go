package k8s

import (
	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

// Plain returns child as the host decodes it: made of map[string]any,
// []any, strings, float64 numbers, booleans and nil only, its typed members
// (a spec) encoded and decoded again. It is for tests, which can then read
// any field with guest.Object's accessors, and for setting a field that no
// type models anywhere in a child; Extra does that without encoding and
// decoding the whole child.
func Plain(child map[string]any) (guest.Object, error) {
	b, err := jsontree.Append(nil, child)
	if err != nil {
		return nil, err
	}
	v, err := jsontree.Decode(b)
	if err != nil {
		return nil, err
	}
	o, _ := v.(map[string]any)
	return o, nil
}
