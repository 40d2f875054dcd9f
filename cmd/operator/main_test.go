//go:build !runonly

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func TestCLI(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		wantOut string
	}{
		{args: []string{"version"}, wantOut: "wasmreconcile operator"},
		{args: []string{"--help"}, wantOut: "Usage:"},
		{args: nil, wantErr: "missing subcommand"},
		{args: []string{"frobnicate"}, wantErr: `unknown subcommand "frobnicate"`},
		{args: []string{"run"}, wantErr: "no modules: pass --module"},
		{args: []string{"run", "--no-such-flag"}, wantErr: "flag provided but not defined"},
		{args: []string{"run", "--module", "m.wasm", "--sharding"}, wantErr: "--sharding needs --leader-elect"},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-key", "name"}, wantErr: `--shard-key "name": want namespace or uid`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-balance-tolerance", "0"}, wantErr: "--shard-balance-tolerance 0: want a fraction above 0"},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-balance-tolerance", "NaN"}, wantErr: "--shard-balance-tolerance NaN"},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-balance-interval", "500ms"}, wantErr: "--shard-balance-interval 500ms: want at least 1s"},
		// Refused before the kubeconfig is loaded (none here): a bad flag is named first.
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-slots", "3"}, wantErr: `--shard-slots "3": want a power of two from 1 to 4096`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-slots", "8192"}, wantErr: `--shard-slots "8192": want a power of two`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-mode", "serverside"}, wantErr: `--shard-mode "serverside": want auto, server-side or client-side`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-group", "a/b"}, wantErr: `--shard-group "a/b": want a label value`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-identity", "Pod_1"}, wantErr: `--shard-identity (default: $POD_NAME, else the host name) "Pod_1": the replica's Lease is named wasmreconcile-operator-IDENTITY`},
		{args: []string{"run", "--module", "m.wasm", "--sharding", "--leader-elect", "--shard-identity", strings.Repeat("a", 240)}, wantErr: "must be no more than 253 characters"},
		{args: []string{"run", "--module", "m.wasm", "--module-config", "nameonly"}, wantErr: `--module-config "nameonly": want NAME=FILE`},
		{args: []string{"run", "--module", "m.wasm", "--module-config", "m=/no/such.yaml"}, wantErr: "--module-config m: open /no/such.yaml"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		err := run(c.args, &out, &errOut)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("run(%q) error = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("run(%q): %v", c.args, err)
		}
		if !strings.Contains(out.String(), c.wantOut) {
			t.Errorf("run(%q) output %q, want %q", c.args, out.String(), c.wantOut)
		}
	}
}

