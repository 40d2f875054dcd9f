package modtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// valid is a case file every variant below breaks in one place.
const valid = `name: a valid widget becomes Ready
input:
  object:
    apiVersion: examples.wasmreconcile.io/v1alpha1
    kind: Widget
    metadata: {name: w, namespace: default}
    spec:
      size: 3
  attempt: 0
expect:
  status:
    summary: 3 x grey
  requeueAfterSeconds: 30
  error:
    kind: ReconcileFailed
    terminal: true
    messageContains: outside
  maxFuel: 5000000
`

// TestCaseFileErrorsHavePositions misspells keys at several depths and
// gives values of the wrong type: each error names the file, the line and
// column of the bad key or value, its path and what was expected.
func TestCaseFileErrorsHavePositions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if _, err := LoadFile(write("valid.yaml", valid)); err != nil {
		t.Fatalf("the valid case: %v", err)
	}
	for _, c := range []struct {
		name, from, to string
		want           string // after "FILE:"
	}{
		{"top level", "expect:\n", "expct:\n",
			`10:1: unknown field "expct" (known fields: name, input, expect, invalidInput, recorded)`},
		{"input", "  attempt: 0", "  atempt: 0",
			`9:3: unknown field "atempt" in input (known fields: object, children, related, finalizing, config, attempt, now, childFailures)`},
		{"expect", "  status:\n", "  stauts:\n",
			`11:3: unknown field "stauts" in expect (known fields: status, children, keepChildren, events, requeueAfterSeconds, finalized, error, maxFuel, fuel, digest)`},
		{"expect.error", "    messageContains: outside", "    messageContain: outside",
			`17:5: unknown field "messageContain" in expect.error (known fields: kind, terminal, messageContains)`},
		{"repeated", "  maxFuel: 5000000\n", "  maxFuel: 5000000\n  maxFuel: 6000000\n",
			`19:3: field "maxFuel" repeated in expect (first at line 18)`},
		{"a string for an integer", "maxFuel: 5000000", "maxFuel: lots",
			`18:12: expect.maxFuel: want an integer ≥ 0, got the string "lots"`},
		{"a negative fuel", "maxFuel: 5000000", "maxFuel: -1",
			`18:12: expect.maxFuel: want an integer ≥ 0 of 64 bits, got the number -1`},
		{"a string for a bool", "terminal: true", "terminal: maybe",
			`16:15: expect.error.terminal: want true or false, got the string "maybe"`},
		{"a list for a string", "kind: ReconcileFailed", "kind: [ReconcileFailed]",
			`15:11: expect.error.kind: want a string, got a list`},
		{"a list for a mapping", "  status:\n    summary: 3 x grey\n", "  status:\n    - summary\n",
			`12:5: expect.status: want a mapping, got a list`},
		{"a mapping for a number", "requeueAfterSeconds: 30", "requeueAfterSeconds: {seconds: 30}",
			`13:24: expect.requeueAfterSeconds: want an integer, got a mapping`},
		{"not a kind", "kind: ReconcileFailed", "kind: ReconcileFailure",
			`15:11: expect.error.kind "ReconcileFailure" is not a kind; use one of`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(valid, c.from) {
				t.Fatalf("the valid case has no %q", c.from)
			}
			path := write(strings.ReplaceAll(c.name, " ", "-")+".yaml", strings.Replace(valid, c.from, c.to, 1))
			_, err := LoadFile(path)
			if err == nil {
				t.Fatal("loaded")
			}
			if want := path + ":" + c.want; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error\n  %s\nwant\n  %s", err, want)
			}
		})
	}
	// A JSON case file has positions too.
	path := write("case.json", `{"input": {"object": {"kind": "Widget"}}, "expect": {"error": {"kind": "ReconcileFailed", "terminl": true}}}`)
	if _, err := LoadFile(path); err == nil || !strings.HasPrefix(err.Error(), path+`:1:91: unknown field "terminl" in expect.error`) {
		t.Errorf("JSON case: %v", err)
	}
}

