//go:build !runonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/recording"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestRecordReplay fetches recorded cases from a server that speaks the
// flight recorder's protocol (the operator's own endpoint is tested
// against a real cluster in host/operator, TestFlightRecorder), writes
// them with operator record, passes them with operator test, and replays
// them with operator replay on the same version (same) and on another
// (changed, naming the field).
func TestRecordReplay(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.wasm")
	v2 := filepath.Join(dir, "v2.wasm")
	if err := os.WriteFile(v1, testwasm.BuildVersion(t, "./widget", "1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v2, testwasm.BuildVersion(t, "./widget", "2"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What the recorder would serve: two calls of v1, replayed fresh.
	ctx := context.Background()
	eng, _ := engine.New(engine.Options{CompilationCacheDir: compiled})
	defer eng.Close(ctx)
	b, _ := os.ReadFile(v1)
	m, err := eng.Load(ctx, "widget", b, engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var cases []modtest.Case
	for _, size := range []int64{2, 1_000_000} {
		in := offline.Input{Object: map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "ns", "generation": int64(3)}, "spec": map[string]any{"size": size}},
			Now: "2026-12-01T00:00:00Z"}
		o := offline.Run(ctx, m, in, offline.Options{Fresh: true})
		var resp map[string]any
		if err := json.Unmarshal(o.Output, &resp); err != nil {
			t.Fatal(err)
		}
		c := modtest.Case{Name: "recorded", Input: in,
			Recorded: &modtest.Recorded{Module: "widget", Digest: m.Digest(), Object: "ns/w", Kind: string(o.Kind()), Response: resp, Fuel: o.Fuel + 1000, ReplayFuel: o.Fuel}}
		c.Expect.Fuel, c.Expect.Digest = o.Fuel, m.Digest()
		c.Expect.Status, _ = resp["status"].(map[string]any)
		c.Expect.KeepChildren = true
		if e := o.Err; e != nil {
			c.Expect.Error = &modtest.ErrorExpect{Kind: string(o.Kind())}
		}
		cases = append(cases, c)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != operator.FlightRecorderPath || r.URL.Query().Get("module") != "widget" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"module": "widget", "cases": cases})
	}))
	defer srv.Close()

	out := filepath.Join(dir, "recorded")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"record", "--endpoint", srv.URL, "--module", "widget", "--token", "bad", "--out", out}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("a refused token: %v", err)
	}
	if err := run([]string{"record", "--endpoint", srv.URL, "--module", "widget", "--token", "good", "--out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("record: %v", err)
	}
	t.Logf("$ operator record …\n%s", stdout.String()) // docs/rollout.md shows these outputs
	versionDir := filepath.Join(out, recording.VersionDir(m.Digest()))
	if want := "wrote 2 case files of module widget " + m.Digest() + " to " + versionDir; !strings.Contains(stdout.String(), want) {
		t.Fatalf("record said %q, want %q", stdout.String(), want)
	}
	stdout.Reset()
	if err := run([]string{"test", "--compilation-cache-dir", compiled, v1, versionDir}, &stdout, &stderr); err != nil {
		t.Fatalf("operator test of the recorded cases: %v\n%s", err, stdout.String())
	}
	t.Logf("$ operator test v1.wasm …\n%s", stdout.String())
	if strings.Contains(stdout.String(), "note: fuel not compared") {
		t.Errorf("operator test on the recorded version did not compare fuel:\n%s", stdout.String())
	}
	// On another version, the exact fuel is not compared, and a note says so.
	stdout.Reset()
	_ = run([]string{"test", "--compilation-cache-dir", compiled, v2, versionDir}, &stdout, &stderr)
	t.Logf("$ operator test v2.wasm …\n%s", stdout.String())
	if want := "note: fuel not compared: the exact fuel"; strings.Count(stdout.String(), want) != 2 || !strings.Contains(stdout.String(), "measured on "+m.Digest()) {
		t.Errorf("operator test on another version: want %q twice, naming %s:\n%s", want, m.Digest(), stdout.String())
	}
	out = versionDir
	stdout.Reset()
	if err := run([]string{"replay", "--compilation-cache-dir", compiled, out, "--module", v1}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "2 same, 0 changed") {
		t.Fatalf("replay on the same version: %v\n%s", err, stdout.String())
	}
	stdout.Reset()
	err = run([]string{"replay", "--compilation-cache-dir", compiled, "--fail-on-change", out, "--module", v2}, &stdout, &stderr)
	if err == nil || !strings.Contains(stdout.String(), "CHANGED") || !strings.Contains(stdout.String(), `"generation 3 reconciled by widget v2"`) ||
		!strings.Contains(stdout.String(), "status.conditions[0].message") {
		t.Fatalf("replay on another version: %v\n%s", err, stdout.String())
	}
	t.Logf("$ operator replay … --module v2.wasm\n%s", stdout.String())
	if !strings.Contains(stdout.String(), "1 same, 1 changed") {
		t.Errorf("replay summary: %s", stdout.String())
	}
}

func TestReplayNamesTheVersions(t *testing.T) {
	rec := func(module, digest string) modtest.Case {
		return modtest.Case{Recorded: &modtest.Recorded{Module: module, Digest: digest}}
	}
	cases := []modtest.Case{rec("shop", "sha256:aaa"), rec("shop", "sha256:aaa"), {}, rec("shop", "sha256:bbb"), rec("other", "sha256:ccc")}
	got := strings.Join(versionLines(cases, "shop", "sha256:bbb"), "\n")
	for _, want := range []string{
		"2 calls recorded on shop sha256:aaa, replayed on another version, sha256:bbb: answers are compared; fuel differs by design",
		"1 calls recorded on shop sha256:bbb, replayed on the same version",
		"1 calls recorded on module other sha256:ccc, replayed on module shop sha256:bbb: another module",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("versionLines lacks %q:\n%s", want, got)
		}
	}
}

// TestRecordNeedsAToken: with no token anywhere, operator record says so
// and what to do, before any request (the endpoint does not exist).
func TestRecordNeedsAToken(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("WASMRECONCILE_TOKEN", "")
	var stdout, stderr bytes.Buffer
	err := run([]string{"record", "--endpoint", "http://127.0.0.1:1", "--module", "widget", "--out", t.TempDir()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no token to send") || !strings.Contains(err.Error(), "export KUBECONFIG") {
		t.Errorf("record with no token anywhere: %v, want an error saying so before any request", err)
	}
}
