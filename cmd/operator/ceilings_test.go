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

// TestCeilingFlags: the defaults are the engine's default ceilings, and
// --max-memory is a size, never pages.
func TestCeilingFlags(t *testing.T) {
	parse := func(args ...string) (engine.Limits, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c ceilingFlags
		c.register(fs)
		if err := fs.Parse(args); err != nil {
			return engine.Limits{}, err
		}
		return c.ceilings()
	}
	got, err := parse()
	if err != nil || got != (engine.Limits{Fuel: engine.DefaultMaxFuel, Timeout: engine.DefaultMaxTimeout, MemoryLimitPages: engine.DefaultMaxMemoryPages}) {
		t.Errorf("default ceilings %+v, %v", got, err)
	}
	got, err = parse("--max-fuel", "7000", "--max-timeout", "3s", "--max-memory", "512Mi")
	if err != nil || got != (engine.Limits{Fuel: 7000, Timeout: 3 * time.Second, MemoryLimitPages: 8192}) {
		t.Errorf("ceilings %+v, %v", got, err)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--max-memory", "16384"}},  // pages are not accepted: 16 KiB
		{[]string{"--max-memory", "5Gi"}},    // over wasm32's 4 GiB
		{[]string{"--max-memory", "100Ki"}},  // not a whole number of pages
		{[]string{"--max-memory", "lots"}},   // not a quantity
		{[]string{"--max-fuel", "0"}},        // no fuel at all
		{[]string{"--max-timeout", "-1s"}},   // negative
		{[]string{"--max-timeout", "0s"}},    // zero
		{[]string{"--max-memory", "1.5Gi1"}}, // malformed
	} {
		if got, err := parse(c.args...); err == nil {
			t.Errorf("%q accepted: %+v", c.args, got)
		}
	}
	if _, err := parse("--max-memory", "16384"); err == nil || !strings.Contains(err.Error(), "not a number of pages") {
		t.Errorf("--max-memory 16384: %v, want a hint that it is a size", err)
	}
}

// TestCeilingFlagsOffline: invoke and test take the ceilings and say what
// they clamped; the clamped fuel is the budget of the call.
func TestCeilingFlagsOffline(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	widget := testwasm.BuildFile(t, "./widget")
	dir := t.TempDir()
	obj := filepath.Join(dir, "w.yaml")
	if err := os.WriteFile(obj, []byte("apiVersion: examples.wasmreconcile.io/v1alpha1\nkind: Widget\nmetadata: {name: w, generation: 4}\nspec: {size: 2, color: red}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run([]string{"invoke", "--module", widget, "--object", obj, "--compilation-cache-dir", compiled,
		"--fuel", "1000000000", "--max-fuel", "1000", "--timeout", "1h", "--memory-limit", "4Gi"}, &out, &errOut)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(out.String(), `"kind": "FuelExhausted"`) || !strings.Contains(out.String(), "(budget 1000)") {
		t.Errorf("invoke with --fuel over --max-fuel: err %v, output %s", err, out.String())
	}
	for _, want := range []string{
		"note: fuel 1000000000 clamped to the ceiling 1000 (--max-fuel)",
		"note: timeout 1h0m0s clamped to the ceiling 1m0s (--max-timeout)",
		"note: memory 65536 pages (4Gi) clamped to the ceiling 4096 pages (256Mi) (--max-memory)",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("invoke stderr %q, want %q", errOut.String(), want)
		}
	}

	errOut.Reset()
	if err := run([]string{"invoke", "--module", widget, "--object", obj, "--max-memory", "16384"}, &out, &errOut); err == nil {
		t.Errorf("invoke --max-memory 16384 (pages) accepted")
	}
	if !strings.Contains(errOut.String(), "not a number of pages") {
		t.Errorf("invoke --max-memory 16384: stderr %q", errOut.String())
	}
	for _, cmd := range []string{"run", "invoke", "test"} {
		if err := run([]string{cmd, "--help"}, io.Discard, &errOut); err != nil {
			t.Fatalf("%s --help: %v", cmd, err)
		}
		for _, f := range []string{"-max-fuel", "-max-timeout", "-max-memory", `(default "256Mi")`, "(default 5000000000)", "(default 1m0s)"} {
			if !strings.Contains(errOut.String(), f) {
				t.Errorf("%s --help does not mention %s", cmd, f)
			}
		}
		errOut.Reset()
	}
}
