//go:build !runonly

package main

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// rbacDocs parses the YAML documents of operator rbac's output by kind
// and name.
func rbacDocs(t *testing.T, out []byte) (roles map[string]rbacv1.ClusterRole, bindings []rbacv1.ClusterRoleBinding, roleBindings []rbacv1.RoleBinding) {
	t.Helper()
	roles = map[string]rbacv1.ClusterRole{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a document of operator rbac's output is not YAML: %v\n%s", err, doc)
		}
		var err error
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = yaml.UnmarshalStrict([]byte(doc), &r)
			roles[r.Name] = r
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = yaml.UnmarshalStrict([]byte(doc), &b)
			bindings = append(bindings, b)
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = yaml.UnmarshalStrict([]byte(doc), &b)
			roleBindings = append(roleBindings, b)
		default:
			t.Fatalf("unexpected document of kind %q:\n%s", meta.Kind, doc)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", meta.Kind, err, doc)
		}
	}
	return roles, bindings, roleBindings
}

func rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

// TestRBACWebapp checks the RBAC of the webapp module, loaded from its
// wasm: exactly the rules its manifest (for WebApp, owns ConfigMap and
// Service, a finalizer) needs, and the binding to its account.
func TestRBACWebapp(t *testing.T) {
	t.Parallel() // offline: files of its own, no global state
	wasm := testwasm.BuildFile(t, "./webapp")
	crds := filepath.Join(testwasm.RepoRoot(), "examples", "crds")
	var out, errOut bytes.Buffer
	if err := runRBAC([]string{wasm, "--crds", crds, "--service-account", "wasmreconcile-modules/webapp"}, &out, &errOut); err != nil {
		t.Fatalf("operator rbac: %v\n%s", err, errOut.String())
	}
	roles, bindings, roleBindings := rbacDocs(t, out.Bytes())

	wantModule := []rbacv1.PolicyRule{
		rule("", []string{"configmaps", "services"}, "get", "list", "watch", "create", "update", "patch", "delete"),
		rule("events.k8s.io", []string{"events"}, "create", "patch"),
		rule("examples.wasmreconcile.io", []string{"webapps"}, "get", "list", "watch", "update", "patch"),
		rule("examples.wasmreconcile.io", []string{"webapps/finalizers"}, "update"),
		rule("examples.wasmreconcile.io", []string{"webapps/status"}, "get", "update", "patch"),
	}
	if got := roles["wasmreconcile-module-webapp"].Rules; !reflect.DeepEqual(got, wantModule) {
		t.Errorf("the module's rules:\n got %v\nwant %v", got, wantModule)
	}
	wantWatch := []rbacv1.PolicyRule{
		rule("", []string{"configmaps", "services"}, "get", "list", "watch"),
		rule("examples.wasmreconcile.io", []string{"webapps"}, "get", "list", "watch"),
	}
	watch := roles["wasmreconcile-watch-webapp"]
	if !reflect.DeepEqual(watch.Rules, wantWatch) {
		t.Errorf("the operator's watch rules:\n got %v\nwant %v", watch.Rules, wantWatch)
	}
	if watch.Labels["wasmreconcile.io/aggregate-to-operator"] != "true" {
		t.Errorf("the watch role is not aggregated into the operator's: labels %v", watch.Labels)
	}
	if len(roles) != 2 {
		t.Errorf("roles: %d, want 2", len(roles))
	}
	wantBinding := rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "wasmreconcile-module-webapp"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "webapp", Namespace: "wasmreconcile-modules"}},
	}
	if len(bindings) != 1 || len(roleBindings) != 0 || !reflect.DeepEqual(bindings[0].RoleRef, wantBinding.RoleRef) || !reflect.DeepEqual(bindings[0].Subjects, wantBinding.Subjects) || bindings[0].Name != "wasmreconcile-module-webapp" {
		t.Errorf("bindings = %+v, %+v; want one ClusterRoleBinding %+v", bindings, roleBindings, wantBinding)
	}
	for _, want := range []string{
		"# webapps/finalizers: its children's owner references set blockOwnerDeletion",
		"# webapps: reconciled (for); patch, update: the module's finalizer",
		"config/rbac/module_accounts.yaml grants it on every account of",
		"#   finalizer: yes",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "guessed") {
		t.Errorf("with --crds, the output says a name was guessed:\n%s", out.String())
	}

	// The same module, no --crds: the same rules, with webapps guessed and said so.
	var again bytes.Buffer
	if err := runRBAC([]string{wasm, "--service-account=wasmreconcile-modules/webapp"}, &again, &errOut); err != nil {
		t.Fatal(err)
	}
	roles2, _, _ := rbacDocs(t, again.Bytes())
	if !reflect.DeepEqual(roles2["wasmreconcile-module-webapp"].Rules, wantModule) {
		t.Errorf("without --crds, the module's rules differ: %v", roles2["wasmreconcile-module-webapp"].Rules)
	}
	if !strings.Contains(again.String(), "#   webapps.examples.wasmreconcile.io (WebApp)\n# A CRD whose spec.names.plural is irregular") {
		t.Errorf("without --crds, the output does not say webapps was guessed:\n%s", again.String())
	}

	// Confined to namespaces: RoleBindings, sorted, no ClusterRoleBinding.
	var confined bytes.Buffer
	if err := runRBAC([]string{"--service-account", "team-a/webapp", "--namespace", "shop-b", "--namespace", "shop-a", "--namespace", "shop-b", wasm}, &confined, &errOut); err != nil {
		t.Fatal(err)
	}
	_, bindings, roleBindings = rbacDocs(t, confined.Bytes())
	if len(bindings) != 0 || len(roleBindings) != 2 || roleBindings[0].Namespace != "shop-a" || roleBindings[1].Namespace != "shop-b" {
		t.Errorf("with --namespace shop-b, shop-a: bindings %+v, role bindings %+v; want RoleBindings in shop-a and shop-b", bindings, roleBindings)
	}
	for _, rb := range roleBindings {
		if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != "wasmreconcile-module-webapp" || rb.Subjects[0].Namespace != "team-a" {
			t.Errorf("RoleBinding %+v", rb)
		}
	}
	if !strings.Contains(confined.String(), "bind a Role in team-a with verbs [impersonate] on") {
		t.Errorf("for an account outside wasmreconcile-modules, the output does not say the operator needs impersonate on it:\n%s", confined.String())
	}
}