func TestInvokeAndTestOffline(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	widget := testwasm.BuildFile(t, "./widget")
	dir := t.TempDir()
	obj := filepath.Join(dir, "w.yaml")
	if err := os.WriteFile(obj, []byte("apiVersion: examples.wasmreconcile.io/v1alpha1\nkind: Widget\nmetadata: {name: w, generation: 4}\nspec: {size: 2, color: red}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := []string{"--compilation-cache-dir", compiled}

	var out, errOut bytes.Buffer
	if err := run(append([]string{"invoke", "--module", widget, "--object", obj}, cache...), &out, &errOut); err != nil {
		t.Fatalf("invoke: %v\n%s", err, errOut.String())
	}
	var resp map[string]any
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("invoke output is not JSON: %v\n%s", err, out.String())
	}
	status, _ := resp["status"].(map[string]any)
	if status["summary"] != "2 x red" || resp["fuelConsumed"].(float64) <= 0 || resp["durationMs"] == nil {
		t.Errorf("invoke output %s", out.String())
	}

	// A limit: the error kind and a non-zero exit.
	out.Reset()
	err := run(append([]string{"invoke", "--module", widget, "--object", obj, "--fuel", "1000"}, cache...), &out, &errOut)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(out.String(), `"kind": "FuelExhausted"`) {
		t.Errorf("invoke with --fuel 1000: err %v, output %s", err, out.String())
	}

	// Bad input exits 2 with a message.
	errOut.Reset()
	err = run([]string{"invoke", "--module", widget, "--object", filepath.Join(dir, "missing.yaml")}, &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(errOut.String(), "missing.yaml") {
		t.Errorf("missing object: err %v, stderr %s", err, errOut.String())
	}
	err = run([]string{"invoke", "--module", widget, "--object", obj, "--memory-limit", "lots"}, &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(errOut.String(), "--memory-limit") {
		t.Errorf("bad memory limit: err %v, stderr %s", err, errOut.String())
	}

	// operator test on the module's own cases passes and prints the summary line.
	out.Reset()
	cases := filepath.Join(testwasm.RepoRoot(), "modules", "widget", "testdata", "cases")
	if err := run(append([]string{"test"}, append(cache, widget, cases)...), &out, &errOut); err != nil {
		t.Fatalf("test: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "4 passed, 0 failed") {
		t.Errorf("test output:\n%s", out.String())
	}

	// A failing case exits 1, shows a diff, and writes JUnit.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "c.yaml"), []byte("input:\n  object: {apiVersion: examples.wasmreconcile.io/v1alpha1, kind: Widget, metadata: {name: w}, spec: {size: 1}}\nexpect:\n  status: {summary: 9 x pink}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	junit := filepath.Join(bad, "report.xml")
	err = run(append([]string{"test", "--junit", junit}, append(cache, widget, bad)...), &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("failing case: err %v", err)
	}
	if !strings.Contains(out.String(), "status.summary: want \"9 x pink\", got \"1 x grey\"") || !strings.Contains(out.String(), "0 passed, 1 failed") {
		t.Errorf("failing case output:\n%s", out.String())
	}
	if b, err := os.ReadFile(junit); err != nil || !strings.Contains(string(b), `failures="1"`) {
		t.Errorf("junit report: %v\n%s", err, b)
	}
}

// TestConfigFile checks --config: values by flag name, lists for repeatable
// flags, the command line overriding the file, and unknown keys refused.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noKube := []string{"--kubeconfig", filepath.Join(dir, "no-such-kubeconfig")}
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"run", "--config", write("typo.yaml", "modules: [a.wasm]\n")}, `unknown key "modules"`},
		{[]string{"run", "--config", write("bad.yaml", "fuel: lots\n")}, "--config " + filepath.Join(dir, "bad.yaml") + ": fuel: parse error"},
		{[]string{"run", "--config", write("list.yaml", "module: [a.wasm, b.wasm]\nmodule-config: [nameonly]\n")}, `--module-config "nameonly": want NAME=FILE`},
		// The file gives modules; the command line's --module-config is checked after it.
		{append([]string{"run", "--config=" + write("ok.yaml", "module: a.wasm\nleader-elect: true\nfuel: 5000000\n"), "--module-config", "x"}, noKube...), `--module-config "x": want NAME=FILE`},
		{append([]string{"run", "--config=" + filepath.Join(dir, "ok.yaml")}, noKube...), "loading kubeconfig"},
		{[]string{"run", "--config", filepath.Join(dir, "missing.yaml")}, "--config: open"},
		// The compilation cache's bound: a size, or 0 for none.
		{append([]string{"run", "--module", "a.wasm", "--compilation-cache-max-size", "lots"}, noKube...), `--compilation-cache-max-size "lots"`},
		{append([]string{"run", "--module", "a.wasm", "--compilation-cache-max-size", "-1Gi"}, noKube...), `must be a positive size such as 512Mi, or "0" for no bound`},
		{append([]string{"run", "--module", "a.wasm", "--compilation-cache-max-size", "0"}, noKube...), "loading kubeconfig"},
		{append([]string{"run", "--module", "a.wasm", "--compilation-cache-max-size", "64Mi"}, noKube...), "loading kubeconfig"},
		{append([]string{"run", "--module", "a.wasm", "--module-cache-max-size", "lots"}, noKube...), `--module-cache-max-size "lots"`},
		{append([]string{"run", "--module", "a.wasm", "--module-cache-max-size", "-1Gi"}, noKube...), `must be a positive size such as 512Mi, or "0" for no bound`},
		{append([]string{"run", "--module", "a.wasm", "--module-cache-max-size", "0"}, noKube...), "loading kubeconfig"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		err := run(c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("run(%q) error = %v, want %q", c.args, err, c.wantErr)
		}
	}
}

// TestDeploymentArgsParse checks that the args of config/manager's
// Deployment are flags the binary accepts: it gets as far as loading the
// (missing) kubeconfig.
func TestDeploymentArgsParse(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(), "config", "manager", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "args:":
			in = true
		case in && strings.HasPrefix(trimmed, "#"): // a comment between args
		case in && strings.HasPrefix(trimmed, "- "):
			args = append(args, strings.TrimPrefix(trimmed, "- "))
		case in:
			in = false
		}
	}
	if len(args) < 2 || args[0] != "run" {
		t.Fatalf("could not read the Deployment's args: %q", args)
	}
	if last := args[len(args)-1]; !strings.HasPrefix(last, "--compilation-cache-max-size=") {
		t.Fatalf("the Deployment's args were read up to %q, not to the last one (--compilation-cache-max-size): %q", last, args)
	}
	var out, errOut bytes.Buffer
	err = run(append(args, "--kubeconfig", filepath.Join(t.TempDir(), "none")), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "loading kubeconfig") {
		t.Errorf("run(%q) = %v, want it to reach kubeconfig loading", args, err)
	}
	// Both bounded cache directories share one emptyDir: their bounds must
	// add up to less than its sizeLimit, past which the pod is evicted.
	m := regexp.MustCompile(`emptyDir: \{sizeLimit: (\S+)\}`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no emptyDir sizeLimit in the Deployment")
	}
	limit := resource.MustParse(string(m[1]))
	var bounds int64
	for _, a := range args {
		for _, flag := range []string{"--compilation-cache-max-size=", "--module-cache-max-size="} {
			if v, ok := strings.CutPrefix(a, flag); ok {
				q := resource.MustParse(v)
				bounds += q.Value()
			}
		}
	}
	if bounds == 0 || bounds >= limit.Value() {
		t.Errorf("the cache bounds add up to %d bytes against the emptyDir's sizeLimit of %s: give both bounds, under it", bounds, m[1])
	}
}
