package clusterscoped_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestModuleIdentityOfReconcileModules runs two modules in one operator:
// the widget module from a ReconcileModule naming spec.serviceAccountName
// (its namespace defaulting to Options.ServiceAccountNamespace), which
// writes only once its account may, and the misbehave module from a file
// with no account, which writes as the operator from the start, as
// before identities existed.
func TestModuleIdentityOfReconcileModules(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.ServiceAccount(t, e.C, e.NS, "widget-module")
	optest.GrantRole(t, e.C, e.NS, "widget-module", "widget-read", optest.Rule("examples.wasmreconcile.io", []string{"widgets"}, optest.ReadVerbs...))
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		Modules:          []string{testwasm.BuildFile(t, "./internal/testguests/misbehave")},
		Policy:           policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		Identity:         operator.IdentityOptions{ServiceAccountNamespace: e.NS, AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second},
	})
	wasm := testwasm.BuildFile(t, "./widget")
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{
		Source:             v1alpha1.Source{File: wasm, SHA256: supervisor.Digest(testwasm.Build(t, "./widget"))[7:]},
		ServiceAccountName: "widget-module",
	}}
	if err := e.C.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.C.Delete(context.Background(), rm) })
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")

	// The file module without an account: the operator's identity.
	if err := e.C.Create(ctx, optest.Gadget(e.NS, "plain", "")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the Gadget's status written as the operator", func() error {
		g := optest.Gadget(e.NS, "plain", "")
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if s, _, _ := unstructured.NestedString(g.Object, "status", "summary"); s != "ok" {
			return fmt.Errorf("status %v", g.Object["status"])
		}
		return nil
	})

	// The ReconcileModule's account, in the default namespace.
	if err := e.C.Create(ctx, optest.Widget(e.NS, "w", 2)); err != nil {
		t.Fatal(err)
	}
	optest.WaitObjectEvent(t, e.C, e.NS, "w", "ApplyFailed", "forbidden", `"system:serviceaccount:`+e.NS+`:widget-module"`)
	testenv.Eventually(t, 2*time.Minute, "the refused write in the module's status", func() error {
		got := &v1alpha1.ReconcileModule{}
		if err := e.C.Get(ctx, client.ObjectKey{Name: "widget"}, got); err != nil {
			return err
		}
		if !strings.Contains(got.Status.LastError, "widget-module") {
			return fmt.Errorf("lastError %q", got.Status.LastError)
		}
		return nil
	})
	optest.GrantRole(t, e.C, e.NS, "widget-module", "widget-status", optest.Rule("examples.wasmreconcile.io", []string{"widgets/status"}, "patch"))
	optest.WaitSummary(t, e.C, e.NS, "w", "2 x grey")
	if _, ok := optest.ModuleStatus(op, "widget"); !ok {
		t.Error("no status for module widget")
	}

	// A namespace without a name is refused at load, loudly.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.ServiceAccountName, spec.ServiceAccountNamespace = "", e.NS
	})
	cond := optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionTrue, "")
	for _, c := range cond.Status.Conditions {
		if c.Type == "LoadFailed" && !strings.Contains(c.Message, "spec.serviceAccountName is empty") {
			t.Errorf("LoadFailed: %q", c.Message)
		}
	}
}

