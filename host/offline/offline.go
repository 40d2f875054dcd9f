// Package offline runs one reconcile of a module with no cluster: the
// request is built from objects given by the caller, and the response is
// decoded and checked by package protocol exactly as the cluster reconciler
// does, so an invalid response is refused here with the same kind and
// message as in a cluster. With Options.Schemas, the desired children and
// status are also checked against their schemas as the API server checks
// them (package schemacheck). It backs `operator invoke` and `operator test`,
// and is deterministic: the same module and input give the same response and
// the same fuel.
package offline

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/cacheread"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// DefaultNow is Request.Now when Input.Now is empty. A fixed clock keeps
// offline runs deterministic.
const DefaultNow = "2000-01-01T00:00:00Z"

// Input is what the guest observes: an ABI request. An empty Now becomes
// DefaultNow.
type Input = abi.Request

// SchemaChecker checks a response's desired children and status against
// the schemas the API server checks them against. *schemacheck.Checker is
// one; the interface keeps the API server's validation code (CEL included)
// out of the programs that link this package only to replay calls, such
// as the operator's flight recorder.
type SchemaChecker interface {
	// Check returns the kinds it has no schema for, and a
	// *schemacheck.Error when a write would be refused. resp is the
	// decoded response of the call named call to module, for owner.
	Check(module, call string, owner map[string]any, resp *protocol.Response) (unchecked []schema.GroupVersionKind, err error)
}

// Options configure Run. The zero value is ready to use.
type Options struct {
	// Scopes tells which kinds are namespaced, for the children rules.
	// Defaults to protocol.Builtin: the built-in kinds are known, and any
	// other kind is taken as namespaced (chain a schemacheck.Checker, which
	// knows its CRDs' scopes).
	Scopes protocol.Scopes
	// Limits bound the response, as in the cluster; see protocol.Limits
	// for the defaults.
	Limits protocol.Limits
	// Log receives the guest's log lines, as the reconcile's logger does
	// in the cluster (a logger named "guest"; debug lines at V(1)), within
	// the same per-call budget (engine.Limits.MaxLogLines, MaxLogBytes).
	// NewLogger writes them to a terminal. Defaults to discarding them.
	Log logr.Logger
	// ReadNamespaces are the namespaces beyond the object's own the guest
	// may read through cache_read, as ReconcileModule spec.readNamespaces
	// grants in the cluster ("*" for every namespace). Defaults to none.
	ReadNamespaces []string
	// Schemas, when set, checks the desired children and status against
	// the schemas the API server checks them against: the CRDs it was
	// loaded with (schemacheck.LoadDir, `--crds DIR`) and the built-in
	// kinds. A write the API server would refuse fails the run with a
	// *schemacheck.Error (kind InvalidResponse). Defaults to nil: no schema
	// check. Give it as Scopes too (protocol.Chain(protocol.Builtin,
	// Schemas)) for the scopes of the CRDs' kinds.
	Schemas SchemaChecker
	// Fresh runs the call on a new instance of the module, discarded after
	// it (engine.Module.ReconcileFresh): the answer and the fuel depend on
	// the module and the input only, not on the calls run before on the
	// same module. Recorded production calls are replayed this way.
	// Defaults to false: a pooled instance, whose guest heap carries over
	// from earlier calls (a Go guest's fuel varies by a few percent).
	Fresh bool
	// Reads, when set, wraps the reader that serves the guest's
	// cache_read from the input (the object, its children, the related
	// objects): `operator replay` answers only the reads production made.
	// Defaults to nil: every read is served from the input.
	Reads func(engine.CacheReader) engine.CacheReader
}

// Outcome is the result of one run.
type Outcome struct {
	// Response is the guest's checked response; nil when the call failed or
	// the response broke a rule.
	Response *protocol.Response
	// Digest is the version of the module that ran ("sha256:…").
	Digest string
	// Fuel is the fuel the call used, also when it failed.
	Fuel uint64
	// Duration is the time spent in the guest.
	Duration time.Duration
	// Err is how the run failed, or nil: an engine error, an
	// *engine.ABIError or *protocol.InvalidResponseError for a response the
	// cluster would refuse, a *schemacheck.Error for children or a status
	// the API server would refuse (Options.Schemas; Response is then set),
	// or a *protocol.GuestError when the guest reported an error (Response
	// is then set: its status is still applied in a cluster).
	Err error
	// Output is the guest's answer as it returned it; nil when the call
	// failed.
	Output []byte
	// Unchecked are the kinds of the desired children and status that
	// Options.Schemas has no schema for, and did not check: kinds of CRDs
	// not given.
	Unchecked []schema.GroupVersionKind
}

// Kind is how the run ended, in the host's one vocabulary.
func (o Outcome) Kind() protocol.Kind { return protocol.KindOf(o.Err) }

// Run calls m once with in, and checks the response.
func Run(ctx context.Context, m *engine.Module, in Input, opts Options) Outcome {
	if in.Now == "" {
		in.Now = DefaultNow
	}
	call := protocol.CallName(in.Object)
	req, err := protocol.EncodeRequest(in)
	if err != nil {
		return Outcome{Digest: m.Digest(), Err: &engine.ABIError{Module: m.Name(), Call: call, Reason: "encoding the request: " + err.Error()}}
	}
	// Reads are served from what the guest was given: the object, its
	// children and the related objects.
	objects := append(append([]map[string]any{in.Object}, in.Children...), in.Related...)
	// They are scoped as in the cluster: the object's namespace, and the
	// namespaces granted.
	reads := cacheread.New(m.Manifest(), cacheread.MemoryBackend{Objects: objects},
		cacheread.Options{Namespaces: opts.ReadNamespaces, Scopes: opts.Scopes})
	ns, _, _ := unstructured.NestedString(in.Object, "metadata", "namespace")
	var reader engine.CacheReader = reads.For(ns)
	if opts.Reads != nil {
		reader = opts.Reads(reader)
	}
	ctx = engine.WithCacheReader(ctx, reader)
	if opts.Log.GetSink() != nil {
		ctx = logr.NewContext(ctx, opts.Log)
	}
	reconcile := m.Reconcile
	if opts.Fresh {
		reconcile = m.ReconcileFresh
	}
	res, err := reconcile(ctx, call, req)
	out := Outcome{Digest: m.Digest(), Fuel: res.Fuel, Duration: res.Duration, Err: err, Output: res.Output}
	if err != nil {
		return out
	}
	resp, err := protocol.RulesFor(m.Manifest(), opts.Scopes, opts.Limits).Decode(call, in.Object, len(req), res.Output)
	if err != nil {
		out.Err = err
		return out
	}
	out.Response = resp
	// As in the cluster, a write the API server refuses outweighs the
	// guest's own error.
	if opts.Schemas != nil {
		if out.Unchecked, err = opts.Schemas.Check(m.Name(), call, in.Object, resp); err != nil {
			out.Err = err
			return out
		}
	}
	if e := resp.Error; e != nil {
		out.Err = &protocol.GuestError{Module: m.Name(), Call: call, Message: e.Message, Terminal: e.Terminal}
	}
	return out
}
