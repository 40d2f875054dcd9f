package spectest_test

// TestSpecSuite runs the official WebAssembly spec test suite (core v1 and v2,
// as shipped in wazero's module zip) against modules rewritten by
// instrument.Instrument and executed under package meter.
//
// The runner is adapted from wazero's
// internal/integration_test/spectest/spectest.go
// (github.com/tetratelabs/wazero v1.12.0, Apache License 2.0). Differences:
//   - every module, including the "spectest" host module, is passed through
//     instrument.Instrument before instantiation, in a runtime that has the
//     meter host module, and every instantiation and invocation runs with a
//     fresh meter whose budget is too large to run out;
//   - assert_invalid / assert_malformed pass when either Instrument or
//     instantiation refuses the module;
//   - wazero's internal packages are replaced by local code, and traps are
//     matched by error text instead of errors.Is;
//   - failures are reported as wast file:line rather than per-command
//     subtests, and deviations must be listed in specExceptions.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// fuelBudget is the budget of every metered instantiation and call: large
// enough that no spec case can exhaust it.
const fuelBudget = 1 << 62

// minRanFraction is the fraction of all commands that must actually run; it
// guards against a broken path silently skipping most of the suite. Only
// text-format modules (about 2% of commands) are skipped by design.
const minRanFraction = 0.9

type specKey struct {
	dir  string // "v1" or "v2"
	wast string // e.g. "binary.wast"
	line int
}

// specExceptions lists the spec commands that are allowed to fail on
// instrumented modules, each with the principled reason it cannot pass. A
// listed command that fails is counted as an exception instead of a test
// failure; one that passes is logged so the entry can be removed. Entries
// that match no command fail the test.
//
// Keep it empty unless the reason is a real, documented limitation of
// metering; never add an entry to hide a bug.
var specExceptions = map[specKey]string{
	// {"v2", "example.wast", 123}: "why this case cannot pass on an instrumented module",
}

func TestSpecSuite(t *testing.T) {
	root := testwasm.SpecRoot(t)
	spectestWasm, err := os.ReadFile(filepath.Join(root, "testdata", "spectest.wasm"))
	if err != nil {
		t.Fatalf("read spectest host module: %v", err)
	}

	// The compiler engine runs the whole suite well within the time budget
	// on a 2-core machine, so there is no need for the interpreter.
	for _, tc := range []struct {
		dir      string
		features api.CoreFeatures
	}{
		{"v1", api.CoreFeaturesV1},
		{"v2", api.CoreFeaturesV2},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			config := wazero.NewRuntimeConfigCompiler().WithCoreFeatures(tc.features)
			runSpecDir(t, tc.dir, filepath.Join(root, tc.dir, "testdata"), spectestWasm, config)
		})
	}
}

type specCounts struct {
	files       int
	commands    int    // all commands in the .json files
	ran         int    // commands executed (a "register" counts with its module)
	skipped     int    // text-format modules, which wazero cannot load either
	exceptions  int    // listed in specExceptions and failed
	modules     int    // valid modules instrumented and instantiated
	metered     int    // ... of which export the fuel global
	refused     int    // invalid or malformed modules refused by Instrument itself
	rejected    int    // invalid or malformed modules refused at instantiation
	invocations int    // function calls made
	fuel        uint64 // fuel used by those calls, summed
}

func runSpecDir(t *testing.T, dir, testdata string, spectestWasm []byte, config wazero.RuntimeConfig) {
	entries, err := os.ReadDir(testdata)
	if err != nil {
		t.Fatalf("read %s: %v", testdata, err)
	}
	var files []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		t.Fatalf("no .json spec files in %s", testdata)
	}

	counts := &specCounts{}
	seen := map[specKey]bool{} // exception keys that match a command
	for _, f := range files {
		t.Run(strings.TrimSuffix(f, ".json"), func(t *testing.T) {
			counts.files++
			runSpecFile(t, dir, testdata, f, spectestWasm, config, counts, seen)
		})
	}

	listed := 0
	for _, k := range sortedKeys(specExceptions) {
		if k.dir != dir {
			continue
		}
		listed++
		if !seen[k] {
			t.Errorf("specExceptions entry %s/%s:%d matches no command", k.dir, k.wast, k.line)
		}
	}
	t.Logf("%s: %d files, %d commands: %d ran, %d skipped (text format), %d exceptions listed, %d of them failed",
		dir, counts.files, counts.commands, counts.ran, counts.skipped, listed, counts.exceptions)
	t.Logf("%s: %d modules instrumented and instantiated (%d metered), %d invalid/malformed refused by Instrument, %d at instantiation",
		dir, counts.modules, counts.metered, counts.refused, counts.rejected)
	t.Logf("%s: %d invocations, %d fuel used", dir, counts.invocations, counts.fuel)

	if float64(counts.ran) < minRanFraction*float64(counts.commands) {
		t.Errorf("%s: only %d of %d commands ran (want at least %.0f%%)", dir, counts.ran, counts.commands, minRanFraction*100)
	}
	if counts.metered > 0 && counts.fuel == 0 {
		t.Errorf("%s: %d modules are metered but no fuel was used", dir, counts.metered)
	}
}

