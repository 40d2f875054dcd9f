// Command widget is the example reconcile module. It reconciles
// examples.wasmreconcile.io/v1alpha1 Widget objects (examples/crds) and
// computes their status from their spec:
//
//   - status.observedGeneration is metadata.generation;
//   - status.summary is derived from spec.size and spec.color, e.g. "3 x blue";
//   - condition Ready is True when the spec is valid, False with reason
//     InvalidSpec when it is not (spec.size outside 0..MaxSize). An invalid
//     spec is a terminal error: the host records a Warning Event and does not
//     retry until the spec changes.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o widget.wasm ./widget
package main

import (
	"fmt"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
)

// MaxSize is the largest valid spec.size.
const MaxSize = 100

// Version is this build's version, shown in the Ready condition's message.
// Set it with -ldflags "-X main.Version=2" (the demo and the hot-reload tests
// build a second version this way).
var Version = "1"

// Bug, set with -ldflags "-X main.Bug=loop", makes this build spin forever
// in Reconcile: `make demo` uses it to show a buggy release preempted by the
// host (an Event on each Widget, wasmreconcile_preemptions_total) and then
// rolled back. Never set it otherwise.
var Bug = ""

func init() {
	guest.Handle(guest.Manifest{
		Name: "widget",
		For:  guest.GVK("examples.wasmreconcile.io", "v1alpha1", "Widget"),
	}, Reconcile)
}

// Reconcile computes a Widget's status from its spec.
func Reconcile(req *guest.Request) *guest.Response {
	if Bug == "loop" {
		for {
		}
	}
	obj := guest.Object(req.Object)
	gen := obj.Generation()
	size, hasSize := obj.NestedInt64("spec", "size")
	if !hasSize {
		size = 1
	}
	color := obj.NestedString("spec", "color")
	if color == "" {
		color = "grey"
	}

	status := map[string]any{"observedGeneration": gen}
	if size < 0 || size > MaxSize {
		msg := fmt.Sprintf("spec.size %d is outside 0..%d; set spec.size within range", size, MaxSize)
		status["summary"] = "invalid"
		status["conditions"] = []any{obj.SetCondition(guest.Condition{
			Type: "Ready", Status: "False", ObservedGeneration: gen, Reason: "InvalidSpec", Message: msg,
		}, req.Now)}
		guest.Warnf("%s/%s: %s", obj.Namespace(), obj.Name(), msg)
		return &guest.Response{Status: status, Error: &guest.Error{Message: msg, Terminal: true}}
	}

	status["summary"] = fmt.Sprintf("%d x %s", size, color)
	status["conditions"] = []any{obj.SetCondition(guest.Condition{
		Type: "Ready", Status: "True", ObservedGeneration: gen, Reason: "Reconciled",
		Message: fmt.Sprintf("generation %d reconciled by widget v%s", gen, Version),
	}, req.Now)}
	guest.Debugf("%s/%s: summary %q", obj.Namespace(), obj.Name(), status["summary"])
	return &guest.Response{Status: status}
}

func main() {}
