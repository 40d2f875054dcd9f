// Package offline runs one reconcile of a module with no cluster: the
// request is built from objects given by the caller, and the response is
// returned as the guest produced it. It backs `operator invoke` and
// `operator test`, and is deterministic: the same module and input give the
// same response and the same fuel.
package offline

import (
	"context"
	"errors"
	"time"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// DefaultNow is Request.Now when Input.Now is empty. A fixed clock keeps
// offline runs deterministic.
const DefaultNow = "2000-01-01T00:00:00Z"

// Input is what the guest observes.
type Input struct {
	Object     map[string]any   `json:"object"`
	Children   []map[string]any `json:"children,omitempty"`
	Related    []map[string]any `json:"related,omitempty"`
	Finalizing bool             `json:"finalizing,omitempty"`
	Config     map[string]any   `json:"config,omitempty"`
	Attempt    int              `json:"attempt,omitempty"`
	// Now defaults to DefaultNow.
	Now string `json:"now,omitempty"`
}

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
	return utiljson.Marshal(abi.Request{
		Object: in.Object, Children: in.Children, Related: in.Related,
		Finalizing: in.Finalizing, Config: in.Config, Attempt: in.Attempt, Now: now,
	})
}

// Run calls m once with in.
func Run(ctx context.Context, m *engine.Module, in Input) Outcome {
	req, err := Request(in)
	if err != nil {
		return Outcome{Err: &engine.ABIError{Module: m.Name(), Call: "invoke", Reason: "encoding the request: " + err.Error()}}
	}
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

// Error kinds reported by `operator invoke` and matched by `operator test`.
const (
	KindFuelExhausted    = "FuelExhausted"
	KindDeadlineExceeded = "DeadlineExceeded"
	KindCanceled         = "Canceled"
	KindTrap             = "Trap"
	KindMemoryLimit      = "MemoryLimit"
	KindStackOverflow    = "StackOverflow"
	KindABI              = "ABI"
	KindInvalidModule    = "InvalidModule"
	// KindReconcile is a guest that reported an error in its response.
	KindReconcile = "Reconcile"
)

// ErrorKind names the kind of an engine error.
func ErrorKind(err error) string {
	var (
		fuel     *engine.FuelExhaustedError
		deadline *engine.DeadlineExceededError
		canceled *engine.CanceledError
		mem      *engine.MemoryLimitError
		stack    *engine.StackOverflowError
		abiErr   *engine.ABIError
		invalid  *engine.InvalidModuleError
	)
	switch {
	case errors.As(err, &invalid):
		return KindInvalidModule
	case errors.As(err, &fuel):
		return KindFuelExhausted
	case errors.As(err, &deadline):
		return KindDeadlineExceeded
	case errors.As(err, &canceled):
		return KindCanceled
	case errors.As(err, &mem):
		return KindMemoryLimit
	case errors.As(err, &stack):
		return KindStackOverflow
	case errors.As(err, &abiErr):
		return KindABI
	}
	return KindTrap
}
