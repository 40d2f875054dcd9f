package clusterhardening_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// accountToken creates the ServiceAccount name in ns and returns a token
// of it.
func accountToken(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// bindClusterRole creates a ClusterRole of rules and binds it to the
// ServiceAccounts ns/accounts, both removed when the test ends.
func bindClusterRole(t *testing.T, cs kubernetes.Interface, name, ns string, rules []rbacv1.PolicyRule, accounts ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	var subjects []rbacv1.Subject
	for _, a := range accounts {
		subjects = append(subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: a})
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestNoSecretValueLeaks plants a Secret's value in every place a call can
// carry it and checks that neither /debug/flightrecorder nor the
// ReconcileModule's status shows it, plain, base64 or JSON-escaped:
//
//   - the Secret the guest reads (data, and the kubectl
//     last-applied-configuration annotation that copies it);
//   - the guest's answer: its status (plain and base64), a ConfigMap
//     child's data, a Secret child's stringData;
//   - on the next call, those children observed;
//   - a guest error quoting it (the record's error, the module's
//     lastError, the Warning Event);
//   - a shadow candidate that answers otherwise (its differences, quoted
//     in status.rollout.candidate.firstDifferences).
//
// The records are served only to an account that may get Gadgets in the
// namespace: one with only the endpoint's role gets 403.
func TestNoSecretValueLeaks(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	value := "pw-" + e.NS + "-Xy9!\"quoted\""
	encoded := base64.StdEncoding.EncodeToString([]byte(value))
	escaped, _ := json.Marshal(value)
	forms := []string{value, encoded, strings.Trim(string(escaped), `"`)}

	applied, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "data": map[string]any{"password": encoded}, "stringData": map[string]any{"plain": value}})
	if err := e.C.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "db",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(applied)}},
		Data: map[string][]byte{"password": []byte(value)}}); err != nil {
		t.Fatal(err)
	}
	mo := e.OperatorOptions()
	mo.MetricsBindAddress = optest.FreeAddr(t)
	optest.Start(t, e.Cfg, mo, operator.Options{
		ReconcileModules: true,
		FlightRecorder:   operator.FlightRecorderOptions{SampleEvery: 1, SampleInterval: -1},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond},
	})
	v1 := testwasm.BuildVersion(t, "./internal/testguests/secretcopy", "v1:")
	v2 := testwasm.BuildVersion(t, "./internal/testguests/secretcopy", "v2:")
	moduleFromBytes(t, e, "secretcopy", v1, func(s *v1alpha1.ReconcileModuleSpec) {
		s.Candidate = &v1alpha1.Candidate{Source: fileSource(t, "secretcopy-v2", v2)}
	})
	optest.ModuleCondition(t, e.C, "secretcopy", "Ready", metav1.ConditionTrue, "Loaded")
	good, bad := optest.Gadget(e.NS, "good", ""), optest.Gadget(e.NS, "bad", "")
	_ = unstructured.SetNestedField(good.Object, "db", "spec", "secret")
	_ = unstructured.SetNestedField(bad.Object, "db", "spec", "secret")
	_ = unstructured.SetNestedField(bad.Object, true, "spec", "fail")
	for _, g := range []*unstructured.Unstructured{good, bad} {
		if err := e.C.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
	}

	cs, err := kubernetes.NewForConfig(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	reader, urlOnly := accountToken(t, cs, e.NS, "reader"), accountToken(t, cs, e.NS, "url-only")
	bindClusterRole(t, cs, "recorder-url-"+e.NS, e.NS, []rbacv1.PolicyRule{{NonResourceURLs: []string{operator.FlightRecorderPath}, Verbs: []string{"get"}}}, "reader", "url-only")
	optest.GrantRole(t, e.C, e.NS, "reader", "optest.Gadget-reader", optest.Rule("test.wasmreconcile.io", []string{"gadgets"}, "get"))
	get := func(token string) (int, []byte) {
		return optest.FlightRecords(ctx, mo.MetricsBindAddress, token, "secretcopy")
	}

	// Wait for a success whose answer copied the value (status and
	// children), one observing the children written, and the failure.
	var body []byte
	testenv.Eventually(t, 3*time.Minute, "the success, the children observed and the failure recorded", func() error {
		code, b := get(reader)
		if code != http.StatusOK {
			return fmt.Errorf("HTTP %d: %s", code, b)
		}
		body = b
		var got struct{ Cases []modtest.Case }
		if err := json.Unmarshal(b, &got); err != nil {
			return err
		}
		var success, observed, failure bool
		for _, c := range got.Cases {
			success = success || (c.Recorded.Kind == "Success" && c.Expect.Status["copied"] != nil)
			observed = observed || len(c.Input.Children) == 2
			failure = failure || c.Recorded.Kind == "ReconcileFailed"
		}
		if !success || !observed || !failure {
			return fmt.Errorf("success %v, children observed %v, failure %v", success, observed, failure)
		}
		return nil
	})
	if !strings.Contains(string(body), `"copied":"v1:REDACTED"`) {
		t.Errorf("the copied status is not there redacted (was it dropped?): %s", body)
	}
	if code, b := get(urlOnly); code != http.StatusForbidden || !strings.Contains(string(b), "may not read") {
		t.Errorf("an account with only the endpoint's role: HTTP %d %s, want 403", code, b)
	}
	rm := optest.WaitModule(t, e.C, "secretcopy", "a difference and the failure in status", func(rm *v1alpha1.ReconcileModule) error {
		r := rm.Status.Rollout
		if r == nil || r.Candidate == nil || len(r.Candidate.FirstDifferences) == 0 || rm.Status.LastError == "" {
			return fmt.Errorf("rollout %+v, lastError %q", r, rm.Status.LastError)
		}
		return nil
	})
	status, _ := json.Marshal(rm.Status)
	if !strings.Contains(string(status), "REDACTED") {
		t.Errorf("the status shows no redaction: the test proves nothing: %s", status)
	}
	warning := optest.WaitObjectEvent(t, e.C, e.NS, "bad", "ReconcileFailed")
	for what, text := range map[string]string{"/debug/flightrecorder": string(body), "the ReconcileModule's status": string(status), "the Warning Event": warning.Note} {
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Errorf("%s holds the Secret's value (%q): %s", what, f, text)
			}
		}
		if strings.Contains(text, "last-applied-configuration") {
			t.Errorf("%s holds the last-applied annotation: %s", what, text)
		}
	}
}

