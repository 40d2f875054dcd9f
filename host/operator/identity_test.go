package operator_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// serviceAccount creates ServiceAccount ns/name.
func serviceAccount(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// grantRole binds a new Role of rules, named role, to ServiceAccount
// ns/account.
func grantRole(t *testing.T, c client.Client, ns, account, role string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: account}}}); err != nil {
		t.Fatal(err)
	}
}

func rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

var readVerbs = []string{"get", "list", "watch"}

// waitObjectEvent waits for an Event on the object named name in ns with
// reason whose note contains every string of want, and returns it.
func waitObjectEvent(t *testing.T, c client.Client, ns, name, reason string, want ...string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("a %s Event on %s containing %q", reason, name, want), func() error {
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
	events:
		for _, e := range list.Items {
			if e.Regarding.Name != name || e.Reason != reason {
				continue
			}
			seen = append(seen, e.Note)
			for _, w := range want {
				if !strings.Contains(e.Note, w) {
					continue events
				}
			}
			found = e
			return nil
		}
		return fmt.Errorf("%s Events on %s: %q", reason, name, seen)
	})
	return found
}

// TestModuleIdentityWrites runs the widget module as a ServiceAccount
// (Options.DefaultServiceAccount, as --default-service-account does for
// files) and grants the account its rights one at a time. With none, the
// module may not even read its Widget: a Forbidden Warning on it, and
// nothing written. Allowed to read Widgets but not to write their status,
// its status write is refused by the API server as the account: an
// ApplyFailed Warning naming the account, and still no status. Allowed
// that too, the Widget converges.
func TestModuleIdentityWrites(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := newEnv(t)
	ctx := context.Background()
	serviceAccount(t, e.c, e.ns, "widget")
	start(t, e.cfg, e.operatorOptions(), operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")},
		Policy:  policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		// Short TTLs, so that each grant is used soon.
		Identity: operator.IdentityOptions{DefaultServiceAccount: e.ns + "/widget", AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
	})
	if err := e.c.Create(ctx, widget(e.ns, "w", 3)); err != nil {
		t.Fatal(err)
	}
	account := "ServiceAccount " + e.ns + "/widget"
	waitObjectEvent(t, e.c, e.ns, "w", "Forbidden", "module[widget] does not reconcile this object", account+" may not get widgets.examples.wasmreconcile.io")

	grantRole(t, e.c, e.ns, "widget", "widget-read", rule("examples.wasmreconcile.io", []string{"widgets"}, readVerbs...))
	waitObjectEvent(t, e.c, e.ns, "w", "ApplyFailed", "forbidden", `"system:serviceaccount:`+e.ns+`:widget"`, "widgets/status")
	w := widget(e.ns, "w", 0)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if st, ok := w.Object["status"]; ok {
		t.Fatalf("the Widget has a status %v although its module may not write it", st)
	}

	grantRole(t, e.c, e.ns, "widget", "widget-status", rule("examples.wasmreconcile.io", []string{"widgets/status"}, "patch", "update"))
	waitSummary(t, e.c, e.ns, "w", "3 x grey")
	updateWidgetSize(t, e.c, e.ns, "w", 4)
	waitSummary(t, e.c, e.ns, "w", "4 x grey")
}

// TestModuleIdentityReadsAndEvents runs the misbehave module as a
// ServiceAccount that may read and write its Gadgets, but neither read
// ConfigMaps nor post Events. A guest's cache_read of a ConfigMap (a kind
// it declares in reads) answers CacheForbidden with the account's missing
// right, which the guest sees and reports; the guest's Events are refused
// as the account, which an EventForbidden Warning from the operator says. Once
// granted, the read returns the ConfigMap and the Events are posted as
// the account's.
func TestModuleIdentityReadsAndEvents(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := newEnv(t)
	ctx := context.Background()
	serviceAccount(t, e.c, e.ns, "misbehave")
	grantRole(t, e.c, e.ns, "misbehave", "gadgets",
		rule("test.wasmreconcile.io", []string{"gadgets"}, readVerbs...),
		rule("test.wasmreconcile.io", []string{"gadgets/status"}, "patch", "update"))
	start(t, e.cfg, e.operatorOptions(), operator.Options{
		Modules:  []string{testwasm.BuildFile(t, "./internal/testguests/misbehave")},
		Policy:   policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		Identity: operator.IdentityOptions{DefaultServiceAccount: e.ns + "/misbehave", AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
	})
	if err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "cfg"}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	reader := gadget(e.ns, "reader", "read")
	_ = unstructured.SetNestedField(reader.Object, "cfg", "spec", "configMap")
	if err := e.c.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, gadget(e.ns, "talker", "events")); err != nil {
		t.Fatal(err)
	}
	account := "ServiceAccount " + e.ns + "/misbehave"

	// The guest sees the missing right in its read's error, and returns it.
	waitObjectEvent(t, e.c, e.ns, "reader", "ReconcileFailed", "get: cache read:", account+` may not get configmaps in namespace "`+e.ns+`"`)
	// The guest's Events are refused as the account. (The operator's
	// EventForbidden Warnings on one object are one series: its note is
	// the first refusal's, Hello's or Careful's.)
	waitObjectEvent(t, e.c, e.ns, "talker", "EventForbidden", "the guest's Event", "was refused", account+" may not post it")
	var list eventsv1.EventList
	if err := e.c.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.Reason == "Hello" || ev.Reason == "Careful" {
			t.Fatalf("the guest's Event %s was posted although its account may not post Events", ev.Reason)
		}
	}

	grantRole(t, e.c, e.ns, "misbehave", "configmaps-and-events",
		rule("", []string{"configmaps"}, readVerbs...),
		rule("events.k8s.io", []string{"events"}, "create", "patch"))
	testenv.Eventually(t, 2*time.Minute, "the guest reads the ConfigMap", func() error {
		g := gadget(e.ns, "reader", "")
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if found, _, _ := unstructured.NestedBool(g.Object, "status", "found"); !found {
			return fmt.Errorf("status %v", g.Object["status"])
		}
		return nil
	})
	// A new generation calls the guest again: its Events are posted now,
	// by the module's controller, as the account.
	talker := gadget(e.ns, "talker", "")
	testenv.Update(t, e.c, talker, func() { _ = unstructured.SetNestedField(talker.Object, "again", "spec", "round") })
	ev := waitObjectEvent(t, e.c, e.ns, "talker", "Hello", "normal event from the guest")
	if ev.ReportingController != "wasmreconcile/misbehave" {
		t.Errorf("the guest's Event was reported by %q; want wasmreconcile/misbehave", ev.ReportingController)
	}
}

