// Package modtest runs a module's test cases offline: each case is a YAML
// file with the input a guest observes and what its response must contain.
// It backs `operator test`.
//
// A case file:
//
//	name: a valid widget becomes Ready      # defaults to the file name
//	input:                                  # offline.Input
//	  object: {apiVersion: ..., kind: ..., metadata: {...}, spec: {...}}
//	  children: [...]
//	  related: [...]
//	  finalizing: false
//	  config: {...}
//	  attempt: 0
//	  now: "2026-01-01T00:00:00Z"           # defaults to offline.DefaultNow
//	  childFailures: [...]                  # children the host could not write last time
//	expect:
//	  status: {...}                         # a subset of the response's status
//	  children: [...]                       # the desired children, each a subset, matched by apiVersion, kind and name
//	  keepChildren: true                    # no children field: the children are left alone
//	  events: [{type: Normal, reason: Created, messageContains: "..."}]
//	  requeueAfterSeconds: 30
//	  finalized: true
//	  error: {kind: ReconcileFailed, terminal: true, messageContains: "..."}
//	  maxFuel: 5000000
//	  fuel: 1234567                         # exactly this fuel, on a fresh instance (recorded cases)
//	recorded: {...}                         # what production returned (operator record); operator replay compares against it
//
// Without expect.error a case fails on any error. Unknown fields are errors,
// so a typo cannot silently weaken a case; they, repeated fields and values
// of the wrong type are reported at their line and column, with the path of
// the field:
//
//	cases/ready.yaml:7:5: unknown field "stauts" in expect (known fields: status, children, ...)
package modtest

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/subset"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// Case is one test case.
type Case struct {
	Name   string        `json:"name,omitempty"`
	Input  offline.Input `json:"input"`
	Expect Expect        `json:"expect"`
	// InvalidInput, when set, says why the input is one the API server
	// would refuse, on purpose: a case of the module's own defence against
	// what its CRD already forbids. `operator test --crds` checks every
	// case's input objects against their schemas and fails a case whose
	// input a cluster could never hold, unless this is set; when it is
	// set, the input must be refused, so the reason cannot go stale.
	InvalidInput string `json:"invalidInput,omitempty"`
	// Recorded, in a case `operator record` wrote, is what production
	// returned; `operator replay` compares another version's answer with
	// it. Expect holds the checks.
	Recorded *Recorded `json:"recorded,omitempty"`
	// File is the file the case was read from.
	File string `json:"-"`
}

// Recorded is one call as the flight recorder kept it.
type Recorded struct {
	// Module and Digest are the version that was called.
	Module string `json:"module"`
	Digest string `json:"digest"`
	// Object is the reconciled object, "namespace/name".
	Object string `json:"object"`
	// At is when the call was made (RFC 3339).
	At string `json:"at"`
	// Kind is how the call ended: Success, ReconcileFailed, FuelExhausted,
	// InvalidResponse, ...
	Kind string `json:"kind"`
	// Error is the failure's message; "" on success.
	Error string `json:"error,omitempty"`
	// Response is the guest's answer, when it answered.
	Response map[string]any `json:"response,omitempty"`
	// Fuel is the fuel the call used in production, on a pooled instance.
	Fuel uint64 `json:"fuel"`
	// ReplayFuel is the fuel the same input uses on a fresh instance, as
	// the case runs offline (expect.fuel).
	ReplayFuel uint64 `json:"replayFuel"`
	// DurationSeconds is the call's time in production.
	DurationSeconds float64 `json:"durationSeconds"`
	// Redacted is true when Secrets' data in the input were replaced by
	// REDACTED (the default).
	Redacted bool `json:"redacted,omitempty"`
	// ReplayDiffers lists how the fresh-instance run answered otherwise
	// than production did; empty when they agree.
	ReplayDiffers []string `json:"replayDiffers,omitempty"`
	// Refused are the children of the answer the host could not write
	// (the API server's reason and message; Conflict for a name another
	// object holds), and ApplyError the error that ended the apply (the
	// status refused, say): what the cluster refused of an answer offline
	// checks passed. The case's expect is still the answer itself.
	Refused    []abi.ChildFailure `json:"refused,omitempty"`
	ApplyError string             `json:"applyError,omitempty"`
	// Reads are the guest's cache reads in production, each with how it
	// ended (OK, NotFound, ...): `operator replay` serves a version only
	// these, and names any other read as one the recording cannot answer
	// instead of answering NotFound. [] means none; absent (recordings made
	// before reads were logged) serves every read from input.related.
	Reads []RecordedRead `json:"reads,omitzero"`
}

