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
	"strconv"

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

// Work, set with -ldflags "-X main.Work=N" (N a whole number), makes each
// Reconcile first run N rounds of a 64-bit hash: the stand-in for a module
// whose reconcile costs CPU, which hack/benche2e's -shard-work builds to
// measure how sharding splits such work. Leave it unset otherwise.
var Work = ""

// workRounds is Work parsed at start.
var workRounds int

// Name is the module's name, and Group and Kind the kind it reconciles (at
// version v1alpha1). The end-to-end benchmark (hack/benche2e) builds twenty
// copies of this module for twenty kinds of the Widget's schema, with
// -ldflags "-X main.Name=widget7 -X main.Group=w7.bench.wasmreconcile.io
// -X main.Kind=Widget7". Leave them unset otherwise.
var (
	Name  = "widget"
	Group = "examples.wasmreconcile.io"
	Kind  = "Widget"
)

func init() {
	if Work != "" {
		n, err := strconv.Atoi(Work)
		if err != nil || n < 0 {
			panic("widget: main.Work=" + strconv.Quote(Work) + " is not a whole number of rounds; build with -ldflags \"-X main.Work=N\"")
		}
		workRounds = n
	}
	handle(guest.Manifest{Name: Name, For: guest.GVK(Group, "v1alpha1", Kind)})
}

func Reconcile(req *guest.LazyRequest) *guest.Response {
	if Bug == "loop" {
		//lint:ignore SA5002 the spinning build of the widget, for the engine's deadline tests
		for {
		}
	}
	if workRounds > 0 && spin(workRounds) == 0 {
		guest.Warn("the work's hash came to zero") // uses the result, so that the loop stays
	}
	obj := req.Object()
	meta := obj.Meta()
	gen := meta.Generation
	spec := obj.Get("spec")
	size, hasSize := spec.Get("size").Int64()
	if !hasSize {
		size = 1
	}
	color := spec.Get("color").String()
	if color == "" {
		color = "grey"
	}

	status := map[string]any{"observedGeneration": gen}
	if size < 0 || size > MaxSize {
		msg := "spec.size " + strconv.FormatInt(size, 10) + " is outside 0.." + strconv.Itoa(MaxSize) + "; set spec.size within range"
		status["summary"] = "invalid"
		status["conditions"] = []any{obj.SetCondition(guest.Condition{
			Type: "Ready", Status: "False", ObservedGeneration: gen, Reason: "InvalidSpec", Message: msg,
		}, req.Now())}
		guest.Warn(meta.Namespace + "/" + meta.Name + ": " + msg)
		return &guest.Response{Status: status, Error: &guest.Error{Message: msg, Terminal: true}}
	}

	// strconv, not guest.Sprintf, here and above: what Sprintf costs
	// (0.1 MB of module) is worth it for many messages, not for two.
	status["summary"] = strconv.FormatInt(size, 10) + " x " + color
	status["conditions"] = []any{obj.SetCondition(guest.Condition{
		Type: "Ready", Status: "True", ObservedGeneration: gen, Reason: "Reconciled",
		Message: "generation " + strconv.FormatInt(gen, 10) + " reconciled by widget v" + Version,
	}, req.Now())}
	return &guest.Response{Status: status}
}

func main() {}

// spin runs n rounds of FNV-1a's xor-and-multiply step, each over a whole
// 64-bit round number (not its bytes): CPU work whose instructions (and
// so fuel, ~9.6 a round) grow as n.
func spin(n int) uint64 {
	h := uint64(14695981039346656037)
	for i := range n {
		h ^= uint64(i)
		h *= 1099511628211
	}
	return h
}