// fileRunner holds the state of one .json file: one runtime, as in wazero.
type fileRunner struct {
	ctx      context.Context
	dir      string
	testdata string
	wast     string
	rt       wazero.Runtime
	modules  map[string]api.Module // by wast $name
	last     api.Module            // nil if the last module command failed
	counts   *specCounts
}

func runSpecFile(t *testing.T, dir, testdata, file string, spectestWasm []byte, config wazero.RuntimeConfig, counts *specCounts, seen map[specKey]bool) {
	raw, err := os.ReadFile(filepath.Join(testdata, file))
	if err != nil {
		t.Fatal(err)
	}
	var base testbase
	if err := json.Unmarshal(raw, &base); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	counts.commands += len(base.Commands)
	wast := filepath.Base(filepath.ToSlash(base.SourceFile))

	ctx := context.Background()
	r := &fileRunner{
		ctx:      ctx,
		dir:      dir,
		testdata: testdata,
		wast:     wast,
		rt:       wazero.NewRuntimeWithConfig(ctx, config),
		modules:  map[string]api.Module{},
		counts:   counts,
	}
	defer func() {
		if err := r.rt.Close(ctx); err != nil {
			t.Errorf("%s: close runtime: %v", wast, err)
		}
	}()

	if err := meter.Instantiate(ctx, r.rt); err != nil {
		t.Fatalf("%s: instantiate meter host module: %v", wast, err)
	}
	st, err := instrument.Instrument(bytes.Clone(spectestWasm))
	if err != nil {
		t.Fatalf("%s: instrument spectest host module: %v", wast, err)
	}
	if _, err := r.instantiate(st, wazero.NewModuleConfig().WithName("spectest")); err != nil {
		t.Fatalf("%s: instantiate spectest host module: %v", wast, err)
	}

	for i := 0; i < len(base.Commands); i++ {
		c := &base.Commands[i]
		key := specKey{dir, wast, c.Line}
		reason, excepted := specExceptions[key]
		if excepted {
			seen[key] = true
		}
		start := i
		skipped, err := r.run(base.Commands, &i)
		counts.ran += i - start // a "register" consumed with its module
		switch {
		case skipped:
			counts.skipped++
		case err == nil:
			counts.ran++
			if excepted {
				t.Logf("%s:%d %s: listed in specExceptions (%s) but passes; remove the entry", wast, c.Line, c.describe(), reason)
			}
		case excepted:
			counts.ran++
			counts.exceptions++
			t.Logf("%s:%d %s: known exception (%s): %v", wast, c.Line, c.describe(), reason, err)
		default:
			counts.ran++
			t.Errorf("%s:%d %s: %v", wast, c.Line, c.describe(), err)
		}
	}
}

// instantiate instantiates wasm with a fresh meter, as start functions of
// instrumented modules charge fuel.
func (r *fileRunner) instantiate(wasm []byte, cfg wazero.ModuleConfig) (api.Module, error) {
	mctx := meter.WithMeter(r.ctx, &meter.Meter{Budget: fuelBudget})
	return r.rt.InstantiateWithConfig(mctx, wasm, cfg)
}

func (r *fileRunner) read(filename string) ([]byte, error) {
	return os.ReadFile(filepath.Join(r.testdata, filename))
}

// target is the module an action applies to.
func (r *fileRunner) target(c *command) (api.Module, error) {
	if c.Action.Module != "" {
		m, ok := r.modules[c.Action.Module]
		if !ok {
			return nil, fmt.Errorf("module %s was not instantiated", c.Action.Module)
		}
		return m, nil
	}
	if r.last == nil {
		return nil, fmt.Errorf("no module instantiated (the last module command failed)")
	}
	return r.last, nil
}

