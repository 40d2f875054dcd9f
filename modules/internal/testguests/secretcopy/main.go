// Command secretcopy is a test guest that carries a Secret's value into
// every place a guest's answer can hold one, for the tests that the host
// shows no Secret value (host/operator/internal/clusterscoped/hardening2_test.go): it reconciles
// Gadgets (host/internal/testenv/crds/gadgets.yaml), reads the Secret
// named by spec.secret in the Gadget's namespace, and copies its
// data.password, decoded, into status.copied (prefixed by Version), as
// base64 into status.copiedBase64, into a ConfigMap child's data.copy and
// a Secret child's stringData.copy. With spec.fail it answers a terminal
// error whose message holds the value instead.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o secretcopy.wasm .
package main

import (
	"encoding/base64"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// Version prefixes status.copied; a build with another Version answers
// otherwise (a shadow candidate that differs).
var Version = "v1:"

func init() {
	guest.Handle(guest.Manifest{
		Name:  "secretcopy",
		For:   guest.GVK("test.wasmreconcile.io", "v1", "Gadget"),
		Owns:  []guest.GroupVersionKind{guest.GVK("", "v1", "ConfigMap"), guest.GVK("", "v1", "Secret")},
		Reads: []guest.GroupVersionKind{guest.GVK("", "v1", "Secret")},
	}, reconcile)
}

func reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	name := obj.NestedString("spec", "secret")
	s, found, err := guest.Get("v1", "Secret", obj.Namespace(), name)
	if err != nil || !found {
		return &guest.Response{Error: &guest.Error{Message: "the Secret " + name + " is not there yet"}}
	}
	enc := s.NestedString("data", "password")
	value, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return guest.TerminalErrorf("data.password is not base64: %v", err)
	}
	if fail, _ := obj.NestedField("spec", "fail"); fail == true {
		return guest.TerminalErrorf("cannot use the password %s", value)
	}
	child := func(kind, field string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": obj.Name() + "-copy"},
			field:      map[string]any{"copy": string(value)}}
	}
	return &guest.Response{
		Status:   map[string]any{"copied": Version + string(value), "copiedBase64": enc},
		Children: []map[string]any{child("ConfigMap", "data"), child("Secret", "stringData")},
	}
}

func main() {}