// RecordedRead is one cache_read of a recorded call.
type RecordedRead struct {
	abi.CacheRequest
	// Status is how it ended: OK, NotFound, Forbidden, BadRequest,
	// Unavailable or Error.
	Status string `json:"status"`
}

// Expect is what a case requires of the response.
type Expect struct {
	Status map[string]any `json:"status,omitempty"`
	// Children are the desired children the response must list, all of
	// them; [] requires an empty list (which deletes every child).
	Children []map[string]any `json:"children,omitzero"`
	// KeepChildren, when true, requires a response without children: the
	// children are left as they are.
	KeepChildren bool `json:"keepChildren,omitempty"`
	// Events are Events the response must have, each; [] requires none.
	Events              []EventExpect `json:"events,omitzero"`
	RequeueAfterSeconds *int64        `json:"requeueAfterSeconds,omitempty"`
	Finalized           *bool         `json:"finalized,omitempty"`
	Error               *ErrorExpect  `json:"error,omitempty"`
	MaxFuel             uint64        `json:"maxFuel,omitempty"`
	// Fuel, when set, is the exact fuel the call must use; the case then
	// runs on a fresh instance (offline.Options.Fresh), where fuel is
	// deterministic.
	Fuel uint64 `json:"fuel,omitempty"`
	// Digest, when set, is the module version ("sha256:…") Fuel was
	// measured on: another version's fuel is not compared with it, and
	// Notes says so. A recorded case sets it; without it, the recorded
	// block's digest serves.
	Digest string `json:"digest,omitempty"`
}

// FuelDigest is the module version the case's exact fuel belongs to:
// Expect.Digest, else the recorded call's; "" when neither says.
func (c Case) FuelDigest() string {
	if c.Expect.Digest != "" {
		return c.Expect.Digest
	}
	if c.Recorded != nil {
		return c.Recorded.Digest
	}
	return ""
}

// fuelElsewhere reports whether the case's exact fuel was measured on
// another version than the one o ran.
func (c Case) fuelElsewhere(o offline.Outcome) bool {
	d := c.FuelDigest()
	return c.Expect.Fuel > 0 && d != "" && o.Digest != "" && d != o.Digest
}

// Notes are what a run of the case did not check, and why: an exact fuel
// measured on another version of the module.
func (c Case) Notes(o offline.Outcome) []string {
	if c.fuelElsewhere(o) {
		return []string{fmt.Sprintf("fuel not compared: the exact fuel %d was measured on %s, and this module is %s (exact fuel is compared only on the same version; run the case on that version, or record it again)",
			c.Expect.Fuel, c.FuelDigest(), o.Digest)}
	}
	return nil
}

// EventExpect matches one Event of the response: each listed must be
// there (others may be too); an empty list, events: [], requires that
// there be none.
type EventExpect struct {
	Type            string `json:"type,omitempty"`
	Reason          string `json:"reason"`
	MessageContains string `json:"messageContains,omitempty"`
}

// ErrorExpect matches how a run failed. Kind is one of protocol.Kinds
// (but Success): ReconcileFailed for an error the guest reported in its
// response, InvalidResponse for a response the cluster would refuse (by the
// response rules, or, with offline.Options.Schemas (`--crds`), a child or
// status the API server would refuse by its schema: a *schemacheck.Error),
// or the kind of a limit or trap, such as FuelExhausted.
type ErrorExpect struct {
	Kind            string `json:"kind"`
	Terminal        *bool  `json:"terminal,omitempty"`
	MessageContains string `json:"messageContains,omitempty"`
}