// TestDeployedRBAC applies config/default and the example modules' RBAC to
// the API server and asks it, with SubjectAccessReviews, what the operator
// and the modules' accounts may do: the operator reads module kinds,
// creates SubjectAccessReviews and Events and impersonates the accounts of
// wasmreconcile-modules, but writes no module object, reads Secrets only
// in its namespace and cannot impersonate its own account; each module's
// account may make its own writes and no other module's. envtest runs no
// kube-controller-manager, so ClusterRole aggregation is emulated: the
// ClusterRoles labelled for it are bound to the operator directly.
func TestDeployedRBAC(t *testing.T) {
	cp := testenv.Shared(t)
	e := optest.NewEnv(t)
	ctx := context.Background()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(cp.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(cp.Assets(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = testwasm.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kubectl("apply", "--server-side", "-k", "config/default")
	kubectl("apply", "--server-side", "-f", "config/samples/example_modules_rbac.yaml")
	t.Cleanup(func() { kubectl("delete", "--ignore-not-found", "-f", "config/samples/example_modules_rbac.yaml") })

	var roles rbacv1.ClusterRoleList
	if err := e.C.List(ctx, &roles, client.MatchingLabels{"wasmreconcile.io/aggregate-to-operator": "true"}); err != nil {
		t.Fatal(err)
	}
	if len(roles.Items) < 2 {
		t.Fatalf("%d ClusterRoles to aggregate; want the operator's core and the examples'", len(roles.Items))
	}
	for _, r := range roles.Items {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-aggregated-" + r.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "wasmreconcile-system", Name: "wasmreconcile-operator"}}}
		if err := e.C.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.C.Delete(context.Background(), b) })
	}

	type check struct {
		account                              string // namespace/name
		verb, group, resource, namespace, nm string
		allowed                              bool
	}
	const op = "wasmreconcile-system/wasmreconcile-operator"
	checks := []check{
		{op, "list", "examples.wasmreconcile.io", "widgets", "", "", true},
		{op, "watch", "", "services", "", "", true},
		{op, "create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
		{op, "create", "authentication.k8s.io", "tokenreviews", "", "", true}, // the flight recorder's readers
		{op, "create", "events.k8s.io", "events", "team-a", "", true},
		{op, "patch", "wasmreconcile.io", "reconcilemodules/status", "", "", true},
		{op, "get", "", "secrets", "wasmreconcile-system", "", true},
		{op, "update", "coordination.k8s.io", "leases", "wasmreconcile-system", "", true},
		{op, "impersonate", "", "serviceaccounts", "wasmreconcile-modules", "widget", true},
		{op, "get", "", "secrets", "team-a", "", false},
		{op, "list", "", "secrets", "", "", false},
		{op, "patch", "examples.wasmreconcile.io", "widgets/status", "team-a", "", false},
		{op, "patch", "examples.wasmreconcile.io", "webapps", "team-a", "", false},
		{op, "create", "", "configmaps", "team-a", "", false},
		{op, "delete", "", "services", "team-a", "", false},
		{op, "impersonate", "", "serviceaccounts", "wasmreconcile-system", "wasmreconcile-operator", false},
		{op, "impersonate", "", "serviceaccounts", "team-a", "default", false},
		{op, "impersonate", "", "groups", "", "system:masters", false},
		{op, "impersonate", "", "users", "", "admin", false},
		{"wasmreconcile-modules/widget", "patch", "examples.wasmreconcile.io", "widgets/status", "team-a", "", true},
		{"wasmreconcile-modules/widget", "list", "examples.wasmreconcile.io", "widgets", "team-a", "", true},
		{"wasmreconcile-modules/widget", "create", "events.k8s.io", "events", "team-a", "", true},
		{"wasmreconcile-modules/widget", "patch", "examples.wasmreconcile.io", "widgets", "team-a", "", false},
		{"wasmreconcile-modules/widget", "create", "", "configmaps", "team-a", "", false},
		{"wasmreconcile-modules/widget", "get", "", "secrets", "team-a", "", false},
		{"wasmreconcile-modules/webapp", "create", "", "configmaps", "team-a", "", true},
		{"wasmreconcile-modules/webapp", "delete", "", "services", "team-a", "", true},
		{"wasmreconcile-modules/webapp", "patch", "examples.wasmreconcile.io", "webapps", "team-a", "", true},
		{"wasmreconcile-modules/webapp", "patch", "examples.wasmreconcile.io", "widgets/status", "team-a", "", false},
		{"wasmreconcile-modules/webapp", "get", "", "secrets", "team-a", "", false},
		{"wasmreconcile-modules/module-default", "get", "examples.wasmreconcile.io", "widgets", "team-a", "", false},
	}
	for _, c := range checks {
		ns, name, _ := strings.Cut(c.account, "/")
		resource, sub, _ := strings.Cut(c.resource, "/")
		testenv.Eventually(t, time.Minute, fmt.Sprintf("%s %s %s %s/%s in %q: allowed=%v", c.account, c.verb, c.group, c.resource, c.nm, c.namespace, c.allowed), func() error {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + ns + ":" + name,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: resource,
					Subresource: sub, Namespace: c.namespace, Name: c.nm},
			}}
			if err := e.C.Create(ctx, sar); err != nil {
				return err
			}
			if sar.Status.Allowed != c.allowed {
				return fmt.Errorf("allowed=%v (%s)", sar.Status.Allowed, sar.Status.Reason)
			}
			return nil
		})
	}
}
