// Package compare compares two answers of a module to the same request,
// semantically: the status, the children (matched by kind, namespace and
// name), the Events (as a multiset), the requeue, the error and
// finalized, or the kinds of two failures. A ReconcileModule's candidate
// in shadow is judged by it (docs/rollout.md), and `operator replay`
// reports with it how another version answers recorded calls.
package compare

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Answer is one version's answer to a request: the decoded response, or
// the kind and message of the call's failure.
type Answer struct {
	// Response is the decoded response; nil when the call failed.
	Response *abi.Response
	// Children are Response's children completed as the host would apply
	// them (a namespaced child without a namespace is in its owner's).
	Children []map[string]any
	// Kind is protocol.Success for a response, else the failure's kind
	// (FuelExhausted, InvalidResponse, ...).
	Kind protocol.Kind
	// Err is the failure's message; "" for a response.
	Err string
}

// Verdict is how a candidate's answer compared with the serving one.
type Verdict int

const (
	// Agree: the same outcome kind, and for responses the same status,
	// children, Events, requeue, error and finalized, but for the allowed
	// differences.
	Agree Verdict = iota
	// Differ: the candidate answered something else.
	Differ
	// CandidateError: the candidate failed (fuel, deadline, trap, invalid
	// response, ...) where the serving version did not fail the same way.
	CandidateError
)

func (v Verdict) String() string {
	switch v {
	case Agree:
		return "agree"
	case Differ:
		return "differ"
	}
	return "candidate_error"
}

// Compare compares a candidate's answer with the serving one and returns
// the verdict and, unless they agree, the differences as lines of
// "PATH: SERVING → CANDIDATE". Paths are those of the response:
// status.a.b, children[Kind namespace/name].spec.x, events, requeueAfterSeconds,
// error, finalized, and outcome for failures. A difference whose path is
// under one of allowed (see Allowed) is not one.
func Compare(serving, candidate Answer, allowed []string) (Verdict, []string) {
	if candidate.Kind != protocol.Success || serving.Kind != protocol.Success {
		if candidate.Kind == serving.Kind {
			return Agree, nil
		}
		line := fmt.Sprintf("outcome: %s → %s", describeOutcome(serving), describeOutcome(candidate))
		if candidate.Kind != protocol.Success {
			return CandidateError, []string{line}
		}
		return Differ, []string{line}
	}
	var d differ
	d.allowed = parsePatterns(allowed)
	s, c := serving.Response, candidate.Response
	d.value([]string{"status"}, normalize(s.Status), normalize(c.Status))
	d.children(serving.Children, candidate.Children)
	d.events(s.Events, c.Events)
	if s.RequeueAfterSeconds != c.RequeueAfterSeconds {
		d.add([]string{"requeueAfterSeconds"}, s.RequeueAfterSeconds, c.RequeueAfterSeconds)
	}
	if !reflect.DeepEqual(s.Error, c.Error) {
		d.add([]string{"error"}, s.Error, c.Error)
	}
	if s.Finalized != c.Finalized {
		d.add([]string{"finalized"}, s.Finalized, c.Finalized)
	}
	if len(d.lines) == 0 {
		return Agree, nil
	}
	return Differ, d.lines
}

func describeOutcome(a Answer) string {
	if a.Kind == protocol.Success {
		return "Success"
	}
	return string(a.Kind) + " (" + protocol.Truncate(a.Err, 160) + ")"
}

type differ struct {
	allowed [][]string
	lines   []string
}

// maxLines bounds the differences kept of one comparison.
const maxLines = 20

func (d *differ) add(path []string, serving, candidate any) {
	if d.isAllowed(path) || len(d.lines) > maxLines {
		return
	}
	if len(d.lines) == maxLines {
		d.lines = append(d.lines, "… more differences")
		return
	}
	d.lines = append(d.lines, fmt.Sprintf("%s: %s → %s", render(path), show(serving), show(candidate)))
}

func (d *differ) isAllowed(path []string) bool {
	for _, p := range d.allowed {
		if len(p) > len(path) {
			continue
		}
		ok := true
		for i, seg := range p {
			if seg != "*" && seg != path[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// value diffs two JSON values.
func (d *differ) value(path []string, a, b any) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case !ain:
				d.add(append(clone(path), k), absent{}, bv)
			case !bin:
				d.add(append(clone(path), k), av, absent{})
			default:
				d.value(append(clone(path), k), av, bv)
			}
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			d.value(append(clone(path), strconv.Itoa(i)), al[i], bl[i])
		}
		return
	}
	d.add(path, a, b)
}

func (d *differ) children(a, b []map[string]any) {
	am, bm := childMap(a), childMap(b)
	keys := map[string]bool{}
	for k := range am {
		keys[k] = true
	}
	for k := range bm {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		av, ain := am[k]
		bv, bin := bm[k]
		switch {
		case !ain:
			d.add([]string{"children", k}, absent{}, "a child")
		case !bin:
			d.add([]string{"children", k}, "a child", absent{})
		default:
			d.value([]string{"children", k}, normalize(av), normalize(bv))
		}
	}
}

