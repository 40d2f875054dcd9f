package schemacheck_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/schemacheck"
)

func load(t *testing.T) *schemacheck.Checker {
	t.Helper()
	c, err := schemacheck.LoadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// CronJobTypo is a CronJob whose pod template has a typo'd field.
const CronJobTypo = `
apiVersion: batch/v1
kind: CronJob
metadata: {name: backup, namespace: default}
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          serviceAccount_Name: backup
          restartPolicy: OnFailure
          containers: [{name: backup, image: "busybox:1.36"}]
`

func TestBuiltinChild(t *testing.T) {
	c := load(t)
	r, checked := c.CheckObject(obj(t, CronJobTypo))
	if !checked || r == nil {
		t.Fatalf("typo'd CronJob: refusal %v, checked %v; want a refusal", r, checked)
	}
	const want = "failed to create typed patch object (default/backup; batch/v1, Kind=CronJob): .spec.jobTemplate.spec.template.spec.serviceAccount_Name: field not declared in schema"
	if r.Message != want || r.What != "child CronJob default/backup" {
		t.Errorf("refusal %q: %q\nwant %q", r.What, r.Message, want)
	}
	if len(r.Fields) != 1 || r.Fields[0] != ".spec.jobTemplate.spec.template.spec.serviceAccount_Name" {
		t.Errorf("fields %q", r.Fields)
	}

	valid := strings.Replace(CronJobTypo, "serviceAccount_Name", "serviceAccountName", 1)
	if r, checked := c.CheckObject(obj(t, valid)); !checked || r != nil {
		t.Errorf("valid CronJob: refusal %v, checked %v", r, checked)
	}

	// A value of the wrong type.
	wrong := strings.Replace(valid, `schedule: "0 * * * *"`, "schedule: 5", 1)
	if r, _ := c.CheckObject(obj(t, wrong)); r == nil || !strings.Contains(r.Message, ".spec.schedule: expected string, got") {
		t.Errorf("a number for a string: %v", r)
	}

	// Without CRDs the built-in kinds are checked all the same.
	empty, err := schemacheck.New()
	if err != nil {
		t.Fatal(err)
	}
	if r, checked := empty.CheckObject(obj(t, CronJobTypo)); !checked || r == nil {
		t.Errorf("no CRDs: refusal %v, checked %v", r, checked)
	}
}

func TestCustomChild(t *testing.T) {
	c := load(t)
	gizmo := func(spec string) map[string]any {
		return obj(t, "apiVersion: test.wasmreconcile.io/v1\nkind: Gizmo\nmetadata: {name: g, namespace: ns}\nspec: "+spec)
	}
	cases := []struct {
		name, spec string
		want       string // "" for valid
	}{
		{"valid, with defaulting", "{size: 3}", ""},
		{"typo", "{size: 3, szie: 4}", "failed to create typed patch object (ns/g; test.wasmreconcile.io/v1, Kind=Gizmo): .spec.szie: field not declared in schema"},
		{"wrong type", "{size: three}", ".spec.size: expected numeric (int or float), got string"},
		{"enum", "{size: 3, mode: medium}", `Gizmo.test.wasmreconcile.io "g" is invalid: [spec.mode: Unsupported value: "medium": supported values: "fast", "slow", `},
		{"maximum", "{size: 11}", "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"},
		{"required", "{mode: fast}", `spec.size: Required value`},
		{"pattern", "{size: 1, name: ABC}", `spec.name in body should match '^[a-z]+$'`},
		{"CEL rule", "{size: 1, name: forbidden}", `Gizmo.test.wasmreconcile.io "g" is invalid: spec: Invalid value: name must not be forbidden`},
		{"preserve-unknown-fields", "{size: 1, extra: {anything: [1, {goes: here}]}}", ""},
		{"embedded resource", "{size: 1, template: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {whatever: 1}}}", ""},
		{"embedded resource metadata", "{size: 1, template: {apiVersion: v1, kind: Pod, metadata: {name: a/b}}}", `spec.template.metadata.name: Invalid value: "a/b": may not contain '/'`},
	}
	for _, tc := range cases {
		r, checked := c.CheckObject(gizmo(tc.spec))
		switch {
		case !checked:
			t.Errorf("%s: not checked", tc.name)
		case tc.want == "" && r != nil:
			t.Errorf("%s: refused: %s", tc.name, r.Message)
		case tc.want != "" && r == nil:
			t.Errorf("%s: passed, want %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(r.Message, tc.want):
			t.Errorf("%s: %q\nwant it to contain %q", tc.name, r.Message, tc.want)
		}
	}

	// A version the CRD does not serve, and one it does not define.
	for _, v := range []string{"v0", "v9"} {
		o := gizmo("{size: 1}")
		o["apiVersion"] = "test.wasmreconcile.io/" + v
		if r, _ := c.CheckObject(o); r == nil || !strings.Contains(r.Message, "does not serve version "+v+" (it serves v1)") {
			t.Errorf("version %s: %v", v, r)
		}
	}
}

func TestStatus(t *testing.T) {
	c := load(t)
	owner := obj(t, "apiVersion: test.wasmreconcile.io/v1\nkind: Gizmo\nmetadata: {name: g, namespace: ns}\nspec: {size: 1}\nstatus: {phase: Pending}")
	cases := []struct {
		name, status string
		want         string
	}{
		{"valid", "{phase: Ready, count: 2}", ""},
		{"typo", "{phsae: Ready}", "failed to create typed patch object (ns/g; test.wasmreconcile.io/v1, Kind=Gizmo): .status.phsae: field not declared in schema"},
		{"wrong type", "{count: many}", ".status.count: expected numeric (int or float), got string"},
		{"enum", "{phase: Done}", `Gizmo.test.wasmreconcile.io "g" is invalid: [status.phase: Unsupported value: "Done": supported values: "Pending", "Ready", `},
	}
	for _, tc := range cases {
		r, checked := c.CheckStatus(owner, obj(t, tc.status))
		switch {
		case !checked:
			t.Errorf("%s: not checked", tc.name)
		case tc.want == "" && r != nil:
			t.Errorf("%s: refused: %s", tc.name, r.Message)
		case tc.want != "" && r == nil:
			t.Errorf("%s: passed, want %q", tc.name, tc.want)
		case tc.want != "" && !strings.Contains(r.Message, tc.want):
			t.Errorf("%s: %q\nwant it to contain %q", tc.name, r.Message, tc.want)
		case tc.want != "" && r.What != "the status of Gizmo ns/g":
			t.Errorf("%s: what %q", tc.name, r.What)
		}
	}

	// Ratcheting: an invalid value the object already has passes, as
	// with the API server; the spec is not the status write's business.
	bad := obj(t, "apiVersion: test.wasmreconcile.io/v1\nkind: Gizmo\nmetadata: {name: g, namespace: ns}\nspec: {size: 99}\nstatus: {phase: Done}")
	if r, _ := c.CheckStatus(bad, obj(t, "{phase: Done, count: 1}")); r != nil {
		t.Errorf("unchanged invalid phase: %s", r.Message)
	}

	// A CRD without the status subresource: the status cannot be written.
	thing := obj(t, "apiVersion: test.wasmreconcile.io/v1\nkind: ClusterThing\nmetadata: {name: t}")
	if r, _ := c.CheckStatus(thing, obj(t, "{on: true}")); r == nil || !strings.Contains(r.Message, "no status subresource") {
		t.Errorf("no status subresource: %v", r)
	}
}

func TestUnknownKind(t *testing.T) {
	c := load(t)
	widget := obj(t, "apiVersion: examples.wasmreconcile.io/v1alpha1\nkind: Widget\nmetadata: {name: w, namespace: ns}\nspec: {anything: 1}")
	if r, checked := c.CheckObject(widget); checked || r != nil {
		t.Errorf("child of an unknown kind: refusal %v, checked %v; want neither", r, checked)
	}
	if r, checked := c.CheckStatus(widget, map[string]any{"x": 1}); checked || r != nil {
		t.Errorf("status of an unknown kind: refusal %v, checked %v; want neither", r, checked)
	}
}

// TestCheck checks a whole response: the error's kind, message and
// refusals, and the kinds not checked.
func TestCheck(t *testing.T) {
	c := load(t)
	owner := obj(t, "apiVersion: examples.wasmreconcile.io/v1alpha1\nkind: Widget\nmetadata: {name: w, namespace: default}")
	cron := &unstructured.Unstructured{Object: obj(t, CronJobTypo)}
	resp := &protocol.Response{
		Response: abi.Response{Children: []map[string]any{cron.Object}, Status: map[string]any{"ok": true}},
		Desired:  []*unstructured.Unstructured{cron},
	}
	unchecked, err := c.Check("m", "reconcile default/w", owner, resp)
	if len(unchecked) != 1 || unchecked[0] != (schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}) {
		t.Errorf("unchecked %v", unchecked)
	}
	var se *schemacheck.Error
	if !errors.As(err, &se) || len(se.Refusals) != 1 {
		t.Fatalf("err %v", err)
	}
	if protocol.KindOf(err) != protocol.InvalidResponse || !protocol.Terminal(err) {
		t.Errorf("kind %s, terminal %v", protocol.KindOf(err), protocol.Terminal(err))
	}
	const want = "module[m] reconcile default/w: invalid response: the API server would refuse child CronJob default/backup: failed to create typed patch object (default/backup; batch/v1, Kind=CronJob): .spec.jobTemplate.spec.template.spec.serviceAccount_Name: field not declared in schema; fix the module"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q\nwant prefix %q", err.Error(), want)
	}

	// A failed reconcile's children are not written, so not checked.
	resp.Error = &abi.Error{Message: "boom"}
	if _, err := c.Check("m", "reconcile default/w", owner, resp); err != nil {
		t.Errorf("children of a response with an error: %v", err)
	}
	// Nor is a status equal to the observed one.
	var nilChecker *schemacheck.Checker
	if u, err := nilChecker.Check("m", "c", owner, resp); u != nil || err != nil {
		t.Errorf("nil checker: %v %v", u, err)
	}
}

