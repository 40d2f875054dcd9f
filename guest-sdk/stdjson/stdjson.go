// Package stdjson makes the guest SDK encode, with encoding/json, the
// values its own encoder does not handle: structs, pointers to structs and
// other types in a Response's status, a child, or a k8s type's Extra.
// Import it for its side effect:
//
//	import _ "github.com/wasmreconcile/wasmreconcile/guest-sdk/stdjson"
//
// Without it, such a value makes the call fail with an error that names
// its type. With it, a module is about 1.2 MB larger (encoding/json and
// reflect), and the host keeps more machine code for every loaded module;
// docs/benchmarks.md has the sizes. Maps, slices, strings, numbers,
// booleans and package k8s's types never need it.
package stdjson

import (
	"encoding/json"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/jsontree"
)

func init() { jsontree.SetFallback(json.Marshal) }
