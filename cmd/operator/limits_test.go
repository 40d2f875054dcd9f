//go:build !runonly

package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestGuestLimitFlags: --max-log-lines, --max-log-bytes and
// --max-table-elements default to the engine's defaults, and out-of-range
// values are refused.
func TestGuestLimitFlags(t *testing.T) {
	parse := func(args ...string) (engine.Limits, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var g guestLimitFlags
		g.register(fs)
		if err := fs.Parse(args); err != nil {
			return engine.Limits{}, err
		}
		var l engine.Limits
		return l, g.apply(&l)
	}
	got, err := parse()
	if err != nil || got != (engine.Limits{MaxLogLines: engine.DefaultMaxLogLines, MaxLogBytes: engine.DefaultMaxLogBytes, MaxTableElements: engine.DefaultMaxTableElements, MaxCallDepth: engine.DefaultMaxCallDepth,
		RecycleAfterCalls: engine.DefaultRecycleAfterCalls, IdleInstanceTimeout: engine.DefaultIdleInstanceTimeout, IdleSpareTimeout: engine.DefaultIdleSpareTimeout}) {
		t.Errorf("defaults %+v, %v", got, err)
	}
	got, err = parse("--max-log-lines", "7", "--max-log-bytes", "512", "--max-table-elements", "0", "--max-call-depth", "9",
		"--recycle-after-calls", "0", "--recycle-memory-pages", "300", "--idle-instance-timeout", "-1s", "--idle-spare-timeout", "3s")
	if err != nil || got != (engine.Limits{MaxLogLines: 7, MaxLogBytes: 512, MaxCallDepth: 9, RecycleMemoryPages: 300, IdleInstanceTimeout: -time.Second, IdleSpareTimeout: 3 * time.Second}) {
		t.Errorf("limits %+v, %v", got, err)
	}
	for _, args := range [][]string{
		{"--max-log-lines", "-1"},
		{"--max-log-bytes", "-1"},
		{"--max-table-elements", "4294967296"},
		{"--max-table-elements", "-1"},
		{"--max-call-depth", "2147483648"},
		{"--recycle-after-calls", "-1"},
		{"--recycle-memory-pages", "65537"},
	} {
		if got, err := parse(args...); err == nil {
			t.Errorf("%q accepted: %+v", args, got)
		}
	}
	for _, cmd := range []string{"run", "invoke", "test"} {
		var errOut bytes.Buffer
		if err := run([]string{cmd, "--help"}, io.Discard, &errOut); err != nil {
			t.Fatalf("%s --help: %v", cmd, err)
		}
		for _, f := range []string{"-max-log-lines", "(default 100)", "-max-log-bytes", "(default 65536)", "-max-table-elements", "(default 100000)", "-idle-instance-timeout", "(default 5m0s)"} {
			if !strings.Contains(errOut.String(), f) {
				t.Errorf("%s --help does not mention %s", cmd, f)
			}
		}
	}
	var errOut bytes.Buffer
	if err := run([]string{"run", "--help"}, io.Discard, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"-event-object-qps", "(default 0.1)", "-event-object-burst", "-event-module-qps", "-event-module-burst", "-no-event-budget"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("run --help does not mention %s", f)
		}
	}
	if err := run([]string{"run", "--module", "m.wasm", "--max-log-lines", "-1"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("run --max-log-lines -1: %v", err)
	}
}

// TestGuestLogsOffline: invoke prints the guest's log lines on stderr,
// within --max-log-lines, with the line saying how many were dropped;
// test prints them only with -v, named by case.
func TestGuestLogsOffline(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	mb := testwasm.BuildFile(t, "./internal/testguests/misbehave")
	dir := t.TempDir()
	obj := filepath.Join(dir, "g.yaml")
	if err := os.WriteFile(obj, []byte("apiVersion: test.wasmreconcile.io/v1\nkind: Gadget\nmetadata: {name: g, namespace: ns}\nspec: {mode: log, lines: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := []string{"--compilation-cache-dir", compiled}
	var out, errOut bytes.Buffer
	if err := run(append([]string{"invoke", "--module", mb, "--object", obj}, cache...), &out, &errOut); err != nil {
		t.Fatalf("invoke: %v\n%s", err, errOut.String())
	}
	for i := 1; i <= 5; i++ {
		if want := "guest: info: line " + string(rune('0'+i)) + " of 5\n"; !strings.Contains(errOut.String(), want) {
			t.Errorf("invoke stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(out.String(), "line 1") {
		t.Errorf("guest logs on stdout, which is the JSON response:\n%s", out.String())
	}

	errOut.Reset()
	if err := run(append([]string{"invoke", "--module", mb, "--object", obj, "--max-log-lines", "2"}, cache...), &out, &errOut); err != nil {
		t.Fatalf("invoke: %v\n%s", err, errOut.String())
	}
	if s := errOut.String(); !strings.Contains(s, "line 2 of 5") || strings.Contains(s, "line 3 of 5") ||
		!strings.Contains(s, "dropped 3 log lines (33 bytes) over the per-call budget of 2 lines") {
		t.Errorf("invoke --max-log-lines 2: stderr\n%s", s)
	}

	errOut.Reset()
	err := run(append([]string{"invoke", "--module", mb, "--object", obj, "--max-log-bytes", "-5"}, cache...), &out, &errOut)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(errOut.String(), "operator invoke: --max-log-lines and --max-log-bytes must not be negative") {
		t.Errorf("invoke --max-log-bytes -5: %v, stderr %s", err, errOut.String())
	}

	cases := t.TempDir()
	if err := os.WriteFile(filepath.Join(cases, "log.yaml"), []byte("name: a chatty case\ninput:\n  object: {apiVersion: test.wasmreconcile.io/v1, kind: Gadget, metadata: {name: g}, spec: {mode: log, lines: 2}}\nexpect:\n  status: {summary: ok}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	out.Reset()
	if err := run(append([]string{"test"}, append(cache, mb, cases)...), &out, &errOut); err != nil {
		t.Fatalf("test: %v\n%s%s", err, out.String(), errOut.String())
	}
	if strings.Contains(errOut.String()+out.String(), "line 1 of 2") {
		t.Errorf("test without -v printed guest logs:\n%s%s", out.String(), errOut.String())
	}
	errOut.Reset()
	out.Reset()
	if err := run(append([]string{"test", "-v"}, append(cache, mb, cases)...), &out, &errOut); err != nil {
		t.Fatalf("test -v: %v\n%s%s", err, out.String(), errOut.String())
	}
	if want := "a chatty case: guest: info: line 1 of 2\na chatty case: guest: info: line 2 of 2\n"; !strings.Contains(errOut.String(), want) {
		t.Errorf("test -v stderr lacks %q:\n%s", want, errOut.String())
	}
	if !strings.Contains(out.String(), "1 passed, 0 failed") {
		t.Errorf("test -v output:\n%s", out.String())
	}
}