// invoke calls the function an "invoke" action names, with a fresh meter.
func (r *fileRunner) invoke(c *command) (api.Function, []uint64, error, error) {
	if c.Action.ActionType != "invoke" {
		return nil, nil, nil, fmt.Errorf("unsupported action type %q", c.Action.ActionType)
	}
	m, err := r.target(c)
	if err != nil {
		return nil, nil, nil, err
	}
	fn := m.ExportedFunction(c.Action.Field)
	if fn == nil {
		return nil, nil, nil, fmt.Errorf("no exported function %q", c.Action.Field)
	}
	args, err := c.getAssertReturnArgs()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bad arguments: %v", err)
	}
	mt := &meter.Meter{Budget: fuelBudget}
	metered := mt.Start(m)
	results, callErr := fn.Call(meter.WithMeter(r.ctx, mt), args...)
	r.counts.invocations++
	if metered {
		r.counts.fuel += mt.Used(m)
	}
	return fn, results, callErr, nil
}

// refused reports whether an invalid or malformed module is refused, by
// Instrument or else at instantiation.
func (r *fileRunner) refused(c *command) error {
	buf, err := r.read(c.Filename)
	if err != nil {
		return err
	}
	out, err := instrument.Instrument(buf)
	if err != nil {
		r.counts.refused++
		return nil
	}
	if _, err := r.instantiate(out, wazero.NewModuleConfig()); err == nil {
		return fmt.Errorf("module was instrumented and instantiated, want it refused (%q)", c.Text)
	}
	r.counts.rejected++
	return nil
}

// run runs base[*i], advancing *i past a "register" it consumes. It reports
// skipped for commands that are not run by design.
func (r *fileRunner) run(base []command, i *int) (skipped bool, err error) {
	c := &base[*i]
	switch c.CommandType {
	case "module":
		r.last = nil
		buf, err := r.read(c.Filename)
		if err != nil {
			return false, err
		}
		var registeredName string
		if next := *i + 1; next < len(base) && base[next].CommandType == "register" {
			registeredName = base[next].As
			*i = next // the register is done by naming the instance
		}
		out, err := instrument.Instrument(bytes.Clone(buf))
		if err != nil {
			return false, fmt.Errorf("instrument valid module: %v", err)
		}
		mod, err := r.instantiate(out, wazero.NewModuleConfig().WithName(registeredName))
		if err != nil {
			return false, fmt.Errorf("instantiate instrumented module: %v", err)
		}
		r.counts.modules++
		_, metered := mod.ExportedGlobal(instrument.ExportFuel).(api.MutableGlobal)
		if metered {
			r.counts.metered++
		} else if !bytes.Equal(out, buf) {
			return false, fmt.Errorf("Instrument rewrote the module but it exports no mutable global %q", instrument.ExportFuel)
		}
		if c.Name != "" {
			r.modules[c.Name] = mod
		}
		r.last = mod
		return false, nil

	case "assert_return", "action":
		switch c.Action.ActionType {
		case "invoke":
			_, exps, err := c.getAssertReturnArgsExps()
			if err != nil {
				return false, fmt.Errorf("bad expected values: %v", err)
			}
			fn, results, callErr, err := r.invoke(c)
			if err != nil {
				return false, err
			}
			if callErr != nil {
				return false, fmt.Errorf("call failed: %v", callErr)
			}
			if len(results) != len(exps) {
				return false, fmt.Errorf("got %d result words %v, want %d %v", len(results), results, len(exps), exps)
			}
			laneTypes := map[int]laneType{}
			skipIndices := map[int]bool{}
			for j, e := range c.Exps {
				if e.ValType == "v128" {
					laneTypes[j] = e.LaneType
				}
				// A nil value of a reference type means "any reference".
				if e.Value == nil && (e.ValType == "funcref" || e.ValType == "externref" || e.ValType == "exnref") {
					skipIndices[j] = true
				}
			}
			if ok, msg := valuesEq(results, exps, fn.Definition().ResultTypes(), laneTypes, skipIndices); !ok {
				return false, fmt.Errorf("wrong results\n%s", msg)
			}
			return false, nil
		case "get":
			_, exps, err := c.getAssertReturnArgsExps()
			if err != nil {
				return false, fmt.Errorf("bad expected values: %v", err)
			}
			if len(exps) != 1 {
				return false, fmt.Errorf("want 1 expected value, have %d", len(exps))
			}
			m, err := r.target(c)
			if err != nil {
				return false, err
			}
			g := m.ExportedGlobal(c.Action.Field)
			if g == nil {
				return false, fmt.Errorf("no exported global %q", c.Action.Field)
			}
			if got := g.Get(); got != exps[0] {
				return false, fmt.Errorf("global %q = %d, want %d", c.Action.Field, got, exps[0])
			}
			return false, nil
		default:
			return false, fmt.Errorf("unsupported action type %q", c.Action.ActionType)
		}

	case "assert_trap", "assert_exhaustion", "assert_exception":
		_, _, callErr, err := r.invoke(c)
		if err != nil {
			return false, err
		}
		if callErr == nil {
			return false, fmt.Errorf("call succeeded, want error %q", c.Text)
		}
		want := ""
		switch c.CommandType {
		case "assert_trap":
			want = wazeroTrapText(c.Text)
		case "assert_exhaustion":
			want = "stack overflow"
		case "assert_exception":
			want = "uncaught exception"
		}
		if want != "" && !strings.Contains(callErr.Error(), want) {
			return false, fmt.Errorf("call failed with %q, want an error containing %q (spec text %q)", callErr, want, c.Text)
		}
		return false, nil

	case "assert_malformed", "assert_invalid":
		if c.ModuleType == "text" {
			return true, nil // like wazero: text modules cannot be loaded
		}
		return false, r.refused(c)

	case "assert_unlinkable", "assert_uninstantiable":
		if c.ModuleType == "text" {
			return true, nil
		}
		buf, err := r.read(c.Filename)
		if err != nil {
			return false, err
		}
		out, err := instrument.Instrument(buf)
		if err != nil {
			return false, fmt.Errorf("instrument valid module: %v", err)
		}
		_, err = r.instantiate(out, wazero.NewModuleConfig())
		if c.CommandType == "assert_uninstantiable" && c.Text == "out of bounds table access" {
			// As in wazero's harness: wast2json turns this assert_trap into
			// assert_uninstantiable, but it expects the error from an active
			// element segment "after" instantiation while keeping the
			// function instances; wazero chooses to instantiate without error.
			// https://github.com/WebAssembly/spec/blob/d39195773112a22b245ffbe864bab6d1182ccb06/test/core/linking.wast#L264-L274
			if err != nil {
				return false, fmt.Errorf("instantiate: %v (wazero instantiates this module)", err)
			}
			return false, nil
		}
		if err == nil {
			return false, fmt.Errorf("module was instantiated, want error %q", c.Text)
		}
		return false, nil

	default:
		// A "register" not right after its module is unsupported, as in wazero.
		return false, fmt.Errorf("unsupported command type %q", c.CommandType)
	}
}