// LoadDir reads every *.yaml, *.yml and *.json file of dir as a Case, in
// name order.
func LoadDir(dir string) ([]Case, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading cases: %w", err)
	}
	var cases []Case
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		c, err := LoadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("no case files (*.yaml, *.yml, *.json) in %s", dir)
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].File < cases[j].File })
	return cases, nil
}

// LoadFile reads one case.
func LoadFile(path string) (Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Case{}, err
	}
	var c Case
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		if located := locate(path, b); located != nil {
			return Case{}, located
		}
		return Case{}, fmt.Errorf("case %s: %w", path, err)
	}
	if c.Input.Object == nil {
		return Case{}, fmt.Errorf("case %s: input.object is required", path)
	}
	if e := c.Expect.Error; e != nil && !validKind(e.Kind) {
		return Case{}, fmt.Errorf("%s: expect.error.kind %q is not a kind; use one of %s", positionOf(path, b, "expect", "error", "kind"), e.Kind, kindList())
	}
	for i, e := range c.Expect.Events {
		where := fmt.Sprintf("%s: expect.events[%d]", positionOf(path, b, "expect", "events"), i)
		if e.Reason == "" {
			return Case{}, fmt.Errorf("%s: reason is required (an Event always has one); to require no Event at all, write events: []", where)
		}
		if e.Type != "" && e.Type != "Normal" && e.Type != "Warning" {
			return Case{}, fmt.Errorf("%s: type %q is neither Normal nor Warning", where, e.Type)
		}
	}
	c.File = path
	if c.Name == "" {
		c.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return c, nil
}

// Check compares an outcome with the case's expectations and returns one
// line per difference; none means the case passed.
func (c Case) Check(o offline.Outcome) []string {
	var diff []string
	add := func(format string, args ...any) { diff = append(diff, fmt.Sprintf(format, args...)) }

	if c.Expect.MaxFuel > 0 && o.Fuel > c.Expect.MaxFuel {
		add("fuel: used %d, more than maxFuel %d", o.Fuel, c.Expect.MaxFuel)
	}
	if c.Expect.Fuel > 0 && o.Fuel != c.Expect.Fuel && !c.fuelElsewhere(o) {
		add("fuel: used %d, want exactly %d", o.Fuel, c.Expect.Fuel)
	}
	kind, msg, terminal := "", "", false
	if o.Err != nil {
		kind, msg, terminal = string(o.Kind()), o.Err.Error(), protocol.Terminal(o.Err)
	}
	if want := c.Expect.Error; want != nil {
		switch {
		case kind == "":
			add("error: want kind %s, got no error", want.Kind)
		case kind != want.Kind:
			add("error: want kind %s, got %s: %s", want.Kind, kind, msg)
		default:
			if want.Terminal != nil && *want.Terminal != terminal {
				add("error.terminal: want %v, got %v", *want.Terminal, terminal)
			}
			if want.MessageContains != "" && !strings.Contains(msg, want.MessageContains) {
				add("error.message: want it to contain %q, got %q", want.MessageContains, msg)
			}
		}
	} else if kind != "" {
		add("error: want none, got %s: %s", kind, msg)
	}
	if o.Response == nil {
		if c.Expect.Status != nil || c.Expect.Children != nil || c.Expect.KeepChildren || c.Expect.Events != nil {
			add("response: the call failed, so status, children and events cannot match")
		}
		return diff
	}
	r := o.Response
	if c.Expect.Status != nil {
		if r.Status == nil {
			add("status: want %s, got none", compact(c.Expect.Status))
		} else {
			diff = append(diff, subset.Diff("status", c.Expect.Status, r.Status)...)
		}
	}
	if c.Expect.KeepChildren && r.Children != nil {
		add("children: want none (the children left alone), got a list of %d, which deletes every child it does not name", len(r.Children))
	}
	if c.Expect.Children != nil {
		if r.Children == nil {
			add("children: want a list of %d, got none (which leaves the children alone)", len(c.Expect.Children))
		} else if len(c.Expect.Children) != len(r.Children) {
			add("children: want %d, got %d", len(c.Expect.Children), len(r.Children))
		}
		for _, want := range c.Expect.Children {
			key := childKey(want)
			got := findChild(r.Children, key)
			if got == nil {
				add("children: no %s", key)
				continue
			}
			diff = append(diff, subset.Diff("children["+key+"]", want, got)...)
		}
	}
	if c.Expect.Events != nil && len(c.Expect.Events) == 0 && len(r.Events) > 0 {
		var got []string
		for _, e := range r.Events {
			got = append(got, string(e.Type)+" "+e.Reason)
		}
		add("events: want none ([]), got %d: %s", len(r.Events), strings.Join(got, ", "))
	}
	for _, want := range c.Expect.Events {
		found := false
		for _, e := range r.Events {
			if e.Reason == want.Reason && (want.Type == "" || string(e.Type) == want.Type) &&
				strings.Contains(e.Message, want.MessageContains) {
				found = true
				break
			}
		}
		if !found {
			add("events: no %s event with reason %s containing %q (got %d events)", or(want.Type, "any"), want.Reason, want.MessageContains, len(r.Events))
		}
	}
	if want := c.Expect.RequeueAfterSeconds; want != nil && *want != r.RequeueAfterSeconds {
		add("requeueAfterSeconds: want %d, got %d", *want, r.RequeueAfterSeconds)
	}
	if want := c.Expect.Finalized; want != nil && *want != r.Finalized {
		add("finalized: want %v, got %v", *want, r.Finalized)
	}
	return diff
}

