package flightrecorder

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/compare"
)

// Case is rec as an `operator test` case: its input, an expectation that
// is what production returned (the status, children, Events, requeue,
// error; the exact fuel of the replay, when the replay answered as
// production did), and the recorded call itself for `operator replay`.
func (rec Record) Case(n int) modtest.Case {
	outcome := string(rec.Kind)
	switch {
	case len(rec.Refused) > 0:
		f := rec.Refused[0]
		outcome += fmt.Sprintf(", %s %s refused (%s)", f.Kind, f.Name, f.Reason)
		if len(rec.Refused) > 1 {
			outcome += fmt.Sprintf(" and %d more", len(rec.Refused)-1)
		}
	case rec.ApplyError != "":
		outcome += ", its apply failed"
	}
	word := kindWord(rec.Kind)
	if rec.failed() {
		word = "failure"
	}
	c := modtest.Case{
		Name:  fmt.Sprintf("%s %d: %s %s at %s", word, n, rec.Object, outcome, rec.At.Format(time.RFC3339)),
		Input: rec.Input,
	}
	r := &modtest.Recorded{Module: rec.Module, Digest: rec.Digest, Object: rec.Object, At: rec.At.Format(time.RFC3339Nano),
		Kind: string(rec.Kind), Error: rec.Error, Fuel: rec.Fuel, ReplayFuel: rec.ReplayFuel, DurationSeconds: rec.Duration, Redacted: rec.Redacted,
		Refused: rec.Refused, ApplyError: rec.ApplyError, Reads: rec.Reads}
	var resp *abi.Response
	if len(rec.Response) > 0 {
		var m map[string]any
		if json.Unmarshal(rec.Response, &m) == nil {
			r.Response = m
		}
		var a abi.Response
		if json.Unmarshal(rec.Response, &a) == nil {
			resp = &a
		}
	}
	c.Recorded = r
	// What production answered, against what the replay did.
	prod := compare.AnswerOf(rec.Kind, rec.Error, rec.Response)
	replayOut := rec.ReplayResponse
	if replayOut == nil && rec.ReplayKind == rec.Kind {
		replayOut = rec.Response
	}
	if rec.ReplayKind != "" {
		if v, lines := compare.Compare(prod, compare.AnswerOf(rec.ReplayKind, rec.ReplayError, replayOut), nil); v != compare.Agree {
			r.ReplayDiffers = lines
		}
	}
	c.Expect = expectOf(rec.Kind, resp)
	if len(r.ReplayDiffers) == 0 && rec.ReplayFuel > 0 && !rec.Kind.Preempted() && rec.Kind != protocol.MemoryLimit {
		c.Expect.Fuel, c.Expect.Digest = rec.ReplayFuel, rec.Digest
	}
	return c
}

func kindWord(k protocol.Kind) string {
	if k == protocol.Success {
		return "sample"
	}
	return "failure"
}

// expectOf is what a case expects of a call that ended as kind with resp.
func expectOf(kind protocol.Kind, resp *abi.Response) modtest.Expect {
	var e modtest.Expect
	if resp == nil || (kind != protocol.Success && kind != protocol.ReconcileFailed) {
		e.Error = &modtest.ErrorExpect{Kind: string(kind)}
		return e
	}
	e.Status = resp.Status
	if resp.Children == nil {
		e.KeepChildren = true
	} else {
		e.Children = resp.Children
	}
	e.Events = []modtest.EventExpect{} // production emitted none: events: [] requires none
	for _, ev := range resp.Events {
		e.Events = append(e.Events, modtest.EventExpect{Type: string(ev.Type), Reason: ev.Reason, MessageContains: ev.Message})
	}
	if resp.RequeueAfterSeconds > 0 {
		n := resp.RequeueAfterSeconds
		e.RequeueAfterSeconds = &n
	}
	if resp.Finalized {
		t := true
		e.Finalized = &t
	}
	if resp.Error != nil {
		terminal := resp.Error.Terminal
		e.Error = &modtest.ErrorExpect{Kind: string(protocol.ReconcileFailed), Terminal: &terminal, MessageContains: resp.Error.Message}
	}
	return e
}

// Cases are module's records as cases, failures first.
func (r *Recorder) Cases(module string) []modtest.Case { return casesOf(r.Records(module)) }

// casesOf is the cases of recs, numbered from 1.
func casesOf(recs []Record) []modtest.Case {
	out := make([]modtest.Case, len(recs))
	for i, rec := range recs {
		out[i] = rec.Case(i + 1)
	}
	return out
}
