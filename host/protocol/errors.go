package protocol

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
)

// GuestError is a reconcile failure the guest reported in its response
// (Response.Error).
type GuestError struct {
	Module   string
	Call     string // e.g. "reconcile default/foo"
	Message  string
	Terminal bool
}

func (e *GuestError) Error() string {
	kind := "error"
	if e.Terminal {
		kind = "terminal error (not retried until the object changes)"
	}
	return Cap(fmt.Sprintf("module[%s] %s: guest reported %s: %s", e.Module, e.Call, kind, e.Message))
}

// InvalidResponseError reports a response that breaks a rule of the
// protocol (see the package documentation), or that the API server refused
// as invalid.
type InvalidResponseError struct {
	Module string
	Call   string
	// Reason says which rule was broken and how, e.g. "children[1] (Service
	// web) is listed twice".
	Reason string
}

func (e *InvalidResponseError) Error() string {
	const hint = "; fix the module (docs/abi.md, \"Response rules\")"
	return Truncate(fmt.Sprintf("module[%s] %s: invalid response: %s", e.Module, e.Call, e.Reason), MaxEventMessageBytes-len(hint)) + hint
}

// ApplyError reports that the host could not write what a valid response
// asked for, for a reason that may pass: a conflict, missing RBAC, an
// unavailable API server.
type ApplyError struct {
	Module string
	Call   string
	// What names what was written, e.g. "status" or "child ConfigMap ns/x".
	What string
	Err  error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("module[%s] %s: applying %s: %v; retrying with backoff", e.Module, e.Call, e.What, e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// ChildrenError reports desired children the host did not write: names
// taken by objects the module did not create (abi.ChildFailureConflict),
// and writes the API server refused. The other children were written. Its
// Kind is InvalidResponse when the API server refused a child as invalid,
// ApplyFailed when it refused one for another reason, and ChildConflict
// when every failure is a conflict.
type ChildrenError struct {
	Module   string
	Call     string
	Failures []abi.ChildFailure
}

// Kind is the outcome a reconcile that ended with e takes.
func (e *ChildrenError) Kind() Kind {
	kind := ChildConflict
	for _, f := range e.Failures {
		switch f.Reason {
		case abi.ChildFailureConflict:
		case "Invalid":
			return InvalidResponse
		default:
			kind = ApplyFailed
		}
	}
	return kind
}

func (e *ChildrenError) Error() string {
	var b strings.Builder
	what := fmt.Sprintf("%d desired children", len(e.Failures))
	if len(e.Failures) == 1 {
		what = "a desired child"
	}
	fmt.Fprintf(&b, "module[%s] %s: %s not written", e.Module, e.Call, what)
	for i, f := range e.Failures {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + f.Message)
	}
	return Cap(b.String())
}

// Cap cuts a message to what an Event's note holds (MaxEventMessageBytes),
// on a rune boundary, marking the cut. The messages of this package are cut
// the same way in the cluster and offline, so that the Warning Event on an
// object and `operator test` say the same words.
func Cap(s string) string { return Truncate(s, MaxEventMessageBytes) }

// Truncate cuts s to at most n bytes, on a rune boundary, marking the cut
// with " …".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " …"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Elide cuts s to at most n bytes by removing its middle, on rune
// boundaries, marking the cut with " … ": the head and the tail stay. Below
// 10 bytes it keeps the head only, as Truncate, and below 4 nothing.
func Elide(s string, n int) string {
	const mark = " … "
	if len(s) <= n {
		return s
	}
	if n < 2*len(mark) { // no room for both ends
		if n < len(" …") {
			return ""
		}
		return Truncate(s, n)
	}
	keep := n - len(mark)
	head := keep / 2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (keep - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + mark + s[tail:]
}

// maxNoteReason is the most of a trap's Reason (wazero's description and
// the wasm stack trace) that Note keeps, so that the guest's stderr has
// room.
const maxNoteReason = 256

// Note is the note of the Warning Event for a failed reconcile: err's
// message within MaxEventMessageBytes. A trap's message ends with the
// guest's stderr, whose first lines (a Go panic's cause) and last lines
// (the failing goroutine) matter most: Note cuts the trap's Reason to 256
// bytes and the stderr in its middle (Elide), so that both ends stay. Any
// other message is cut at its end (Cap).
func Note(err error) string {
	trap, ok := err.(*engine.TrapError)
	if !ok || trap.Stderr == "" || len(err.Error()) <= MaxEventMessageBytes {
		return Cap(err.Error())
	}
	t := *trap
	t.Reason = Truncate(t.Reason, maxNoteReason)
	t.Stderr = "x"
	room := MaxEventMessageBytes - (len(t.Error()) - len(t.Stderr)) // what is left for the stderr
	t.Stderr = Elide(trap.Stderr, room)
	return Cap(t.Error())
}

// CallName names the reconcile of obj in messages, the same way in the
// cluster and offline: "reconcile NAMESPACE/NAME", or "reconcile NAME" for a
// cluster-scoped object.
func CallName(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	if ns == "" {
		return "reconcile " + name
	}
	return "reconcile " + ns + "/" + name
}