// wazeroTrapText maps the spec's trap text to the message of wazero's
// corresponding trap (internal/wasmruntime/errors.go), or "" if unknown, in
// which case any error passes.
func wazeroTrapText(spec string) string {
	switch spec {
	case "expected shared memory", "out of bounds memory access", "integer overflow",
		"invalid conversion to integer", "integer divide by zero", "unaligned atomic",
		"unreachable", "uncaught exception":
		return spec
	case "indirect call type mismatch", "indirect call":
		return "indirect call type mismatch"
	case "undefined element", "undefined", "out of bounds table access":
		return "invalid table access"
	case "null", "null reference", "null function reference", "null function":
		return "null reference"
	}
	if strings.HasPrefix(spec, "uninitialized") {
		return "invalid table access"
	}
	return ""
}

func (c *command) describe() string {
	switch c.CommandType {
	case "module":
		if c.Name != "" {
			return fmt.Sprintf("module %s (%s)", c.Name, c.Filename)
		}
		return "module " + c.Filename
	case "assert_malformed", "assert_invalid", "assert_unlinkable", "assert_uninstantiable":
		return fmt.Sprintf("%s %s %q", c.CommandType, c.Filename, c.Text)
	}
	args := make([]string, len(c.Action.Args))
	for i, a := range c.Action.Args {
		args[i] = a.String()
	}
	s := fmt.Sprintf("%s %s %q(%s)", c.CommandType, c.Action.ActionType, c.Action.Field, strings.Join(args, ", "))
	if c.Action.Module != "" {
		s += " in " + c.Action.Module
	}
	if c.Text != "" {
		s += fmt.Sprintf(" want %q", c.Text)
	}
	return s
}

// sortedKeys returns the keys of m in order, to report deterministically.
func sortedKeys(m map[specKey]string) []specKey {
	keys := make([]specKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.dir != b.dir {
			return a.dir < b.dir
		}
		if a.wast != b.wast {
			return a.wast < b.wast
		}
		return a.line < b.line
	})
	return keys
}
