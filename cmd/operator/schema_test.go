//go:build !runonly

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestSchemaChecks runs the webapp module's cases through `operator test
// --crds` and `operator invoke --crds`: they pass with the WebApp CRD of
// examples/, and fail with the API server's message against a CRD whose
// status schema lacks a field the module writes.
func TestSchemaChecks(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	webapp := testwasm.BuildFile(t, "./webapp")
	root := testwasm.RepoRoot()
	crds := filepath.Join(root, "examples", "crds")
	cases := filepath.Join(root, "modules", "webapp", "testdata", "cases")
	cache := "--compilation-cache-dir=" + compiled
	var exit exitError

	var out, errOut bytes.Buffer
	if err := run([]string{"test", cache, "--crds", crds, webapp, cases}, &out, &errOut); err != nil {
		t.Fatalf("test --crds %s: %v\n%s%s", crds, err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), " passed, 0 failed") || strings.Contains(errOut.String(), "no schema") {
		t.Errorf("with the CRDs:\n%s%s", out.String(), errOut.String())
	}

	// Without --crds, the WebApp status is not checked, and a note says
	// so once; the built-in children are checked all the same.
	out.Reset()
	errOut.Reset()
	if err := run([]string{"test", cache, webapp, cases}, &out, &errOut); err != nil {
		t.Fatalf("test without --crds: %v\n%s%s", err, out.String(), errOut.String())
	}
	const note = "note: WebApp.examples.wasmreconcile.io has no schema offline"
	if strings.Count(errOut.String(), note) != 1 {
		t.Errorf("without --crds, want the note once on stderr:\n%s", errOut.String())
	}

	// A CRD that lost status.children: the module writes it, the API
	// server would refuse it.
	b, err := os.ReadFile(filepath.Join(crds, "webapps.examples.wasmreconcile.io.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const children = "                children:\n                  type: array\n                  items: {type: string}\n"
	if !bytes.Contains(b, []byte(children)) {
		t.Fatal("the WebApp CRD has changed; update this test")
	}
	drifted := t.TempDir()
	if err := os.WriteFile(filepath.Join(drifted, "webapp.yaml"), bytes.Replace(b, []byte(children), nil, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = run([]string{"test", cache, "--crds", drifted, webapp, cases}, &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("drifted CRD: err %v\n%s", err, out.String())
	}
	const want = "error: want none, got InvalidResponse: module[webapp] reconcile default/shop: invalid response: the API server would refuse the status of WebApp default/shop: failed to create typed patch object (default/shop; examples.wasmreconcile.io/v1alpha1, Kind=WebApp): .status.children: field not declared in schema; fix the module"
	if !strings.Contains(out.String(), want) {
		t.Errorf("drifted CRD, want %q in:\n%s", want, out.String())
	}

	// A case can expect the refusal.
	expect := t.TempDir()
	c := `input:
  object:
    apiVersion: examples.wasmreconcile.io/v1alpha1
    kind: WebApp
    metadata: {name: shop, namespace: default, generation: 1}
    spec: {image: "nginx:1.27"}
expect:
  error: {kind: InvalidResponse, terminal: true, messageContains: ".status.children: field not declared in schema"}
`
	if err := os.WriteFile(filepath.Join(expect, "refused.yaml"), []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"test", cache, "--crds", drifted, webapp, expect}, &out, &errOut); err != nil {
		t.Errorf("a case expecting the refusal: %v\n%s", err, out.String())
	}

	// operator invoke: exit 1, the kind and the message in the JSON.
	out.Reset()
	obj := filepath.Join(root, "examples", "webapps", "shop.yaml")
	err = run([]string{"invoke", cache, "--crds", drifted, "--module", webapp, "--object", obj}, &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(out.String(), `"kind": "InvalidResponse"`) ||
		!strings.Contains(out.String(), ".status.children: field not declared in schema") {
		t.Errorf("invoke with the drifted CRD: err %v\n%s", err, out.String())
	}

	// --crds takes CRDs only, and says which file is not one.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "shop.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	err = run([]string{"test", cache, "--crds", bad, webapp, cases}, &out, &errOut)
	if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(errOut.String(), "shop.yaml is a ConfigMap (v1), not a CustomResourceDefinition") {
		t.Errorf("a --crds file that is not a CRD: err %v, stderr %s", err, errOut.String())
	}

	// The help says what is checked.
	errOut.Reset()
	_ = run([]string{"test", "--help"}, &out, &errOut)
	if !strings.Contains(errOut.String(), "Schema checks") || !strings.Contains(errOut.String(), "field not\n  declared in schema") {
		t.Errorf("operator test --help:\n%s", errOut.String())
	}
}
