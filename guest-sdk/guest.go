// Package guest is the Go SDK for wasmreconcile reconcile modules.
//
// A module is a Go main package built as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o widget.wasm .
//
// It registers one handler from an init function (a reactor's main is never
// called):
//
//	func init() {
//		guest.Handle(guest.Manifest{Name: "widget", For: guest.GVK("example.io", "v1", "Widget")}, reconcile)
//	}
//
//	func reconcile(req *guest.Request) *guest.Response { ... }
//	func main() {}
//
// The handler is a pure function from what the host observed (the Request) to
// what the module desires (the Response). The host applies the Response: it
// writes the status, records Events and requeues. Because the handler does no
// I/O of its own, it can be unit-tested with plain `go test`, and the compiled
// module can be run offline.
//
// The package has no dependencies outside the standard library.
package guest

import (
	"strconv"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/internal/format"
)

// Re-exported wire types; see package abi and docs/abi.md for the contract.
type (
	Manifest         = abi.Manifest
	GroupVersionKind = abi.GroupVersionKind
	Request          = abi.Request
	Response         = abi.Response
	Event            = abi.Event
	Error            = abi.Error
	ManifestLimits   = abi.ManifestLimits
	ChildFailure     = abi.ChildFailure
	Trigger          = abi.Trigger
)

// ChildFailureConflict is the ChildFailure.Reason of a desired child whose
// name is taken by an object the module did not create.
const ChildFailureConflict = abi.ChildFailureConflict

// NoChildren is a Response.Children that deletes every child: an empty,
// non-nil list. A nil Children leaves the children alone.
func NoChildren() []map[string]any { return []map[string]any{} }

// GVK is a short constructor for a GroupVersionKind.
func GVK(group, version, kind string) GroupVersionKind {
	return GroupVersionKind{Group: group, Version: version, Kind: kind}
}

// HandlerFunc reconciles one object. It must not retain req after returning.
type HandlerFunc func(req *Request) *Response

var (
	manifest Manifest
	// serve decodes a request and runs the registered handler. It is a
	// variable, set by Handle or HandleLazy, so that a module links the
	// decoder of the handler it registers only.
	serve func(request []byte) (*Response, error)
)

// Handle registers the module's manifest and its reconcile handler. Call it,
// or HandleLazy, exactly once, from an init function. It panics if called
// twice, so that a module cannot silently serve the wrong handler.
func Handle(m Manifest, h HandlerFunc) {
	if h == nil {
		panic("guest.Handle: nil handler")
	}
	register(m, func(request []byte) (*Response, error) {
		req, err := decodeRequest(request)
		if err != nil {
			return nil, err
		}
		return h(req), nil
	})
}

func register(m Manifest, s func([]byte) (*Response, error)) {
	if serve != nil {
		panic("guest.Handle or guest.HandleLazy called twice")
	}
	manifest, serve = m, s
}

// Errorf returns a Response that reports a retryable error; the host retries
// with backoff. It formats with Sprintf.
func Errorf(format string, args ...any) *Response {
	return &Response{Error: &Error{Message: Sprintf(format, args...)}}
}

// TerminalErrorf returns a Response that reports an error the host does not
// retry until the object changes. It formats with Sprintf.
func TerminalErrorf(format string, args ...any) *Response {
	return &Response{Error: &Error{Message: Sprintf(format, args...), Terminal: true}}
}

// manifestJSON encodes the registered manifest.
//
//lint:ignore U1000 called by the wasip1 export (imports_wasip1.go); lint runs natively
func manifestJSON() []byte { return appendManifest(nil, &manifest) }

// Dispatch decodes a JSON Request, runs the registered handler and encodes its
// Response. A handler panic is recovered and reported as a retryable error, so
// one bad object cannot take the module down. It is what the wasm export
// calls; it is exported for the offline test harness (package sdktest).
func Dispatch(request []byte) []byte { return dispatchInto(make([]byte, 0, 1024), request) }

// dispatchInto is Dispatch appending the response to buf.
func dispatchInto(buf, request []byte) []byte {
	resp := dispatch(request)
	b, err := encodeResponse(buf, resp)
	if err != nil {
		// An error response holds only strings: this encoding cannot fail.
		b, _ = encodeResponse(buf[:0], &Response{Error: &Error{Message: "guest: encoding response: " + err.Error()}})
	}
	return b
}

// maxPooledEntries bounds the tape kept for the next call: 64 Ki values,
// far more than a Kubernetes object holds.
const maxPooledEntries = 1 << 16

func dispatch(request []byte) (resp *Response) {
	if serve == nil {
		return &Response{Error: &Error{Message: "guest: no handler registered; call guest.Handle from an init function", Terminal: true}}
	}
	defer func() {
		if r := recover(); r != nil {
			resp = &Response{Error: &Error{Message: "guest: handler panicked: " + panicText(r)}}
		}
	}()
	resp, err := serve(request)
	if err != nil {
		return &Response{Error: &Error{Message: "guest: decoding request: " + err.Error(), Terminal: true}}
	}
	if resp == nil {
		resp = &Response{}
	}
	return resp
}

// panicText is a recovered value as a panic prints it, for the usual
// values, without linking Sprintf into every module.
func panicText(r any) string {
	switch x := r.(type) {
	case error:
		return x.Error()
	case string:
		return x
	case format.Stringer:
		return x.String()
	case int:
		return strconv.Itoa(x)
	}
	return "(" + format.TypeName(r) + ")"
}
