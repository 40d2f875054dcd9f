package recording

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testshare.Cleanup()
	os.Exit(code)
}

// TestFetch: the recorded cases come back as served, with the token sent;
// each refusal of the operator's is an error that says what to do.
func TestFetch(t *testing.T) {
	cases := []modtest.Case{
		{Name: "a", Recorded: &modtest.Recorded{Kind: "Success", Object: "ns/a"}},
		{Name: "b", Recorded: &modtest.Recorded{Kind: "FuelExhausted", Object: "ns/b"}},
	}
	body, _ := json.Marshal(map[string]any{"cases": cases})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/records":
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer good":
			http.Error(w, "no", http.StatusUnauthorized)
		case r.URL.Query().Get("module") == "secret":
			http.Error(w, "no", http.StatusForbidden)
		case r.URL.Query().Get("module") == "gone":
			http.Error(w, "module gone is not running", http.StatusNotFound)
		case r.URL.Query().Get("module") == "junk":
			_, _ = w.Write([]byte("<html>"))
		case r.URL.Query().Get("module") == "huge":
			_, _ = w.Write([]byte(strings.Repeat(" ", 2048)))
		default:
			_, _ = w.Write(body)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	opts := func(module, token string) FetchOptions {
		return FetchOptions{Endpoint: srv.URL + "/", Path: "/records", Module: module, Token: token, MaxBytes: 1024}
	}
	got, err := Fetch(ctx, opts("widget", "good"))
	if err != nil || len(got) != 2 || got[1].Recorded.Kind != "FuelExhausted" {
		t.Fatalf("Fetch: %+v, %v", got, err)
	}
	for _, c := range []struct {
		opts FetchOptions
		want string
	}{
		{opts("widget", "bad"), "HTTP 401"},
		{opts("secret", "good"), "HTTP 403"},
		{opts("gone", "good"), "module gone is not running"},
		{opts("junk", "good"), "not the flight recorder's JSON"},
		{opts("huge", "good"), "over 1024 bytes"},
		{FetchOptions{Endpoint: "ftp://x", Path: "/records", Module: "m"}, "not an http(s) URL"},
		{FetchOptions{Endpoint: srv.URL, Module: "m"}, "required"},
	} {
		if _, err := Fetch(ctx, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Fetch %s: %v, want an error containing %q", c.opts.Module, err, c.want)
		}
	}
}

// TestWrite: every case is written, or only the failures, under names
// that say the kind and the object and are safe as file names, in a
// directory per version of the module.
func TestWrite(t *testing.T) {
	in := offline.Input{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}}}
	v1, v2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	cases := []modtest.Case{
		{Name: "a", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Object: "ns/a", Digest: v1}},
		{Name: "b", Input: in, Recorded: &modtest.Recorded{Kind: "FuelExhausted", Object: "ns/b*c", Digest: v1}},
		{Name: "c", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Object: "ns/c", Digest: v2}},
		// Answered, but the API server refused a child: a failure too.
		{Name: "d", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Object: "ns/d", Digest: v2,
			Refused: []abi.ChildFailure{{Kind: "Ingress", Name: "d", Reason: "Invalid", Message: "spec.rules[0].host: Invalid value"}}}},
		{Name: "e", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Object: "ns/e", Digest: v2, ApplyError: "the status write was refused"}},
	}
	dir := t.TempDir()
	written, err := Write(dir, cases, false)
	want := []Written{{v1, filepath.Join(dir, "sha256-1111111111111111"), 2}, {v2, filepath.Join(dir, "sha256-2222222222222222"), 3}}
	if err != nil || !slices.Equal(written, want) {
		t.Fatalf("Write: %+v, %v; want %+v", written, err, want)
	}
	if _, err := os.Stat(filepath.Join(want[0].Dir, "002-fuelexhausted-ns-b-c.yaml")); err != nil {
		t.Error(err)
	}
	for _, f := range []string{"001-success-ns-c.yaml", "002-refused-ns-d.yaml", "003-refused-ns-e.yaml"} {
		if _, err := os.Stat(filepath.Join(want[1].Dir, f)); err != nil {
			t.Error(err)
		}
	}
	loaded, err := modtest.LoadDir(want[0].Dir)
	if err != nil || len(loaded) != 2 {
		t.Fatalf("the written cases do not load: %d, %v", len(loaded), err)
	}
	only := t.TempDir()
	// Failures only: the fuel exhausted, the refused child and the refused
	// status write.
	if written, err := Write(only, cases, true); err != nil || len(written) != 2 || written[0].Files != 1 || written[1].Files != 2 {
		t.Errorf("Write failures only: %+v, %v; want 1 of v1 and 2 of v2", written, err)
	}
}

