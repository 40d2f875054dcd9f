// Command respond is a test guest for the reconcile protocol. It reconciles
// Responders (host/internal/testenv/crds/responders.yaml) and answers every
// reconcile with the object's spec.response, as is: a status, events,
// children, a requeue, an error. Its cases (testdata/cases) give one
// response per rule of docs/abi.md ("Response rules"); `operator test` runs
// them offline, and the host's protocol parity test runs the same cases
// against a real API server and checks that the cluster refuses each with
// the same kind and message.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o respond.wasm .
package main

import (
	"encoding/json"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

func init() {
	guest.Handle(guest.Manifest{
		Name: "respond",
		For:  guest.GVK("test.wasmreconcile.io", "v1", "Responder"),
		Owns: []guest.GroupVersionKind{
			guest.GVK("", "v1", "ConfigMap"),
			guest.GVK("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
		},
	}, reconcile)
}

func reconcile(req *guest.Request) *guest.Response {
	spec, _ := guest.Object(req.Object).NestedField("spec", "response")
	b, err := json.Marshal(spec)
	if err != nil {
		return guest.TerminalErrorf("respond: encoding spec.response: %v", err)
	}
	var resp guest.Response
	if err := json.Unmarshal(b, &resp); err != nil {
		return guest.TerminalErrorf("respond: spec.response is not a response: %v", err)
	}
	return &resp
}

func main() {}