// TestRBACRules checks the rules moduleRBAC derives from manifests, without
// a module: what a finalizer, children and reads add, merging, ordering.
func TestRBACRules(t *testing.T) {
	widget := abi.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	gateway := abi.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"}
	cm := abi.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secret := abi.GroupVersionKind{Version: "v1", Kind: "Secret"}
	deploy := abi.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	ns := abi.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	events := rule("events.k8s.io", []string{"events"}, "create", "patch")
	for _, c := range []struct {
		name string
		m    abi.Manifest
		opts rbacOptions
		want []rbacv1.PolicyRule
	}{
		{"status only: no write on the object itself", abi.Manifest{Name: "w", For: widget}, rbacOptions{}, []rbacv1.PolicyRule{
			events,
			rule("examples.wasmreconcile.io", []string{"widgets"}, "get", "list", "watch"),
			rule("examples.wasmreconcile.io", []string{"widgets/status"}, "get", "update", "patch"),
		}},
		{"a finalizer is a patch of the object", abi.Manifest{Name: "w", For: widget, Finalizer: true}, rbacOptions{}, []rbacv1.PolicyRule{
			events,
			rule("examples.wasmreconcile.io", []string{"widgets"}, "get", "list", "watch", "update", "patch"),
			rule("examples.wasmreconcile.io", []string{"widgets/status"}, "get", "update", "patch"),
		}},
		{"children, and reads merged per group and verbs, in any order", abi.Manifest{Name: "w", For: widget, Owns: []abi.GroupVersionKind{deploy, cm}, Reads: []abi.GroupVersionKind{ns, secret, cm}}, rbacOptions{}, []rbacv1.PolicyRule{
			rule("", []string{"configmaps"}, "get", "list", "watch", "create", "update", "patch", "delete"),
			rule("", []string{"namespaces", "secrets"}, "get", "list", "watch"),
			rule("apps", []string{"deployments"}, "get", "list", "watch", "create", "update", "patch", "delete"),
			events,
			rule("examples.wasmreconcile.io", []string{"widgets"}, "get", "list", "watch"),
			rule("examples.wasmreconcile.io", []string{"widgets/finalizers"}, "update"),
			rule("examples.wasmreconcile.io", []string{"widgets/status"}, "get", "update", "patch"),
		}},
		{"a CRD's plural wins over the guess", abi.Manifest{Name: "g", For: gateway}, rbacOptions{Plurals: map[schema.GroupKind]string{{Group: gateway.Group, Kind: "Gateway"}: "gateways"}}, []rbacv1.PolicyRule{
			events,
			rule("gateway.networking.k8s.io", []string{"gateways"}, "get", "list", "watch"),
			rule("gateway.networking.k8s.io", []string{"gateways/status"}, "get", "update", "patch"),
		}},
	} {
		out, err := moduleRBAC(c.m, c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		roles, _, _ := rbacDocs(t, out)
		if got := roles["wasmreconcile-module-"+c.m.Name].Rules; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
		again, _ := moduleRBAC(c.m, c.opts)
		if !bytes.Equal(out, again) {
			t.Errorf("%s: two runs differ", c.name)
		}
		if !strings.Contains(string(out), "# 3. Bind wasmreconcile-module-"+c.m.Name+" to the account the module runs as") {
			t.Errorf("%s: without --service-account, the output does not say what to bind:\n%s", c.name, out)
		}
	}

	// The guess, said: the API server's default rule is wrong for Gateway.
	out, err := moduleRBAC(abi.Manifest{Name: "g", For: gateway}, rbacOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "#   gatewaies.gateway.networking.k8s.io (Gateway)") {
		t.Errorf("the guessed name is not listed:\n%s", out)
	}

	// A RoleBinding grants no cluster-scoped kind: said.
	out, err = moduleRBAC(abi.Manifest{Name: "w", For: widget, Reads: []abi.GroupVersionKind{ns}}, rbacOptions{ServiceAccount: "a/w", Namespaces: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "Cluster-scoped, so granted by no RoleBinding: namespaces;") {
		t.Errorf("the output does not say a RoleBinding cannot grant namespaces:\n%s", out)
	}
}

func TestRBACErrors(t *testing.T) {
	wasm := filepath.Join(t.TempDir(), "none.wasm")
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{nil, "want one module, MODULE.wasm"},
		{[]string{"a.wasm", "b.wasm"}, "want one module, MODULE.wasm"},
		{[]string{wasm}, "no such file"},
		{[]string{"--crds", "/no/such/dir", wasm}, "--crds: open /no/such/dir"},
		{[]string{"--no-such-flag", wasm}, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		err := runRBAC(c.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("rbac %q: error = %v, want one containing %q", c.args, err, c.wantErr)
		}
	}
	m := abi.Manifest{Name: "w", For: abi.GroupVersionKind{Group: "x.io", Version: "v1", Kind: "W"}}
	for _, c := range []struct {
		opts    rbacOptions
		wantErr string
	}{
		{rbacOptions{ServiceAccount: "nonamespace"}, "--service-account"},
		{rbacOptions{Namespaces: []string{"a"}}, "--namespace says where to bind the module's ClusterRole to its account: pass --service-account NAMESPACE/NAME too"},
		{rbacOptions{ServiceAccount: "a/w", Namespaces: []string{"Not_A_Namespace"}}, `--namespace "Not_A_Namespace" is not a namespace name`},
	} {
		if _, err := moduleRBAC(m, c.opts); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("moduleRBAC %+v: error = %v, want one containing %q", c.opts, err, c.wantErr)
		}
	}
}
