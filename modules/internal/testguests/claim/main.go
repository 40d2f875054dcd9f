// Command claim is a test guest for the host's ownership rules (docs/abi.md,
// "Children"; docs/security.md). It reconciles Responders
// (host/internal/testenv/crds/responders.yaml) and answers every reconcile
// with the object's spec.response, as is, except that a response with a
// status gets status.childFailures: the request's childFailures as
// "Kind/name:Reason", so tests can see what the guest was told. When
// spec.read names an object ({apiVersion, kind, namespace, name}), the guest
// reads it through cache_read and reports status.read: "found" or the
// host's refusal.
//
// Its manifest depends on the build's main.Version (-ldflags -X), so that
// tests get modules that differ only in what they declare:
//
//	""        name claim: owns ConfigMap and Secret, reads Secret
//	"second"  name claim-second: the same kind, a second module
//	"self"    name claim-self: owns Responder, its own kind (refused)
//	"cluster" name claim-cluster: owns ClusterRole, cluster-scoped (refused)
//	"fin"     name claim-fin: as "", with a finalizer
//	"nofin"   name claim-fin: as "fin" without the finalizer, a new
//	          version of claim-fin that drops it
//	"late"    name claim-late: reconciles Latecomers
//	          (late.wasmreconcile.io/v1), a kind no CRD serves until a
//	          test installs one
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o claim.wasm .
package main

import (
	"encoding/json"
	"sort"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// Version selects the manifest; see the package documentation.
var Version string

func init() {
	m := guest.Manifest{
		Name:  "claim",
		For:   guest.GVK("test.wasmreconcile.io", "v1", "Responder"),
		Owns:  []guest.GroupVersionKind{guest.GVK("", "v1", "ConfigMap"), guest.GVK("", "v1", "Secret")},
		Reads: []guest.GroupVersionKind{guest.GVK("", "v1", "Secret")},
	}
	switch Version {
	case "":
	case "second":
		m.Name = "claim-second"
	case "self":
		m.Name = "claim-self"
		m.Owns = append(m.Owns, m.For)
	case "cluster":
		m.Name = "claim-cluster"
		m.Owns = append(m.Owns, guest.GVK("rbac.authorization.k8s.io", "v1", "ClusterRole"))
	case "fin":
		m.Name = "claim-fin"
		m.Finalizer = true
	case "nofin":
		m.Name = "claim-fin"
	case "late":
		m.Name = "claim-late"
		m.For = guest.GVK("late.wasmreconcile.io", "v1", "Latecomer")
	default:
		panic("claim: unknown Version " + Version)
	}
	guest.Handle(m, reconcile)
}

func reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	spec, _ := obj.NestedField("spec", "response")
	b, err := json.Marshal(spec)
	if err != nil {
		return guest.TerminalErrorf("claim: encoding spec.response: %v", err)
	}
	var resp guest.Response
	if err := json.Unmarshal(b, &resp); err != nil {
		return guest.TerminalErrorf("claim: spec.response is not a response: %v", err)
	}
	if req.Finalizing {
		resp.Finalized = true
	}
	if resp.Status == nil {
		return &resp
	}
	told := []any{}
	for _, f := range req.ChildFailures {
		told = append(told, f.Kind+"/"+f.Name+":"+f.Reason)
	}
	sort.Slice(told, func(i, j int) bool { return told[i].(string) < told[j].(string) })
	resp.Status["childFailures"] = told
	if r, ok := obj.NestedField("spec", "read"); ok {
		ref, _ := r.(map[string]any)
		s := func(k string) string { v, _ := ref[k].(string); return v }
		switch _, found, err := guest.Get(s("apiVersion"), s("kind"), s("namespace"), s("name")); {
		case err != nil:
			resp.Status["read"] = err.Error()
		case found:
			resp.Status["read"] = "found"
		default:
			resp.Status["read"] = "not found"
		}
	}
	return &resp
}

func main() {}