// TestCanaryWithRecorderHasNoPanic runs a canary of half the objects,
// the other half shadowed, with the flight recorder on, as shipped. In
// each half one object fails. Every failure gets its Warning Event and its
// count, the canary's good object is served by the candidate from its
// first call, the recorder keeps the canary's failure, and the host
// recovered no panic. The recorder's hold of the candidate used to call a
// nil shadow: 14 panics in 30 s, swallowed, with no Event and no count,
// and the first successful canary call dropped.
func TestCanaryWithRecorderHasNoPanic(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	op := optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{ReconcileModules: true, Registerer: reg, ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond}})
	// Two names in each half: a good object and a failing one.
	var canary, shadowed []string
	for i := 0; len(canary) < 2 || len(shadowed) < 2; i++ {
		n := fmt.Sprintf("w-%d", i)
		if shadow.InShare(e.NS, n, 50) {
			canary = append(canary, n)
		} else {
			shadowed = append(shadowed, n)
		}
	}
	half := int32(50)
	moduleFromBytes(t, e, "widget", testwasm.BuildVersion(t, "./widget", "1"), func(s *v1alpha1.ReconcileModuleSpec) {
		s.Candidate = &v1alpha1.Candidate{Source: fileSource(t, "widget-v2", testwasm.BuildVersion(t, "./widget", "2")), Canary: &v1alpha1.Canary{Percent: &half}}
	})
	optest.WaitModule(t, e.C, "widget", "the canary running", func(rm *v1alpha1.ReconcileModule) error {
		if r := rm.Status.Rollout; r == nil || r.Candidate == nil || r.Candidate.Digest == "" {
			return fmt.Errorf("rollout %+v", rm.Status.Rollout)
		}
		return nil
	})
	for _, n := range []string{canary[0], shadowed[0]} {
		if err := e.C.Create(ctx, optest.Widget(e.NS, n, 2)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{canary[1], shadowed[1]} {
		bad := optest.Widget(e.NS, n, 1)
		_ = unstructured.SetNestedField(bad.Object, int64(1_000_000), "spec", "size")
		if err := e.C.Create(ctx, bad); err != nil {
			t.Fatal(err)
		}
	}
	served := func(name, version string) {
		testenv.Eventually(t, 3*time.Minute, name+" served by widget v"+version, func() error {
			w := optest.Widget(e.NS, name, 0)
			if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
				return err
			}
			if msg := optest.ReadyMessage(w); !strings.HasSuffix(msg, "by widget v"+version) {
				return fmt.Errorf("Ready message %q", msg)
			}
			return nil
		})
	}
	served(canary[0], "2")
	served(shadowed[0], "1")
	optest.WaitObjectEvent(t, e.C, e.NS, canary[1], "ReconcileFailed")
	optest.WaitObjectEvent(t, e.C, e.NS, shadowed[1], "ReconcileFailed")
	if n := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget", "result": "ReconcileFailed"}); n < 2 {
		t.Errorf("failures counted: %v, want both", n)
	}
	h := op.FlightRecorder(nil)
	testenv.Eventually(t, 2*time.Minute, "the canary's failure recorded", func() error {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, operator.FlightRecorderPath+"?module=widget", nil))
		if !strings.Contains(w.Body.String(), `"object":"`+e.NS+"/"+canary[1]+`"`) {
			return fmt.Errorf("HTTP %d: %.300s", w.Code, w.Body.String())
		}
		return nil
	})
	if n := optest.Gather(t, reg, "wasmreconcile_host_panics_total", nil); n != 0 {
		t.Errorf("the host recovered %v panics", n)
	}
	if n := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"result": "HostPanic"}); n != 0 {
		t.Errorf("%v reconciles ended as HostPanic", n)
	}
}

