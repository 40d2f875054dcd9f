// Command misbehave is a test guest for the host. It reconciles Gadgets
// (host/internal/testenv/crds/gadgets.yaml) and
// misbehaves on purpose according to spec.mode, so that host tests can prove
// each failure is contained:
//
//	""         status.summary = "ok"
//	"flaky"    retryable error until the attempt counter reaches spec.failAttempts,
//	           then status.attempts = the attempt that succeeded
//	"terminal" terminal error
//	"spin"     for {} — never returns
//	"count"    a counter loop of spec.iterations iterations, then "ok"
//	"alloc"    allocates and keeps 1 MiB chunks until memory runs out
//	"recurse"  unbounded Go recursion
//	"panic"    the handler panics (the SDK recovers it into a retryable error)
//	"exit"     os.Exit(3) — the instance dies
//	"stderr"   writes spec.bytes bytes to stderr, from "STDERR-HEAD" to
//	           "STDERR-TAIL", then os.Exit(3) — a trap with a long stderr
//	"big"      a response of spec.bytes bytes
//	"events"   a Normal and a Warning event, no status
//	"log"      logs spec.lines lines at info level, then "ok"
//	"flood"    spec.events Events (reasons Flood1, Flood2, …), status.now =
//	           the request's now (so the object changes every second), and
//	           requeueAfterSeconds: 1 — a guest that floods its object
//	"child"    a ConfigMap child, although the manifest owns nothing
//	"config"   status.config is the module configuration it was given
//	"read"     reads ConfigMap spec.configMap and lists ConfigMaps matching
//	           spec.selector in its namespace (declared in reads), and tries a
//	           Secret (not declared); reports all three in its status
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o misbehave.wasm .
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// sink keeps the recursion's result live.
//
//lint:ignore U1000 written by the recurse case; the guest never reads it
var sink int

func init() {
	guest.Handle(guest.Manifest{
		Name:  "misbehave",
		For:   guest.GVK("test.wasmreconcile.io", "v1", "Gadget"),
		Reads: []guest.GroupVersionKind{guest.GVK("", "v1", "ConfigMap")},
	}, reconcile)
}

func reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	ok := map[string]any{"observedGeneration": obj.Generation(), "summary": "ok"}
	switch mode := obj.NestedString("spec", "mode"); mode {
	case "":
		return &guest.Response{Status: ok}
	case "flaky":
		want, _ := obj.NestedInt64("spec", "failAttempts")
		if int64(req.Attempt) < want {
			return guest.Errorf("flaky: attempt %d of %d fails on purpose", req.Attempt, want)
		}
		ok["summary"] = "recovered"
		ok["attempts"] = req.Attempt
		return &guest.Response{Status: ok}
	case "terminal":
		return guest.TerminalErrorf("terminal: spec.mode=terminal; change spec.mode")
	case "spin":
		for {
			sink++
		}
	case "count":
		n, _ := obj.NestedInt64("spec", "iterations")
		for i := int64(0); i < n; i++ {
			sink += int(i)
		}
		ok["summary"] = "counted"
		return &guest.Response{Status: ok}
	case "alloc":
		var keep [][]byte
		for {
			keep = append(keep, make([]byte, 1<<20))
			sink += len(keep)
		}
	case "recurse":
		sink = recurse(0)
	case "panic":
		var m map[string]int
		//lint:ignore SA5000 the guest panics on purpose
		m["boom"] = 1
	case "exit":
		os.Exit(3)
	case "stderr":
		n, _ := obj.NestedInt64("spec", "bytes")
		const head, tail = "STDERR-HEAD\n", "\nSTDERR-TAIL"
		fill := max(int(n)-len(head)-len(tail), 0)
		os.Stderr.WriteString(head + strings.Repeat("stderr line of the guest\n", fill/25+1)[:fill] + tail)
		os.Exit(3)
	case "big":
		n, _ := obj.NestedInt64("spec", "bytes")
		ok["summary"] = strings.Repeat("x", int(n))
		return &guest.Response{Status: ok}
	case "events":
		return &guest.Response{Events: []guest.Event{
			{Type: "Normal", Reason: "Hello", Message: "normal event from the guest"},
			{Type: "Warning", Reason: "Careful", Message: "warning event from the guest"},
		}}
	case "log":
		n, _ := obj.NestedInt64("spec", "lines")
		for i := int64(1); i <= n; i++ {
			guest.Infof("line %d of %d", i, n)
		}
		return &guest.Response{Status: ok}
	case "flood":
		n, _ := obj.NestedInt64("spec", "events")
		resp := &guest.Response{Status: map[string]any{"now": req.Now}, RequeueAfterSeconds: 1}
		for i := int64(1); i <= n; i++ {
			resp.Events = append(resp.Events, guest.Event{Type: "Normal", Reason: fmt.Sprintf("Flood%d", i), Message: fmt.Sprintf("event %d of %d", i, n)})
		}
		return resp
	case "read":
		st := map[string]any{"observedGeneration": obj.Generation()}
		cm, found, err := guest.Get("v1", "ConfigMap", obj.Namespace(), obj.NestedString("spec", "configMap"))
		if err != nil {
			return guest.Errorf("get: %v", err)
		}
		st["found"] = found
		if found {
			v, _ := cm.NestedField("data")
			st["data"] = v
		}
		list, err := guest.List("v1", "ConfigMap", obj.Namespace(), obj.NestedString("spec", "selector"))
		if err != nil {
			return guest.Errorf("list: %v", err)
		}
		st["listed"] = len(list)
		_, _, err = guest.Get("v1", "Secret", obj.Namespace(), "any")
		st["secretForbidden"] = errors.Is(err, guest.ErrForbidden)
		return &guest.Response{Status: st}
	case "config":
		return &guest.Response{Status: map[string]any{"config": req.Config}}
	case "child":
		return &guest.Response{Children: []map[string]any{{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "stray"},
		}}}
	default:
		return guest.TerminalErrorf("unknown spec.mode %q", mode)
	}
	return nil
}

// recurse never returns: the guest exhausts its stack on purpose.
//
//lint:ignore SA5007 the recursion is the misbehaviour under test
func recurse(n int) int { return recurse(n+1) + 1 }

func main() {}
