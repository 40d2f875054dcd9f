package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

var rules = protocol.Rules{
	Module: "m",
	Owns: []abi.GroupVersionKind{
		{Version: "v1", Kind: "ConfigMap"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
		{Group: "example.io", Version: "v1", Kind: "Thing"},
		{Group: "example.io", Version: "v1", Kind: "Owner"},
	},
}

func owner(ns string) map[string]any {
	md := map[string]any{"name": "o"}
	if ns != "" {
		md["namespace"] = ns
	}
	return map[string]any{"apiVersion": "example.io/v1", "kind": "Owner", "metadata": md}
}

func cm(name, ns string) string {
	md := `{"name":"` + name + `"`
	if ns != "" {
		md += `,"namespace":"` + ns + `"`
	}
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":` + md + `}}`
}

// TestResponseRules gives one response per rule and checks the kind and the
// reason of the refusal; the same responses are module and TCK cases.
func TestResponseRules(t *testing.T) {
	for _, c := range []struct {
		name, output string
		ownerNS      string
		want         string // part of the reason; "" means valid
		abi          bool
	}{
		{name: "empty object", output: `{}`},
		{name: "status only", output: `{"status":{"a":1}}`},
		{name: "not JSON", output: `{"status":`, abi: true, want: "not valid JSON"},
		{name: "empty output", output: ``, abi: true, want: "not valid JSON"},
		{name: "unknown field", output: `{"childern":[]}`, want: `unknown field "childern"`},
		{name: "field in another case", output: `{"Status":{}}`, want: `unknown field "Status"`},
		{name: "duplicate field", output: `{"status":{},"status":{}}`, want: `duplicate field "status"`},
		{name: "status of the wrong type", output: `{"status":"ok"}`, want: "status"},
		{name: "ten events", output: `{"events":[` + strings.Repeat(`{"type":"Normal","reason":"R","message":"m"},`, 9) + `{"type":"Normal","reason":"R","message":"m"}]}`},
		{name: "eleven events", output: `{"events":[` + strings.Repeat(`{"type":"Normal","reason":"R","message":"m"},`, 10) + `{"type":"Normal","reason":"R","message":"m"}]}`, want: "11 events; a response may record at most 10 (--max-events)"},
		{name: "event type", output: `{"events":[{"type":"Info","reason":"R","message":"m"}]}`, want: `events[0] has type "Info"; want Normal or Warning`},
		{name: "event without reason", output: `{"events":[{"type":"Normal","message":"m"}]}`, want: "events[0] has no reason"},
		{name: "long reason", output: `{"events":[{"type":"Normal","reason":"` + strings.Repeat("R", 129) + `","message":"m"}]}`, want: "reason of 129 bytes"},
		{name: "long message", output: `{"events":[{"type":"Normal","reason":"R","message":"` + strings.Repeat("m", 1025) + `"}]}`, want: "message of 1025 bytes"},
		{name: "negative requeue", output: `{"requeueAfterSeconds":-1}`, want: "requeueAfterSeconds is -1"},
		{name: "huge requeue", output: `{"requeueAfterSeconds":9223372036}`, want: "requeueAfterSeconds is 9223372036"},
		{name: "error without message", output: `{"error":{"terminal":true}}`, want: "error has no message"},
		{name: "child", output: `{"children":[` + cm("a", "") + `]}`},
		{name: "child in the owner's namespace", output: `{"children":[` + cm("a", "ns") + `]}`},
		{name: "undeclared kind", output: `{"children":[{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}]}`, want: "children[0] is a Secret (v1), which is not among the kinds the manifest owns"},
		{name: "undeclared version", output: `{"children":[{"apiVersion":"example.io/v2","kind":"Thing","metadata":{"name":"s"}}]}`, want: "Thing.example.io (v2), which is not among"},
		{name: "no kind", output: `{"children":[{"apiVersion":"v1","metadata":{"name":"s"}}]}`, want: "children[0] has no apiVersion or kind"},
		{name: "no metadata", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap"}]}`, want: "children[0] (ConfigMap) has no metadata"},
		{name: "no name", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}]}`, want: "has no metadata.name"},
		{name: "invalid name", output: `{"children":[` + cm("Bad_Name", "") + `]}`, want: `invalid metadata.name "Bad_Name"`},
		{name: "another namespace", output: `{"children":[` + cm("a", "other") + `]}`, want: `children[0] (ConfigMap a) is in namespace "other", but children must be in their owner's namespace "ns"`},
		{name: "listed twice", output: `{"children":[` + cm("a", "") + `,` + cm("a", "ns") + `]}`, want: "children[1]: ConfigMap ns/a is listed twice"},
		{name: "cluster-scoped child of a namespaced owner", output: `{"children":[{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"crb"}}]}`,
			want: `children[0] (ClusterRoleBinding crb) is cluster-scoped, but its owner is in namespace "ns"`},
		{name: "the owner itself", output: `{"children":[{"apiVersion":"example.io/v1","kind":"Owner","metadata":{"name":"o"}}]}`, want: "is the reconciled object itself"},
		{name: "bad label", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"bad key!":"v"}}}]}`, want: `children[0] (ConfigMap a) has invalid metadata: metadata.labels: Invalid value: "bad key!"`},
		{name: "label of the wrong type", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"k":1}}}]}`, want: "children[0] (ConfigMap a) has invalid metadata"},
		{name: "bad finalizer", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","finalizers":["no slash allowed/x/y"]}}]}`, want: "metadata.finalizers"},
		{name: "huge annotation", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{"a":"` + strings.Repeat("x", 300*1024) + `"}}}]}`, want: "metadata.annotations: Too long"},
		{name: "huge child", output: `{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"a":"` + strings.Repeat("x", protocol.DefaultMaxObjectBytes) + `"}}]}`, want: "bytes encoded; the API server stores at most"},
		{name: "huge status", output: `{"status":{"a":"` + strings.Repeat("x", protocol.DefaultMaxObjectBytes) + `"}}`, want: "the object with this status is"},
		{name: "big status under the limit", output: `{"status":{"a":"` + strings.Repeat("x", protocol.DefaultMaxObjectBytes-1024) + `"}}`},
		{name: "cluster-scoped owner, cluster-scoped child", ownerNS: "-", output: `{"children":[{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"crb"}}]}`},
		{name: "cluster-scoped owner, child with a namespace", ownerNS: "-", output: `{"children":[` + cm("a", "anywhere") + `]}`},
		{name: "cluster-scoped owner, child without one", ownerNS: "-", output: `{"children":[` + cm("a", "") + `]}`, want: "set metadata.namespace"},
		{name: "cluster-scoped child with a namespace", ownerNS: "-", output: `{"children":[{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"crb","namespace":"x"}}]}`, want: "cluster-scoped but sets metadata.namespace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := "ns"
			if c.ownerNS == "-" {
				ns = ""
			}
			resp, err := rules.Decode(protocol.CallName(owner(ns)), owner(ns), 0, []byte(c.output))
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused a valid response: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %s; want a refusal containing %q", c.output, c.want)
			}
			if resp != nil {
				t.Error("a refused response was returned")
			}
			wantKind := protocol.InvalidResponse
			if c.abi {
				wantKind = protocol.ABIViolation
			}
			if got := protocol.KindOf(err); got != wantKind {
				t.Errorf("kind %s, want %s: %v", got, wantKind, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("message %q does not contain %q", err, c.want)
			}
			prefix := "module[m] reconcile "
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("message %q does not start with %q", err, prefix)
			}
			if !c.abi && !protocol.Terminal(err) {
				t.Error("an invalid response must be terminal")
			}
		})
	}
}

func TestLimitsAreConfigurable(t *testing.T) {
	r := rules
	r.Limits = protocol.Limits{MaxEvents: 2, MaxRequeueAfter: time.Minute, MaxObjectBytes: 1000}
	for output, want := range map[string]string{
		`{"events":[{"type":"Normal","reason":"R","message":"m"},{"type":"Normal","reason":"R","message":"m"},{"type":"Normal","reason":"R","message":"m"}]}`: "3 events; a response may record at most 2",
		`{"requeueAfterSeconds":61}`:                              "requeueAfterSeconds is 61; it must be within 0..60 (1m0s)",
		`{"status":{"a":"` + strings.Repeat("x", 1000) + `"}}`:    "the API server stores at most 1000",
		`{"children":[` + cm(strings.Repeat("a", 200), "") + `]}`: "",
	} {
		_, err := r.Decode("reconcile ns/o", owner("ns"), 0, []byte(output))
		switch {
		case want == "" && err != nil:
			t.Errorf("%.60s: %v", output, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%.60s: %v, want %q", output, err, want)
		}
	}
	if _, err := r.Decode("reconcile ns/o", owner("ns"), 0, []byte(`{"requeueAfterSeconds":60}`)); err != nil {
		t.Errorf("a requeue at the limit: %v", err)
	}
}

// TestStatusSizeWithTheRequestBound: given the request's length, Decode
// skips encoding the object when request and output together fit, and still
// refuses a status that makes a large object too large.
func TestStatusSizeWithTheRequestBound(t *testing.T) {
	big := owner("ns")
	big["spec"] = map[string]any{"blob": strings.Repeat("s", 1200*1024)}
	req, err := protocol.EncodeRequest(abi.Request{Object: big})
	if err != nil {
		t.Fatal(err)
	}
	status := `{"status":{"blob":"` + strings.Repeat("x", 400*1024) + `"}}`
	if _, err := rules.Decode("reconcile ns/o", big, len(req), []byte(status)); err == nil || !strings.Contains(err.Error(), "the object with this status is") {
		t.Errorf("a 1.2 MiB object with a 0.4 MiB status: %v", err)
	}
	small := owner("ns")
	req, err = protocol.EncodeRequest(abi.Request{Object: small})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Decode("reconcile ns/o", small, len(req), []byte(status)); err != nil {
		t.Errorf("a small object with a 0.4 MiB status: %v", err)
	}
}

func TestChildrenAreCompleted(t *testing.T) {
	resp, err := rules.Decode("reconcile ns/o", owner("ns"), 0, []byte(`{"children":[`+cm("a", "")+`,{"apiVersion":"example.io/v1","kind":"Thing","metadata":{"name":"t"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Desired) != 2 || resp.Desired[0].GetNamespace() != "ns" || resp.Desired[1].GetNamespace() != "ns" {
		t.Fatalf("desired %v", resp.Desired)
	}
	if _, set := resp.Children[0]["metadata"].(map[string]any)["namespace"]; set {
		t.Error("completing a child modified the decoded response")
	}
	if want := []schema.GroupKind{{Group: "example.io", Kind: "Thing"}}; len(resp.ScopeUnknown) != 1 || resp.ScopeUnknown[0] != want[0] {
		t.Errorf("ScopeUnknown = %v, want %v", resp.ScopeUnknown, want)
	}
	// With its CRD, Thing is known: cluster-scoped, so refused.
	r := rules
	r.Scopes = protocol.Chain(protocol.Builtin, clusterScoped{{Group: "example.io", Kind: "Thing"}: true})
	if _, err := r.Decode("reconcile ns/o", owner("ns"), 0, []byte(`{"children":[{"apiVersion":"example.io/v1","kind":"Thing","metadata":{"name":"t"}}]}`)); err == nil || !strings.Contains(err.Error(), "cluster-scoped") {
		t.Errorf("a cluster-scoped CRD child of a namespaced owner: %v", err)
	}
}

func TestIntegersStayIntegers(t *testing.T) {
	resp, err := rules.Decode("reconcile ns/o", owner("ns"), 0, []byte(`{"status":{"n":3,"f":1.5,"big":9007199254740993}}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status["n"] != int64(3) || resp.Status["f"] != 1.5 || resp.Status["big"] != int64(9007199254740993) {
		t.Errorf("status %#v", resp.Status)
	}
}

func TestEncodeRequestStripsManagedFields(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"name": "o", "managedFields": []any{map[string]any{"manager": "x"}}}}
	b, err := protocol.EncodeRequest(abi.Request{Object: obj, Children: []map[string]any{obj}, Now: protocol.FormatNow(time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600)))})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "managedFields") {
		t.Errorf("request still has managedFields: %s", b)
	}
	if _, ok := obj["metadata"].(map[string]any)["managedFields"]; !ok {
		t.Error("EncodeRequest modified the caller's object")
	}
	var req abi.Request
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if req.Now != "2026-01-02T02:04:05Z" {
		t.Errorf("now = %s", req.Now)
	}
}

func TestKindOf(t *testing.T) {
	for err, want := range map[error]protocol.Kind{
		nil:                              protocol.Success,
		&protocol.GuestError{}:           protocol.ReconcileFailed,
		&protocol.InvalidResponseError{}: protocol.InvalidResponse,
		&protocol.ApplyError{Err: errors.New("x")}: protocol.ApplyFailed,
		&engine.FuelExhaustedError{}:               protocol.FuelExhausted,
		&engine.DeadlineExceededError{}:            protocol.DeadlineExceeded,
		&engine.MemoryLimitError{}:                 protocol.MemoryLimit,
		&engine.StackOverflowError{}:               protocol.StackOverflow,
		&engine.TrapError{}:                        protocol.GuestTrapped,
		&engine.ABIError{}:                         protocol.ABIViolation,
		&engine.CanceledError{}:                    protocol.Canceled,
		&engine.InvalidModuleError{}:               protocol.InvalidModule,
		errors.New("anything else"):                protocol.GuestTrapped,
	} {
		if got := protocol.KindOf(err); got != want {
			t.Errorf("KindOf(%T) = %s, want %s", err, got, want)
		}
	}
	if !protocol.Terminal(&protocol.GuestError{Terminal: true}) || protocol.Terminal(&protocol.GuestError{}) || protocol.Terminal(&engine.FuelExhaustedError{}) {
		t.Error("Terminal")
	}
}

// TestMessagesFitAnEvent: a refusal or guest error whose message would not
// fit an Event's note is cut the same way everywhere, so the cluster's
// Event and `operator test` say the same words.
func TestMessagesFitAnEvent(t *testing.T) {
	var errs []error
	for pad := 0; pad < 4; pad++ { // every alignment of the two-byte runes
		long := strings.Repeat("x", pad) + strings.Repeat("é", 2000)
		errs = append(errs, &protocol.GuestError{Module: "m", Call: "reconcile ns/o", Message: long},
			&protocol.InvalidResponseError{Module: "m", Call: "reconcile ns/o", Reason: long})
	}
	long := strings.Repeat("é", 2000)
	for _, err := range errs {
		msg := err.Error()
		if len(msg) > protocol.MaxEventMessageBytes || !utf8.ValidString(msg) {
			t.Errorf("%T: %d bytes (valid UTF-8: %v)", err, len(msg), utf8.ValidString(msg))
		}
		if protocol.Cap(msg) != msg {
			t.Errorf("%T: capping again changes the message", err)
		}
	}
	if !strings.HasSuffix((&protocol.InvalidResponseError{Module: "m", Call: "c", Reason: long}).Error(), `fix the module (docs/abi.md, "Response rules")`) {
		t.Error("a long InvalidResponse message lost its hint")
	}
	_, err := rules.Decode("reconcile ns/o", owner("ns"), 0, []byte(`{"children":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"k":"`+strings.Repeat("v", 5000)+`"}}}]}`))
	if err == nil || len(err.Error()) > protocol.MaxEventMessageBytes {
		t.Errorf("a refusal quoting a 5000-byte label: %d bytes", len(err.Error()))
	}
}

func TestElideKeepsHeadAndTail(t *testing.T) {
	for pad := 0; pad < 4; pad++ { // every alignment of the two-byte runes
		s := "HEAD" + strings.Repeat("x", pad) + strings.Repeat("é", 1000) + "TAIL"
		for _, n := range []int{10, 11, 64, 1023, 1024} {
			got := protocol.Elide(s, n)
			if len(got) > n || !utf8.ValidString(got) {
				t.Fatalf("pad %d, n %d: %d bytes (valid UTF-8: %v)", pad, n, len(got), utf8.ValidString(got))
			}
			if !strings.HasPrefix(got, "HE") || !strings.HasSuffix(got, "IL") || !strings.Contains(got, " … ") {
				t.Fatalf("pad %d, n %d: %q lost an end or the mark", pad, n, got)
			}
			if n >= 64 && len(got) < n-1 {
				t.Errorf("pad %d, n %d: %d bytes, more cut than a rune needs", pad, n, len(got))
			}
		}
	}
	if got := protocol.Elide("short", 5); got != "short" {
		t.Errorf("a string that fits was cut: %q", got)
	}
	for n := 0; n < 10; n++ { // too small for both ends: the head, or nothing
		if got := protocol.Elide(strings.Repeat("x", 50), n); len(got) > n {
			t.Errorf("n %d: %q", n, got)
		}
	}
}

// TestNoteKeepsBothEndsOfAStderr: a trap with a long stderr and a long wasm
// stack trace gives a note within an Event's limit that holds the trap's
// header, the head and the tail of the stderr, and the advice at the end.
func TestNoteKeepsBothEndsOfAStderr(t *testing.T) {
	stderr := "panic: STDERR-HEAD\n" + strings.Repeat("goroutine frame line\n", 300) + "STDERR-TAIL"
	trap := &engine.TrapError{Module: "m", Call: "reconcile ns/o", Reason: "wasm error: unreachable\nwasm stack trace:\n" + strings.Repeat("\tmain.f()\n", 200), Stderr: stderr}
	note := protocol.Note(trap)
	if len(note) > protocol.MaxEventMessageBytes || !utf8.ValidString(note) {
		t.Fatalf("note of %d bytes (valid UTF-8: %v)", len(note), utf8.ValidString(note))
	}
	for _, want := range []string{"module[m] reconcile ns/o: guest trapped: wasm error: unreachable", "guest stderr:\npanic: STDERR-HEAD", "STDERR-TAIL", "fix the guest"} {
		if !strings.Contains(note, want) {
			t.Errorf("the note lacks %q:\n%s", want, note)
		}
	}
	if len(note) < protocol.MaxEventMessageBytes-8 {
		t.Errorf("the note is %d bytes; the stderr could have kept more", len(note))
	}

	// A short trap is as its message; other errors are capped at the end.
	short := &engine.TrapError{Module: "m", Call: "c", Reason: "r", Stderr: "s"}
	if protocol.Note(short) != short.Error() {
		t.Errorf("a short trap's note differs from its message")
	}
	guest := &protocol.GuestError{Module: "m", Call: "c", Message: strings.Repeat("m", 3000)}
	if protocol.Note(guest) != guest.Error() {
		t.Errorf("a guest error's note differs from its (capped) message")
	}
	other := errors.New(strings.Repeat("o", 3000) + "END")
	if got := protocol.Note(other); len(got) > protocol.MaxEventMessageBytes || strings.HasSuffix(got, "END") {
		t.Errorf("another error's note: %d bytes", len(got))
	}
}

// clusterScoped knows its kinds as cluster-scoped, as a CRD with scope
// Cluster makes them.
type clusterScoped map[schema.GroupKind]bool

func (c clusterScoped) Namespaced(gk schema.GroupKind) (namespaced, known bool) { return false, c[gk] }