// TestTriggerChurnDoesNotStarveOwners churns one ServiceAccount, which an
// `all` trigger maps to every Responder of the namespace, for as long as
// the test runs; meanwhile a ConfigMap labelled for one Responder (a
// selector trigger) is created, and reaches it: its history shows it
// while the churn goes on. The churning ServiceAccount alone is damped:
// after --storm-threshold fan-outs it reaches the Responders at most once
// per --storm-backoff, so the guest calls it causes stay bounded.
// Without the fix, every owner became quiescent and the ConfigMap waited
// up to a minute (44.8 s measured).
func TestTriggerChurnDoesNotStarveOwners(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	const threshold = 5
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{testwasm.BuildFile(t, "./internal/testguests/triggered")}, Registerer: reg,
		Policy: policy.Policy{Storm: policy.Storm{Threshold: threshold, Window: 5 * time.Minute, Backoff: 5 * time.Minute}}})
	owners := []string{"web-1", "web-2", "web-3"}
	for _, n := range owners {
		r := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "test.wasmreconcile.io/v1", "kind": "Responder",
			"metadata": map[string]any{"name": n, "namespace": e.NS}, "spec": map[string]any{"selector": map[string]any{"app": n}}}}
		if err := e.C.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	seen := func(name string) string {
		r := &unstructured.Unstructured{}
		r.SetAPIVersion("test.wasmreconcile.io/v1")
		r.SetKind("Responder")
		if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: name}, r); err != nil {
			return ""
		}
		s, _, _ := unstructured.NestedString(r.Object, "status", "seen")
		return s
	}
	if err := e.C.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "churn"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "every owner sees the ServiceAccount", func() error {
		for _, n := range owners {
			if s := seen(n); s != "ServiceAccount/churn" {
				return fmt.Errorf("%s sees %q", n, s)
			}
		}
		return nil
	})
	callsBefore := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "triggered"})

	// Churn until the test is done with it.
	var updates atomic.Int64
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sa := &corev1.ServiceAccount{}
			if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "churn"}, sa); err != nil {
				continue
			}
			sa.Labels = map[string]string{"n": fmt.Sprint(i)}
			if err := e.C.Update(ctx, sa); err == nil {
				updates.Add(1)
			}
		}
	}()
	defer func() { close(stop); <-churned }()
	testenv.Eventually(t, 3*time.Minute, "the churn past the threshold", func() error {
		if n := updates.Load(); n < 3*threshold {
			return fmt.Errorf("%d updates", n)
		}
		if n := optest.Gather(t, reg, "wasmreconcile_trigger_events_damped_total", nil); n < 1 {
			return fmt.Errorf("no event damped yet")
		}
		return nil
	})

	// A real change, for web-2, during the churn.
	made := time.Now()
	if err := e.C.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "real", Labels: map[string]string{"app": "web-2"}}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, "web-2 sees the ConfigMap", func() error {
		if s := seen("web-2"); !strings.Contains(s, "ConfigMap/real") {
			return fmt.Errorf("web-2 sees %q", s)
		}
		return nil
	})
	latency := time.Since(made)
	during := updates.Load()
	t.Logf("the ConfigMap reached its owner %s after it was made, during the churn (%d updates of the ServiceAccount so far)", latency.Round(time.Millisecond), during)
	if latency >= time.Minute {
		t.Errorf("the ConfigMap took %s to reach its owner: it was held with the churning ServiceAccount", latency)
	}
	// The churn's calls: each owner's up to the threshold, and the
	// ConfigMap's one; never one per update.
	calls := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "triggered"}) - callsBefore
	if limit := float64(len(owners)*(threshold+1) + 2); calls > limit {
		t.Errorf("%v guest calls during %d updates of one ServiceAccount, want at most %v", calls, updates.Load(), limit)
	}
}