// TestReplay: a recorded answer the module gives again is the same; one it
// no longer gives is changed, with the difference; a case with no recorded
// block is skipped.
func TestReplay(t *testing.T) {
	ctx := context.Background()
	m := loadGuest(t, "widget", "./widget")
	in := offline.Input{Object: map[string]any{"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "generation": 1}, "spec": map[string]any{"size": 3, "color": "red"}},
		Now: "2026-01-01T00:00:00Z"}
	o := offline.Run(ctx, m, in, offline.Options{Fresh: true})
	var resp map[string]any
	if err := json.Unmarshal(o.Output, &resp); err != nil || o.Err != nil {
		t.Fatalf("the widget's answer: %v %v", err, o.Err)
	}
	changed := map[string]any{}
	for k, v := range resp {
		changed[k] = v
	}
	changed["status"] = map[string]any{"summary": "something else"}
	cases := []modtest.Case{
		{Name: "same", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Response: resp, ReplayFuel: o.Fuel}},
		{Name: "changed", Input: in, Recorded: &modtest.Recorded{Kind: "Success", Response: changed}},
		{Name: "plain", Input: in},
	}
	rep := Replay(ctx, m, cases, offline.Options{}, nil)
	if rep.Same != 1 || rep.Changed != 1 || rep.Skipped != 1 || len(rep.Results) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if r := rep.Results[0]; r.Changed || r.FuelBefore != o.Fuel || r.FuelAfter != o.Fuel {
		t.Errorf("the same answer: %+v (fuel %d)", r, o.Fuel)
	}
	if r := rep.Results[1]; !r.Changed || !strings.Contains(strings.Join(r.Lines, "\n"), "status") {
		t.Errorf("a changed answer: %+v", r)
	}
}

// TestReplayUnansweredReads: a recorded call carries the reads production
// made (get NotFound included); a replay serves only those, and a read the
// recording cannot answer makes the call UNKNOWN, naming the read, rather
// than a NotFound that would show as a change. A recording without reads
// (made before they were logged) serves every read from input.related.
func TestReplayUnansweredReads(t *testing.T) {
	ctx := context.Background()
	m := loadGuest(t, "misbehave", "./internal/testguests/misbehave")
	// It gets ConfigMap ns/absent (NotFound), lists ConfigMaps app=x and
	// gets Secret ns/any (Forbidden: it declares no Secrets).
	in := offline.Input{Object: map[string]any{"apiVersion": "test.wasmreconcile.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g", "namespace": "ns", "generation": 1},
		"spec":     map[string]any{"mode": "read", "configMap": "absent", "selector": "app=x"}},
		Now: "2026-01-01T00:00:00Z"}
	o := offline.Run(ctx, m, in, offline.Options{Fresh: true})
	var resp map[string]any
	if err := json.Unmarshal(o.Output, &resp); err != nil || o.Err != nil {
		t.Fatalf("the guest's answer: %v %v", err, o.Err)
	}
	get := func(kind, name string) abi.CacheRequest {
		return abi.CacheRequest{Op: "get", APIVersion: "v1", Kind: kind, Namespace: "ns", Name: name}
	}
	all := []modtest.RecordedRead{{CacheRequest: get("ConfigMap", "absent"), Status: "NotFound"},
		{CacheRequest: abi.CacheRequest{Op: "list", APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", LabelSelector: "app=x"}, Status: "OK"},
		{CacheRequest: get("Secret", "any"), Status: "Forbidden"}}
	recorded := func(reads []modtest.RecordedRead) *modtest.Recorded {
		return &modtest.Recorded{Kind: "Success", Response: resp, ReplayFuel: o.Fuel, Reads: reads}
	}
	cases := []modtest.Case{
		{Name: "every read recorded", Input: in, Recorded: recorded(all)},
		{Name: "only the first", Input: in, Recorded: recorded(all[:1])},
		{Name: "reads not logged", Input: in, Recorded: recorded(nil)},
	}
	rep := Replay(ctx, m, cases, offline.Options{}, nil)
	if rep.Same != 2 || rep.Changed != 0 || rep.Unanswered != 1 || len(rep.Results) != 3 {
		t.Fatalf("report: %+v", rep)
	}
	// The guest stops at the failed list: the Secret is never asked for.
	want := []string{"list v1 ConfigMap in ns matching app=x"}
	if r := rep.Results[1]; !slices.Equal(r.Unanswered, want) || r.Changed {
		t.Errorf("a version reading what production did not: %+v, want unanswered %q", r, want)
	}
	for _, i := range []int{0, 2} {
		if r := rep.Results[i]; r.Changed || len(r.Unanswered) > 0 {
			t.Errorf("%s: %+v", r.Case, r)
		}
	}
}

// loadGuest builds the guest of package pkg (under modules/) and loads it
// as module name on an engine that lives as long as the test; it skips the
// test with -short.
func loadGuest(t *testing.T, name, pkg string) *engine.Module {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles a guest")
	}
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := engine.New(engine.Options{CompilationCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	m, err := e.Load(ctx, name, testwasm.Build(t, pkg), engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