// TestModuleIdentityOfReconcileModules runs two modules in one operator:
// the widget module from a ReconcileModule naming spec.serviceAccountName
// (its namespace defaulting to Options.ServiceAccountNamespace), which
// writes only once its account may, and the misbehave module from a file
// with no account, which writes as the operator from the start, as
// before identities existed.
func TestModuleIdentityOfReconcileModules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	serviceAccount(t, e.c, e.ns, "widget-module")
	grantRole(t, e.c, e.ns, "widget-module", "widget-read", rule("examples.wasmreconcile.io", []string{"widgets"}, readVerbs...))
	op := start(t, e.cfg, e.operatorOptions(), operator.Options{
		ReconcileModules: true,
		Modules:          []string{testwasm.BuildFile(t, "./internal/testguests/misbehave")},
		Policy:           policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		Identity:         operator.IdentityOptions{ServiceAccountNamespace: e.ns, AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second},
	})
	wasm := testwasm.BuildFile(t, "./widget")
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{
		Source:             v1alpha1.Source{File: wasm, SHA256: supervisor.Digest(testwasm.Build(t, "./widget"))[7:]},
		ServiceAccountName: "widget-module",
	}}
	if err := e.c.Create(ctx, rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), rm) })
	moduleCondition(t, e.c, "widget", "Ready", metav1.ConditionTrue, "Loaded")

	// The file module without an account: the operator's identity.
	if err := e.c.Create(ctx, gadget(e.ns, "plain", "")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the Gadget's status written as the operator", func() error {
		g := gadget(e.ns, "plain", "")
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if s, _, _ := unstructured.NestedString(g.Object, "status", "summary"); s != "ok" {
			return fmt.Errorf("status %v", g.Object["status"])
		}
		return nil
	})

	// The ReconcileModule's account, in the default namespace.
	if err := e.c.Create(ctx, widget(e.ns, "w", 2)); err != nil {
		t.Fatal(err)
	}
	waitObjectEvent(t, e.c, e.ns, "w", "ApplyFailed", "forbidden", `"system:serviceaccount:`+e.ns+`:widget-module"`)
	testenv.Eventually(t, 2*time.Minute, "the refused write in the module's status", func() error {
		got := &v1alpha1.ReconcileModule{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "widget"}, got); err != nil {
			return err
		}
		if !strings.Contains(got.Status.LastError, "widget-module") {
			return fmt.Errorf("lastError %q", got.Status.LastError)
		}
		return nil
	})
	grantRole(t, e.c, e.ns, "widget-module", "widget-status", rule("examples.wasmreconcile.io", []string{"widgets/status"}, "patch"))
	waitSummary(t, e.c, e.ns, "w", "2 x grey")
	if _, ok := op.ModuleStatus("widget"); !ok {
		t.Error("no status for module widget")
	}

	// A namespace without a name is refused at load, loudly.
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.ServiceAccountName, spec.ServiceAccountNamespace = "", e.ns
	})
	cond := moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionTrue, "")
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
	e := newEnv(t)
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
	if err := e.c.List(ctx, &roles, client.MatchingLabels{"wasmreconcile.io/aggregate-to-operator": "true"}); err != nil {
		t.Fatal(err)
	}
	if len(roles.Items) < 2 {
		t.Fatalf("%d ClusterRoles to aggregate; want the operator's core and the examples'", len(roles.Items))
	}
	for _, r := range roles.Items {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-aggregated-" + r.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "wasmreconcile-system", Name: "wasmreconcile-operator"}}}
		if err := e.c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), b) })
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
			if err := e.c.Create(ctx, sar); err != nil {
				return err
			}
			if sar.Status.Allowed != c.allowed {
				return fmt.Errorf("allowed=%v (%s)", sar.Status.Allowed, sar.Status.Reason)
			}
			return nil
		})
	}
}
