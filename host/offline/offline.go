// Package offline runs one reconcile of a module with no cluster: the
// request is built from objects given by the caller, and the response is
// returned as the guest produced it. It backs `operator invoke` and
// `operator test`, and is deterministic: the same module and input give the
// same response and the same fuel.
package offline

import (
	"context"
	"time"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/host/cacheread"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// DefaultNow is Request.Now when Input.Now is empty. A fixed clock keeps
// offline runs deterministic.
const DefaultNow = "2000-01-01T00:00:00Z"

// Input is what the guest observes: an ABI request. An empty Now becomes
// DefaultNow.
type Input = abi.Request

// Outcome is the result of one run.
type Outcome struct {
	// Response is the guest's response; nil when the call failed.
	Response *abi.Response
	// Fuel is the fuel the call used, also when it failed.
	Fuel uint64
	// Duration is the time spent in the guest.
	Duration time.Duration
	// Err is the engine's typed error, or nil. A guest that reports an
	// error in its response is not an Err: see Response.Error.
	Err error
}

// Request encodes in as the ABI request.
func Request(in Input) ([]byte, error) {
	now := in.Now
	if now == "" {
		now = DefaultNow
	}
	in.Now = now
	return utiljson.Marshal(in)
}

// Run calls m once with in.
func Run(ctx context.Context, m *engine.Module, in Input) Outcome {
	req, err := Request(in)
	if err != nil {
		return Outcome{Err: &engine.ABIError{Module: m.Name(), Call: "invoke", Reason: "encoding the request: " + err.Error()}}
	}
	// Reads are served from what the guest was given: the object, its
	// children and the related objects.
	objects := append(append([]map[string]any{in.Object}, in.Children...), in.Related...)
	ctx = engine.WithCacheReader(ctx, cacheread.New(m.Manifest(), cacheread.MemoryBackend{Objects: objects}))
	res, err := m.Reconcile(ctx, "invoke "+objectName(in.Object), req)
	out := Outcome{Fuel: res.Fuel, Duration: res.Duration, Err: err}
	if err != nil {
		return out
	}
	var resp abi.Response
	if err := utiljson.Unmarshal(res.Output, &resp); err != nil {
		out.Err = &engine.ABIError{Module: m.Name(), Call: "invoke", Reason: "response is not valid JSON: " + err.Error()}
		return out
	}
	out.Response = &resp
	return out
}

func objectName(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// KindReconcile is the error kind of a guest that reported an error in its
// response; the other kinds are engine.KindOf's.
const KindReconcile = "Reconcile"
