//go:build !runonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmreconcile/wasmreconcile/internal/controlplane"
)

// ingressModule reconciles ConfigMaps into an Ingress whose host is the
// ConfigMap's data.host: offline, the Ingress's schema accepts any string;
// the API server refuses a host that is not a lower-case DNS name.
const ingressModule = `package main

import guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"

var Manifest = guest.Manifest{
	Name: "ingress",
	For:  guest.GVK("", "v1", "ConfigMap"),
	Owns: []guest.GroupVersionKind{guest.GVK("networking.k8s.io", "v1", "Ingress")},
}

func init() { guest.Handle(Manifest, Reconcile) }

func Reconcile(req *guest.Request) *guest.Response {
	obj := guest.Object(req.Object)
	host := obj.NestedString("data", "host")
	return &guest.Response{Children: []map[string]any{{
		"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"rules": []any{map[string]any{"host": host, "http": map[string]any{"paths": []any{map[string]any{
			"path": "/", "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": 80}}},
		}}}}}},
	}}}
}

func main() {}
`

// TestTestAgainstTheAPIServer runs operator test with --api-server: an
// Ingress host in upper case passes the schema check offline and fails
// against the local kube-apiserver with its message; an input object the
// API server refuses fails its case unless the case says why.
func TestTestAgainstTheAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: it starts a control plane and builds a module, which -short does not")
	}
	dir := filepath.Join(t.TempDir(), "ingress")
	var out, errOut bytes.Buffer
	if err := runInit([]string{"ingress", "--for", "v1/ConfigMap", "--owns", "networking.k8s.io/v1/Ingress", "--dir", dir, "--sdk", sdkDir()}, &out, &errOut); err != nil {
		t.Fatalf("init: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(ingressModule), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "main_test.go"))
	wasm := filepath.Join(dir, "ingress.wasm")
	goTool(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-trimpath", "-buildmode=c-shared", "-ldflags=-s -w", "-o", wasm, ".")

	cases := t.TempDir()
	ingressCase := func(host string) string {
		return `input:
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: shop}, data: {host: ` + host + `}}
expect:
  children:
    - apiVersion: networking.k8s.io/v1
      kind: Ingress
      metadata: {name: web}
`
	}
	for name, content := range map[string]string{
		"lower.yaml": "name: a lower-case host\n" + ingressCase("shop.example.com"),
		"upper.yaml": "name: an upper-case host\n" + ingressCase("Shop.Example.com"),
		"bad-input.yaml": `name: an input name the API server refuses
input:
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: Web_1, namespace: shop}, data: {host: a.example.com}}
`,
		"bad-input-on-purpose.yaml": `name: the same, on purpose
invalidInput: the module must cope with names an older API server let through
input:
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: Web_1, namespace: shop}, data: {host: a.example.com}}
`,
		// Only a child is invalid, which only the offline check sees
		// (--api-server creates only the reconciled object): the server
		// accepting the object must not make the reason stale.
		"bad-child-on-purpose.yaml": `name: an invalid child, on purpose
invalidInput: the module must cope with a child an older API server let through
input:
  object: {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: shop}, data: {host: a.example.com}}
  children:
    - {apiVersion: networking.k8s.io/v1, kind: Ingress, metadata: {name: web, namespace: shop}, spec: {rules: 5}}
`,
	} {
		if err := os.WriteFile(filepath.Join(cases, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	test := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runTest(append([]string{"--compilation-cache-dir=" + compiled}, append(args, wasm, cases)...), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	// Offline only: the schema accepts every host and every name.
	got, err := test()
	if err != nil || !strings.Contains(got, "5 passed, 0 failed") || !strings.Contains(got, "API server: not run") {
		t.Fatalf("operator test offline: %v\n%s", err, got)
	}

	got, err = test("--api-server")
	if err == nil {
		t.Fatalf("operator test --api-server passed:\n%s", got)
	}
	for _, want := range []string{
		"API server: kube-apiserver " + controlplane.KubernetesVersion + ", local, server-side dry-run",
		"PASS  a lower-case host",
		"FAIL  an upper-case host",
		// The API server's own words.
		`the API server would refuse child Ingress shop/web: Ingress.networking.k8s.io "web" is invalid: spec.rules[0].host: Invalid value: "Shop.Example.com": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters`,
		"FAIL  an input name the API server refuses",
		`input.object ConfigMap shop/Web_1: the API server refused it, so a cluster never gives it to the module: ConfigMap "Web_1" is invalid: metadata.name: Invalid value: "Web_1"`,
		"PASS  the same, on purpose",
		"PASS  an invalid child, on purpose",
		"3 passed, 2 failed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("operator test --api-server: output lacks %q:\n%s", want, got)
		}
	}
	// The control plane it started is stopped and removed.
	m := regexp.MustCompile(`on loopback \(in (\S+)\)`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("the output does not say where the control plane ran:\n%s", got)
	}
	if pids := controlplane.ProcessesUsing(m[1]); len(pids) > 0 {
		t.Errorf("after operator test --api-server, processes still use %s: %v", m[1], pids)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("after operator test --api-server, %s: %v, want it removed", m[1], err)
	}
}