func TestScopes(t *testing.T) {
	c := load(t)
	if ns, ok := c.Namespaced(schema.GroupKind{Group: "test.wasmreconcile.io", Kind: "Gizmo"}); !ok || !ns {
		t.Errorf("Gizmo: namespaced %v, known %v", ns, ok)
	}
	if ns, ok := c.Namespaced(schema.GroupKind{Group: "test.wasmreconcile.io", Kind: "ClusterThing"}); !ok || ns {
		t.Errorf("ClusterThing: namespaced %v, known %v", ns, ok)
	}
	var _ protocol.Scopes = c
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"bad YAML", "a: [b\n", "bad.yaml: not valid YAML"},
		{"not a CRD", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "bad.yaml is a ConfigMap (v1), not a CustomResourceDefinition"},
		{"second document", "apiVersion: v1\nkind: Namespace\n---\napiVersion: v1\nkind: ConfigMap\n", "bad.yaml: document 1 is a Namespace (v1), not a CustomResourceDefinition"},
		{"v1beta1", "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\n", `apiVersion "apiextensions.k8s.io/v1beta1"; want apiextensions.k8s.io/v1`},
		{"unknown field", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {grup: x}\n", `unknown field "grup"`},
		{"no schema", crd("") + "      served: true\n      storage: true\n", "version v1 has no schema.openAPIV3Schema"},
		{"not structural", crd("") + "      served: true\n      storage: true\n      schema:\n        openAPIV3Schema:\n          type: object\n          properties:\n            spec: {properties: {a: {type: string}}}\n", "openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"},
	}
	for _, tc := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := schemacheck.LoadDir(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.yaml") {
			t.Errorf("%s: %v\nwant it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := schemacheck.LoadDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no CustomResourceDefinition files") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := schemacheck.LoadDir(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing dir: no error")
	}
}

func crd(extra string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.test.io}
spec:
  group: test.io
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions:
    - name: v1
` + extra
}

// TestExamples loads the repository's example CRDs: what `operator test
// --crds examples/crds` reads.
func TestExamples(t *testing.T) {
	c, err := schemacheck.LoadDir(filepath.Join("..", "..", "examples", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Kinds()) == 0 {
		t.Error("no kinds")
	}
	// operator rbac --crds takes resource names from here.
	for _, gk := range c.Kinds() {
		if p, ok := c.Plural(gk); !ok || p != strings.ToLower(gk.Kind)+"s" {
			t.Errorf("Plural(%s) = %q, %v; want %q (examples/crds)", gk, p, ok, strings.ToLower(gk.Kind)+"s")
		}
	}
	if p, ok := c.Plural(schema.GroupKind{Group: "apps", Kind: "Deployment"}); ok {
		t.Errorf("Plural(Deployment) = %q, true; want false: not a CRD of the directory", p)
	}
}
