// Command triggered is a test guest for related-object triggers
// (docs/abi.md, "Related-object triggers"). It reconciles Responders
// (host/internal/testenv/crds/responders.yaml), declares one trigger of
// each mapping, each on a kind of its own:
//
//	ConfigMap       selector: spec.selector
//	Secret          ownerReference
//	Service         field: spec.target
//	ServiceAccount  all
//
// and reports in status.seen the related objects of its namespace as
// "Kind/name" (sorted, comma-separated), and in status.history every value
// seen has had, in the order its calls saw them (at most 20). A Responder
// is called only by its own changes and by triggers, so its history shows
// which related objects' changes reached it.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o triggered.wasm .
package main

import (
	"sort"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

var kinds = []guest.GroupVersionKind{
	guest.GVK("", "v1", "ConfigMap"),
	guest.GVK("", "v1", "Secret"),
	guest.GVK("", "v1", "Service"),
	guest.GVK("", "v1", "ServiceAccount"),
}

func init() {
	guest.Handle(guest.Manifest{
		Name:  "triggered",
		For:   guest.GVK("test.wasmreconcile.io", "v1", "Responder"),
		Reads: kinds,
		Triggers: []guest.Trigger{
			{Kind: kinds[0], Selector: "spec.selector"},
			{Kind: kinds[1], OwnerReference: true},
			{Kind: kinds[2], Field: "spec.target"},
			{Kind: kinds[3], All: true},
		},
	}, reconcile)
}

func reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	var names []string
	for _, k := range kinds {
		list, err := guest.List(k.Version, k.Kind, obj.Namespace(), "")
		if err != nil {
			return &guest.Response{Error: &guest.Error{Message: "listing " + k.Kind + ": " + err.Error()}}
		}
		for _, o := range list {
			names = append(names, k.Kind+"/"+o.Name())
		}
	}
	sort.Strings(names)
	seen := strings.Join(names, ",")
	var history []any
	if h, ok := obj.NestedField("status", "history"); ok {
		history, _ = h.([]any)
	}
	if n := len(history); n == 0 || history[n-1] != seen {
		history = append(history, seen)
	}
	if len(history) > 20 {
		history = history[len(history)-20:]
	}
	return &guest.Response{Status: map[string]any{"seen": seen, "history": history}}
}

func main() {}
