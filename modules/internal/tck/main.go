// Command tck is the Go guest of the wasmreconcile conformance kit. It
// exercises every field of the ABI request and response and every host
// function, driven by spec.op; testdata/cases is the conformance suite, run
// offline by `operator test` in `make test` (the guest is built by
// `make modules`). A guest in another language conforms when it implements
// the same ops and passes the same cases.
//
//	echo        status echoes what the host passed: attempt, now, finalizing,
//	            config, and the counts and names of children and related objects
//	log         logs one line at each level (debug, info, warn, error)
//	read        cache reads: get found, get missing, list with a selector,
//	            a list across namespaces and a get in another namespace (both
//	            outside the default read scope), an undeclared kind, a bad
//	            selector
//	readbig     lists spec.count ConfigMaps of about 1 KiB each (more than the
//	            SDK's first 64 KiB buffer), to prove the buffer grows
//	children    desired children of both owned kinds, two events and a requeue
//	retry       a retryable error, with a status explaining it
//	terminal    a terminal error
//	statusonly  a status and no children field: the children are left alone
//	prune       an empty children list: every child is deleted
//	finalize    finalized = true and no children when finalizing, else an error
//	big         a response of spec.bytes bytes
//	emit        the response is spec.response, as is: the protocol's rules
//	            (docs/abi.md, "Response rules") are checked on what the
//	            host receives, whatever the guest's language
package main

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

func init() {
	guest.Handle(guest.Manifest{
		Name:  "tck",
		For:   guest.GVK("tck.wasmreconcile.io", "v1", "Probe"),
		Owns:  []guest.GroupVersionKind{guest.GVK("", "v1", "ConfigMap"), guest.GVK("", "v1", "Service")},
		Reads: []guest.GroupVersionKind{guest.GVK("", "v1", "Secret")},
		// A change to the Secret named by spec.secretName reconciles the
		// Probe: every manifest field is part of the kit.
		Triggers:  []guest.Trigger{{Kind: guest.GVK("", "v1", "Secret"), Field: "spec.secretName"}},
		Finalizer: true,
	}, reconcile)
}

func names(objs []map[string]any) []any {
	out := []any{}
	for _, o := range objs {
		ob := guest.Object(o)
		out = append(out, ob.NestedString("kind")+"/"+ob.Name())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].(string) < out[j].(string) })
	return out
}

// failures lists the request's childFailures as "Kind/name:Reason", sorted.
func failures(fs []guest.ChildFailure) []any {
	out := []any{}
	for _, f := range fs {
		out = append(out, f.Kind+"/"+f.Name+":"+f.Reason)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].(string) < out[j].(string) })
	return out
}

func reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	ns := obj.Namespace()
	switch op := obj.NestedString("spec", "op"); op {
	case "emit":
		spec, _ := obj.NestedField("spec", "response")
		b, err := json.Marshal(spec)
		if err != nil {
			return guest.TerminalErrorf("tck: encoding spec.response: %v", err)
		}
		var resp guest.Response
		if err := json.Unmarshal(b, &resp); err != nil {
			return guest.TerminalErrorf("tck: spec.response is not a response: %v", err)
		}
		return &resp
	case "echo":
		cfg := req.Config
		if cfg == nil {
			cfg = map[string]any{}
		}
		return &guest.Response{Status: map[string]any{
			"attempt": req.Attempt, "now": req.Now, "finalizing": req.Finalizing, "config": cfg,
			"children": names(req.Children), "related": names(req.Related), "childFailures": failures(req.ChildFailures),
		}}
	case "statusonly": // no children: they are left alone
		return &guest.Response{Status: map[string]any{"phase": "statusonly"}}
	case "prune": // an empty list: every child is deleted
		return &guest.Response{Status: map[string]any{"phase": "prune"}, Children: guest.NoChildren()}
	case "log":
		guest.Debugf("tck debug line")
		guest.Infof("tck info line")
		guest.Warnf("tck warn line")
		guest.Errorlogf("tck error line")
		return &guest.Response{Status: map[string]any{"logged": 4}}
	case "read":
		st := map[string]any{}
		s, found, err := guest.Get("v1", "Secret", ns, "creds")
		st["getFound"], st["getErr"] = found, errString(err)
		if found {
			st["getName"] = s.Name()
		}
		_, found, err = guest.Get("v1", "Secret", ns, "missing")
		st["missingFound"], st["missingErr"] = found, errString(err)
		list, err := guest.List("v1", "Secret", ns, "tier=backend")
		st["listed"], st["listErr"] = len(list), errString(err)
		all, err := guest.List("v1", "Secret", "", "")
		st["listedAll"], st["listAllErr"] = len(all), errString(err)
		_, _, err = guest.Get("v1", "Secret", "other-ns", "elsewhere")
		st["otherNamespaceForbidden"] = errors.Is(err, guest.ErrForbidden)
		_, _, err = guest.Get("v1", "Pod", ns, "p")
		st["podForbidden"] = errors.Is(err, guest.ErrForbidden)
		_, err = guest.List("v1", "Secret", ns, "tier in (")
		st["badSelectorRefused"] = err != nil
		return &guest.Response{Status: st}
	case "readbig":
		list, err := guest.List("v1", "Secret", ns, "")
		if err != nil {
			return guest.Errorf("list: %v", err)
		}
		total := 0
		for _, o := range list {
			if d, ok := o.NestedField("data", "blob"); ok {
				total += len(d.(string))
			}
		}
		return &guest.Response{Status: map[string]any{"listed": len(list), "bytes": total}}
	case "children":
		labels := map[string]any{"tck": "yes"}
		return &guest.Response{
			Children: []map[string]any{
				{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": obj.Name() + "-cm", "labels": labels}, "data": map[string]any{"k": "v"}},
				{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": obj.Name() + "-svc", "labels": labels},
					"spec": map[string]any{"ports": []any{map[string]any{"port": 80}}}},
			},
			Events: []guest.Event{
				{Type: "Normal", Reason: "ChildrenDesired", Message: "2 children"},
				{Type: "Warning", Reason: "JustTesting", Message: "a warning from the tck"},
			},
			RequeueAfterSeconds: 42,
			Status:              map[string]any{"phase": "children"},
		}
	case "retry":
		return &guest.Response{
			Status: map[string]any{"phase": "retrying", "attempt": req.Attempt},
			Error:  &guest.Error{Message: guest.Sprintf("tck: retry requested at attempt %d", req.Attempt)},
		}
	case "terminal":
		return guest.TerminalErrorf("tck: terminal error requested")
	case "finalize":
		if !req.Finalizing {
			return guest.TerminalErrorf("tck: finalize op without finalizing")
		}
		return &guest.Response{Finalized: true, Children: guest.NoChildren()}
	case "big":
		n, _ := obj.NestedInt64("spec", "bytes")
		return &guest.Response{Status: map[string]any{"blob": strings.Repeat("x", int(n))}}
	default:
		return guest.TerminalErrorf("tck: unknown spec.op %q", op)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "error"
}

func main() {}