// TestUnlistableKindLeavesOtherModulesReady runs an operator whose
// identity may not list the test kinds (test.wasmreconcile.io): a
// ReconcileModule of Responders is unready by itself, saying the list was
// forbidden, while the widget module serves and the operator's /readyz
// stays 200. It used to make the whole operator NotReady ("informer caches
// have not synced yet").
func TestUnlistableKindLeavesOtherModulesReady(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(e.NS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "limited"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	everything := func(groups ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: groups, Resources: []string{"*"}, Verbs: []string{"*"}}
	}
	bindClusterRole(t, cs, "limited-operator-"+e.NS, e.NS, []rbacv1.PolicyRule{
		everything("", "coordination.k8s.io", "events.k8s.io", "examples.wasmreconcile.io", "wasmreconcile.io", "authorization.k8s.io", "authentication.k8s.io"),
	}, "limited")
	cfg := rest.CopyConfig(e.Cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + e.NS + ":limited"}
	mo := e.OperatorOptions()
	mo.HealthProbeBindAddress = optest.FreeAddr(t)
	optest.Start(t, cfg, mo, operator.Options{ReconcileModules: true, ModuleController: operator.ModuleControllerOptions{StatusInterval: 500 * time.Millisecond}})
	moduleFromBytes(t, e, "widget", testwasm.BuildVersion(t, "./widget", "1"), nil)
	moduleFromBytes(t, e, "triggered", testwasm.Build(t, "./internal/testguests/triggered"), nil)
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	rm := optest.ModuleCondition(t, e.C, "triggered", "Ready", metav1.ConditionFalse, "CachesNotSynced")
	for _, c := range rm.Status.Conditions {
		if c.Type == "Ready" && !strings.Contains(c.Message, "forbidden") {
			t.Errorf("the Responder module's Ready message %q does not say why", c.Message)
		}
	}
	if err := e.C.Create(ctx, optest.Widget(e.NS, "w", 3)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "w", "3 x grey")
	optest.WaitHTTP(t, "http://"+mo.HealthProbeBindAddress+"/readyz", http.StatusOK, "")
}