func validKind(k string) bool {
	for _, known := range protocol.Kinds {
		if k == string(known) && known != protocol.Success {
			return true
		}
	}
	return false
}

func kindList() string {
	var out []string
	for _, k := range protocol.Kinds {
		if k != protocol.Success {
			out = append(out, string(k))
		}
	}
	return strings.Join(out, ", ")
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func childKey(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	return fmt.Sprintf("%v/%v/%v", obj["apiVersion"], obj["kind"], md["name"])
}

func findChild(children []map[string]any, key string) map[string]any {
	for _, c := range children {
		if childKey(c) == key {
			return c
		}
	}
	return nil
}

func compact(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(string(b))
	if strings.Contains(s, "\n") {
		j, _ := yamlToJSON(b)
		return j
	}
	return s
}

func yamlToJSON(b []byte) (string, error) {
	j, err := yaml.YAMLToJSON(b)
	return string(j), err
}

// Result is one case's outcome.
type Result struct {
	Case    Case
	Outcome offline.Outcome
	Diff    []string
}

// Passed reports whether the case passed.
func (r Result) Passed() bool { return len(r.Diff) == 0 }

// WriteJUnit writes results as a JUnit XML report.
func WriteJUnit(w io.Writer, suite string, results []Result) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Time      string   `xml:"time,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		SystemOut string   `xml:"system-out,omitempty"`
	}
	type testsuite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Time     string     `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	ts := testsuite{Name: suite, Tests: len(results)}
	var total time.Duration
	for _, r := range results {
		tc := testcase{
			Name: r.Case.Name, Classname: suite,
			Time:      fmt.Sprintf("%.6f", r.Outcome.Duration.Seconds()),
			SystemOut: fmt.Sprintf("fuel %d", r.Outcome.Fuel),
		}
		total += r.Outcome.Duration
		if !r.Passed() {
			ts.Failures++
			tc.Failure = &failure{Message: r.Diff[0], Text: strings.Join(r.Diff, "\n")}
		}
		ts.Cases = append(ts.Cases, tc)
	}
	ts.Time = fmt.Sprintf("%.6f", total.Seconds())
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(ts); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