// childKey names a child: "Kind namespace/name" (apiVersion too when two
// kinds of one name differ in group: "apps/v1 Deployment ns/name").
func childKey(c map[string]any) string {
	kind, _ := c["kind"].(string)
	apiVersion, _ := c["apiVersion"].(string)
	meta, _ := c["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	id := name
	if ns != "" {
		id = ns + "/" + name
	}
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g + " " + kind + " " + id
	}
	return kind + " " + id
}

func childMap(cs []map[string]any) map[string]map[string]any {
	m := make(map[string]map[string]any, len(cs))
	for _, c := range cs {
		m[childKey(c)] = c
	}
	return m
}

func (d *differ) events(a, b []abi.Event) {
	count := map[string]int{}
	for _, e := range a {
		count[eventKey(e)]++
	}
	for _, e := range b {
		count[eventKey(e)]--
	}
	var lines []string
	for _, k := range sortedKeys(count) {
		switch n := count[k]; {
		case n > 0:
			lines = append(lines, fmt.Sprintf("%s only from the serving version (%d)", k, n))
		case n < 0:
			lines = append(lines, fmt.Sprintf("%s only from the candidate (%d)", k, -n))
		}
	}
	if len(lines) > 0 && !d.isAllowed([]string{"events"}) {
		d.lines = append(d.lines, "events: "+strings.Join(lines, "; "))
	}
}

func eventKey(e abi.Event) string {
	return fmt.Sprintf("%s %s %q", e.Type, e.Reason, protocol.Truncate(e.Message, 120))
}

// absent shows a field one side does not have.
type absent struct{}

func show(v any) string {
	if _, ok := v.(absent); ok {
		return "(absent)"
	}
	if s, ok := v.(string); ok && s == "a child" {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return protocol.Truncate(string(b), 100)
}

// render writes a path as status.a.b, children[Kind ns/name].x, list
// indices as [i].
func render(path []string) string {
	var b strings.Builder
	for i, seg := range path {
		switch {
		case i == 1 && path[0] == "children":
			b.WriteString("[" + seg + "]")
		case isIndex(seg) && i > 0:
			b.WriteString("[" + seg + "]")
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg)
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil && s != ""
}

// Allowed checks patterns of allowed differences: dot-separated field
// paths of the response, where a segment "*" matches any one segment and a
// bracketed segment is one segment (children[*].metadata.annotations,
// status.conditions[*].lastTransitionTime, events). A pattern covers its
// whole subtree.
func Allowed(patterns []string) error {
	for _, p := range patterns {
		segs := splitPattern(p)
		if len(segs) == 0 {
			return fmt.Errorf("allowed difference %q is empty", p)
		}
		switch segs[0] {
		case "status", "children", "events", "requeueAfterSeconds", "error", "finalized":
		default:
			return fmt.Errorf("allowed difference %q must start with status, children, events, requeueAfterSeconds, error or finalized", p)
		}
		for _, s := range segs {
			if s == "" {
				return fmt.Errorf("allowed difference %q has an empty segment", p)
			}
		}
	}
	return nil
}

func parsePatterns(ps []string) [][]string {
	out := make([][]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, splitPattern(p))
	}
	return out
}

// splitPattern splits "children[*].a.b[2]" into [children * a b 2].
func splitPattern(p string) []string {
	var segs []string
	var cur strings.Builder
	inBracket := false
	flush := func() {
		segs = append(segs, cur.String())
		cur.Reset()
	}
	for i := 0; i < len(p); i++ {
		switch ch := p[i]; {
		case ch == '[' && !inBracket:
			if cur.Len() > 0 || (i > 0 && p[i-1] != '.' && p[i-1] != ']') {
				flush()
			}
			inBracket = true
		case ch == ']' && inBracket:
			flush()
			inBracket = false
			if i+1 < len(p) && p[i+1] == '.' {
				i++
			}
		case ch == '.' && !inBracket:
			flush()
		default:
			cur.WriteByte(ch)
		}
	}
	if cur.Len() > 0 || (len(p) > 0 && p[len(p)-1] == '.') {
		flush()
	}
	return segs
}

// normalize makes JSON values comparable: numbers of any Go type become
// float64, through a JSON round trip.
func normalize(v any) any {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

func clone(p []string) []string { return append([]string(nil), p...) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// AnswerOf is an answer as a guest returned it (output, the response
// JSON) or as it failed (kind and message): the guest's response
// (its children as it listed them) for Success and ReconcileFailed, the
// failure's kind otherwise.
func AnswerOf(kind protocol.Kind, msg string, output []byte) Answer {
	if (kind == protocol.Success || kind == protocol.ReconcileFailed) && len(output) > 0 {
		var a abi.Response
		if err := json.Unmarshal(output, &a); err == nil {
			return Answer{Response: &a, Children: a.Children, Kind: protocol.Success}
		}
	}
	return Answer{Kind: kind, Err: msg}
}