func TestExactFuel(t *testing.T) {
	c := Case{Expect: Expect{Fuel: 400890, KeepChildren: true}}
	if diff := c.Check(offline.Outcome{Fuel: 400890, Response: &protocol.Response{}}); len(diff) != 0 {
		t.Errorf("the exact fuel: %q", diff)
	}
	diff := c.Check(offline.Outcome{Fuel: 400891, Response: &protocol.Response{}})
	if len(diff) != 1 || diff[0] != "fuel: used 400891, want exactly 400890" {
		t.Errorf("one unit more: %q", diff)
	}
}

// TestNoEvents: events: [] requires that the response have no Event (as
// children: [] requires an empty list), where leaving events out checks
// nothing; a listed Event needs a reason, and a type is Normal or Warning.
func TestNoEvents(t *testing.T) {
	dir := t.TempDir()
	load := func(expect string) (Case, error) {
		path := filepath.Join(dir, "case.yaml")
		doc := "input:\n  object: {kind: Widget}\nexpect:\n" + expect
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadFile(path)
	}
	none, err := load("  events: []\n")
	if err != nil {
		t.Fatal(err)
	}
	unset, err := load("  keepChildren: false\n")
	if err != nil {
		t.Fatal(err)
	}
	emitted := offline.Outcome{Response: &protocol.Response{Response: abi.Response{Events: []abi.Event{{Type: abi.EventWarning, Reason: "Refused", Message: "no"}}}}}
	quiet := offline.Outcome{Response: &protocol.Response{}}
	if diff := none.Check(emitted); len(diff) != 1 || diff[0] != "events: want none ([]), got 1: Warning Refused" {
		t.Errorf("events: [] against a response with an Event: %q", diff)
	}
	if diff := none.Check(quiet); len(diff) != 0 {
		t.Errorf("events: [] against a response with none: %q", diff)
	}
	if diff := unset.Check(emitted); len(diff) != 0 {
		t.Errorf("no events key against a response with an Event: %q", diff)
	}
	for expect, want := range map[string]string{
		"  events: [{type: Warning}]\n":                 "expect.events[0]: reason is required",
		"  events: [{type: Warnng, reason: Refused}]\n": `expect.events[0]: type "Warnng" is neither Normal nor Warning`,
	} {
		if _, err := load(expect); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", expect, err, want)
		}
	}
}

// TestExactFuelOfAnotherVersion: an exact fuel measured on one version of
// the module is compared only on that version; on another, Check leaves it
// and Notes says why, naming both digests.
func TestExactFuelOfAnotherVersion(t *testing.T) {
	v1, v2 := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	c := Case{Expect: Expect{Fuel: 400890, Digest: v1, KeepChildren: true}}
	if diff := c.Check(offline.Outcome{Digest: v1, Fuel: 400891, Response: &protocol.Response{}}); len(diff) != 1 {
		t.Errorf("the same version, one unit more: %q", diff)
	}
	if notes := c.Notes(offline.Outcome{Digest: v1, Fuel: 400890}); len(notes) != 0 {
		t.Errorf("the same version: notes %q", notes)
	}
	other := offline.Outcome{Digest: v2, Fuel: 512000, Response: &protocol.Response{}}
	if diff := c.Check(other); len(diff) != 0 {
		t.Errorf("another version's fuel was compared: %q", diff)
	}
	notes := c.Notes(other)
	if len(notes) != 1 || !strings.Contains(notes[0], "measured on "+v1) || !strings.Contains(notes[0], "this module is "+v2) {
		t.Errorf("notes %q", notes)
	}
	// Without Expect.Digest, the recorded block's digest serves.
	c.Expect.Digest, c.Recorded = "", &Recorded{Digest: v1}
	if diff := c.Check(other); len(diff) != 0 || len(c.Notes(other)) != 1 {
		t.Errorf("the recorded digest: diff %q, notes %q", diff, c.Notes(other))
	}
}
