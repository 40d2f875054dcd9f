//go:build !runonly

package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestLogFlags: operator run logs in production mode unless --zap-devel is
// given: JSON lines at info, no debug lines, no stack trace below error.
// -v=1 (or --zap-log-level=debug, or =1) adds the V(1) lines, such as
// START and FINISH; --zap-devel switches to console lines. A failed health
// probe's info line from controller-runtime is dropped at every level.
func TestLogFlags(t *testing.T) {
	for _, c := range []struct {
		args        []string
		debug, json bool
	}{
		{args: nil, json: true},
		{args: []string{"-v=1"}, debug: true, json: true},
		{args: []string{"-v", "2"}, debug: true, json: true},
		{args: []string{"--zap-log-level=debug"}, debug: true, json: true},
		{args: []string{"--zap-log-level=1"}, debug: true, json: true},
		{args: []string{"-v=1", "-v=0"}, json: true},
		{args: []string{"--zap-devel"}, debug: true},
		{args: []string{"--zap-devel", "-v=0"}},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var l logFlags
		l.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		var out bytes.Buffer
		log := l.logger(&out)
		log.V(1).Info("START reconcile")
		log.Info("module loaded")
		log.V(1).Info("FINISH reconcile", "fuel", 1)
		log.Info("WARNING: module load health")
		probes := log.WithName("controller-runtime").WithName("healthz")
		probes.Info("healthz check failed", "statuses", []struct{}{{}})
		probes.V(1).Info("healthz check failed", "checker", "wasmreconcile", "error", "module x: install its CRD")
		text := out.String()
		if strings.Contains(text, "statuses") {
			t.Errorf("%q: a failed probe's info line was logged:\n%s", c.args, text)
		}
		if got := strings.Contains(text, "install its CRD"); got != c.debug {
			t.Errorf("%q: a failed probe's V(1) line logged = %v, want %v:\n%s", c.args, got, c.debug, text)
		}
		if got := strings.Contains(text, "START reconcile") && strings.Contains(text, "FINISH reconcile"); got != c.debug {
			t.Errorf("%q: V(1) lines logged = %v, want %v:\n%s", c.args, got, c.debug, text)
		}
		if !strings.Contains(text, "module loaded") {
			t.Errorf("%q: an info line is missing:\n%s", c.args, text)
		}
		if got := strings.HasPrefix(text, "{"); got != c.json {
			t.Errorf("%q: JSON lines = %v, want %v:\n%s", c.args, got, c.json, text)
		}
		if c.json && strings.Contains(text, "stacktrace") {
			t.Errorf("%q: a stack trace below the error level:\n%s", c.args, text)
		}
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var l logFlags
	l.register(fs)
	for _, bad := range []string{"-v=-1", "-v=high"} {
		if err := fs.Parse([]string{bad}); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestLogValuesDeferred: key/values reach the line they belong to, in
// order, across names, errors and call depths, although the logger
// encodes them only when a line is written.
func TestLogValuesDeferred(t *testing.T) {
	var l logFlags
	var out bytes.Buffer
	log := l.logger(&out)
	obj := log.WithValues("module", "widget").WithName("reconcile").WithValues("object", "default/w", "reconcileID", "r1")
	obj.V(1).Info("not written") // disabled: its values are never encoded
	obj.Info("reconcile failed", "result", "ReconcileFailed")
	obj.WithCallDepth(1).Error(errors.New("boom"), "apply failed", "what", "status")
	other := log.WithValues("module", "other")
	other.Info("loaded")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out.String())
	}
	for i, want := range [][]string{
		{`"logger":"reconcile"`, `"module":"widget"`, `"object":"default/w"`, `"reconcileID":"r1"`, `"result":"ReconcileFailed"`},
		{`"module":"widget"`, `"object":"default/w"`, `"error":"boom"`, `"what":"status"`},
		{`"module":"other"`, `"msg":"loaded"`},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %s: %s", i+1, w, lines[i])
			}
		}
	}
	if strings.Contains(lines[2], "widget") || strings.Contains(lines[2], "default/w") {
		t.Errorf("another logger's values leaked: %s", lines[2])
	}
	if i, j := strings.Index(lines[0], `"module"`), strings.Index(lines[0], `"object"`); i > j {
		t.Errorf("values out of order: %s", lines[0])
	}
}
