package operator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// The ownership tests run the claim test guest
// (modules/internal/testguests/claim): it answers each Responder with its
// spec.response and adds status.childFailures, what the host told it.

// claimFile writes the claim guest of a manifest variant (see the guest's
// documentation) to a file and returns its path.
func claimFile(t *testing.T, variant string) string {
	t.Helper()
	if variant == "" {
		return testwasm.BuildFile(t, "./internal/testguests/claim")
	}
	path := filepath.Join(t.TempDir(), "claim-"+variant+".wasm")
	if err := os.WriteFile(path, testwasm.BuildVersion(t, "./internal/testguests/claim", variant), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startClaim runs an operator with the claim guest in e's namespace and
// returns its metrics registry.
func startClaim(t *testing.T, e optest.Env) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{Modules: []string{claimFile(t, "")}, Registerer: reg})
	return reg
}

// setResponse replaces a Responder's spec.response, retrying on conflict.
func setResponse(t *testing.T, e optest.Env, name string, response map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(optest.ResponderKind)
		if err := e.C.Get(context.Background(), types.NamespacedName{Namespace: e.NS, Name: name}, u); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, response, "spec", "response"); err != nil {
			return err
		}
		return e.C.Update(context.Background(), u)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for a Warning Event of reason on object name whose
// message contains every one of contains, and returns its message.
func waitEvent(t *testing.T, e optest.Env, name, reason string, contains ...string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("a %s Event on %s", reason, name), func() error {
		var events corev1.EventList
		if err := e.C.List(context.Background(), &events, client.InNamespace(e.NS)); err != nil {
			return err
		}
	next:
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name != name || ev.Reason != reason || ev.Type != corev1.EventTypeWarning {
				continue
			}
			for _, c := range contains {
				if !strings.Contains(ev.Message, c) {
					continue next
				}
			}
			msg = ev.Message
			return nil
		}
		return fmt.Errorf("none yet among %d Events", len(events.Items))
	})
	return msg
}

func configMap(name string, data map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": data}
}

func getCM(t *testing.T, e optest.Env, name string) (*corev1.ConfigMap, bool) {
	t.Helper()
	var cm corev1.ConfigMap
	err := e.C.Get(context.Background(), types.NamespacedName{Namespace: e.NS, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return &cm, true
}

// TestOwnershipNeverAdopts: a user's ConfigMap whose name a guest emits is
// neither overwritten, re-parented nor, once the guest stops emitting it,
// deleted. The host records a ChildConflict Event naming the object and
// its controller, counts it, and tells the guest in its next request; the
// guest's status is written only once it has seen the conflict.
func TestOwnershipNeverAdopts(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	user := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "taken"}, Data: map[string]string{"owner": "user"}}
	if err := e.C.Create(ctx, user); err != nil {
		t.Fatal(err)
	}
	reg := startClaim(t, e)
	if err := e.C.Create(ctx, optest.Responder(e.NS, "r", map[string]any{
		"status":   map[string]any{"phase": "one"},
		"children": []any{configMap("taken", map[string]any{"owner": "module"}), configMap("free", map[string]any{"k": "v"})},
	})); err != nil {
		t.Fatal(err)
	}
	msg := waitEvent(t, e, "r", "ChildConflict", "ConfigMap "+e.NS+"/taken", "no controller")
	t.Logf("Event: %s", msg)
	status := optest.WaitPhase(t, e, "r", "one")
	if got := fmt.Sprint(status["childFailures"]); got != "[ConfigMap/taken:Conflict]" {
		t.Errorf("the first status written has childFailures %s; the guest must have seen the conflict before its status is written", got)
	}
	if _, ok := getCM(t, e, "free"); !ok {
		t.Error("the other child was not created beside the conflict")
	}
	cm, _ := getCM(t, e, "taken")
	if cm.Data["owner"] != "user" || len(cm.OwnerReferences) > 0 || cm.Labels["wasmreconcile.io/module"] != "" {
		t.Errorf("the user's ConfigMap was adopted: data %v, owners %v, labels %v", cm.Data, cm.OwnerReferences, cm.Labels)
	}
	if v := optest.Gather(t, reg, "wasmreconcile_apply_failures_total", map[string]string{"module": "claim", "target": "child", "reason": "Conflict"}); v < 1 {
		t.Errorf("wasmreconcile_apply_failures_total{reason=Conflict} = %v", v)
	}

	// The guest stops emitting both: its own child is pruned (a positive
	// barrier: the prune ran), the user's is not.
	setResponse(t, e, "r", map[string]any{"status": map[string]any{"phase": "two"}, "children": []any{}})
	optest.WaitPhase(t, e, "r", "two")
	testenv.Eventually(t, time.Minute, "the module's own child pruned", func() error {
		if _, ok := getCM(t, e, "free"); ok {
			return fmt.Errorf("ConfigMap free still exists")
		}
		return nil
	})
	cm, ok := getCM(t, e, "taken")
	if !ok || cm.Data["owner"] != "user" {
		t.Errorf("the user's ConfigMap was deleted or changed: %v", cm)
	}
}

// TestOwnershipPrunesOnlyOwn: an object whose controller is the reconciled
// object but which this module did not create (it lacks the module's
// mark: made by a user, another module or another tool) is neither passed
// to the guest as a child nor pruned.
func TestOwnershipPrunesOnlyOwn(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	startClaim(t, e)
	r := optest.Responder(e.NS, "r", map[string]any{"status": map[string]any{"phase": "one"}, "children": []any{configMap("mine", nil)}})
	if err := e.C.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	optest.WaitPhase(t, e, "r", "one")
	mine, ok := getCM(t, e, "mine")
	if !ok {
		t.Fatal("child not created")
	}
	if mine.Labels["wasmreconcile.io/module"] != "claim" || len(mine.OwnerReferences) != 1 {
		t.Fatalf("child lacks the mark or the owner: %v %v", mine.Labels, mine.OwnerReferences)
	}
	// Managed by apply: a field the guest drops is removed.
	for _, f := range mine.ManagedFields {
		if f.Manager == "claim" && f.Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("the create's field ownership was not made apply ownership: %+v", f)
		}
	}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "foreign",
		OwnerReferences: []metav1.OwnerReference{*mine.OwnerReferences[0].DeepCopy()}}}
	if err := e.C.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	setResponse(t, e, "r", map[string]any{"status": map[string]any{"phase": "two"}, "children": []any{}})
	optest.WaitPhase(t, e, "r", "two")
	testenv.Eventually(t, time.Minute, "the module's own child pruned", func() error {
		if _, ok := getCM(t, e, "mine"); ok {
			return fmt.Errorf("ConfigMap mine still exists")
		}
		return nil
	})
	if _, ok := getCM(t, e, "foreign"); !ok {
		t.Error("an object controlled by the owner but not made by the module was pruned")
	}
}

// TestChildrenAbsentLeavesThemAlone: a response without children (status
// only, {}, or children: null) leaves the children as they are; an empty
// list deletes them.
func TestChildrenAbsentLeavesThemAlone(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	startClaim(t, e)
	if err := e.C.Create(ctx, optest.Responder(e.NS, "r", map[string]any{"status": map[string]any{"phase": "one"}, "children": []any{configMap("c", nil)}})); err != nil {
		t.Fatal(err)
	}
	optest.WaitPhase(t, e, "r", "one")
	if _, ok := getCM(t, e, "c"); !ok {
		t.Fatal("child not created")
	}
	for i, resp := range []map[string]any{
		{"status": map[string]any{"phase": "status-only"}},
		{"status": map[string]any{"phase": "null"}, "children": nil},
	} {
		setResponse(t, e, "r", resp)
		optest.WaitPhase(t, e, "r", resp["status"].(map[string]any)["phase"].(string))
		if _, ok := getCM(t, e, "c"); !ok {
			t.Fatalf("response %d (%v) deleted the children", i, resp)
		}
	}
	setResponse(t, e, "r", map[string]any{"status": map[string]any{"phase": "empty"}, "children": []any{}})
	optest.WaitPhase(t, e, "r", "empty")
	testenv.Eventually(t, time.Minute, "children: [] deletes the child", func() error {
		if _, ok := getCM(t, e, "c"); ok {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

// TestApplyFailureIsLoud: a child the API server refuses gives a Warning
// Event with the API server's message, a metric, and the failure in the
// guest's next request; the status the guest wrote without knowing of it
// (Ready) is never written.
func TestApplyFailureIsLoud(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := startClaim(t, e)
	if err := e.C.Create(ctx, optest.Responder(e.NS, "r", map[string]any{
		"status":   map[string]any{"phase": "Ready"},
		"children": []any{configMap("bad", map[string]any{"not a valid key!": "v"}), configMap("good", nil)},
	})); err != nil {
		t.Fatal(err)
	}
	msg := waitEvent(t, e, "r", "InvalidResponse", "ConfigMap "+e.NS+"/bad", "valid config key")
	t.Logf("Event: %s", msg)
	status := optest.WaitPhase(t, e, "r", "Ready")
	if got := fmt.Sprint(status["childFailures"]); got != "[ConfigMap/bad:Invalid]" {
		t.Errorf("the status was written with childFailures %s: a status computed without knowing of the refused child was written", got)
	}
	if _, ok := getCM(t, e, "good"); !ok {
		t.Error("the valid child was not written beside the refused one")
	}
	if v := optest.Gather(t, reg, "wasmreconcile_apply_failures_total", map[string]string{"module": "claim", "target": "child", "reason": "Invalid"}); v < 1 {
		t.Errorf("wasmreconcile_apply_failures_total{target=child,reason=Invalid} = %v", v)
	}
}

// TestImpossibleDeclarationsRefused: modules whose declarations no
// reconcile could honour are refused at load with errors that say why: a
// second module for a kind already reconciled, a module owning its own
// kind, and a namespaced kind owning a cluster-scoped one (asked of the
// API server's REST mapper, not a list of names).
func TestImpossibleDeclarationsRefused(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	op, err := optest.NewOperator(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Registerer: prometheus.NewRegistry(),
		Modules: []string{claimFile(t, ""), claimFile(t, "second"), claimFile(t, "self"), claimFile(t, "cluster"),
			testwasm.BuildFile(t, "./internal/testguests/respond")},
		Engine: operator.EngineOptions{CompilationCacheDir: optest.CompilationCache()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(context.Background())
	if names := op.Names(); len(names) != 1 || names[0] != "claim" {
		t.Errorf("modules running: %v, want only claim", names)
	}
	var all []string
	for _, err := range op.LoadErrors() {
		all = append(all, err.Error())
	}
	joined := strings.Join(all, "\n")
	t.Logf("load errors:\n%s", joined)
	for _, want := range []string{
		"Responder.test.wasmreconcile.io is already reconciled by module claim",
		"owns[2] is the reconciled kind Responder itself",
		"owns[2] is ClusterRole.rbac.authorization.k8s.io, a cluster-scoped kind, but the reconciled kind Responder is namespaced",
		"owns[1] is ClusterRoleBinding.rbac.authorization.k8s.io, a cluster-scoped kind",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no load error says %q", want)
		}
	}
}

// TestReadsAreScoped: a guest reads objects of its object's namespace; a
// read in another namespace is refused with what to grant, until the
// operator grants that namespace (--module-read-namespaces; a
// ReconcileModule's spec.readNamespaces).
func TestReadsAreScoped(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	other := testenv.Namespace(t, e.C)
	for _, ns := range []string{e.NS, other} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}, StringData: map[string]string{"k": "v"}}
		if err := e.C.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	read := func(ns string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "s"}
	}
	run := func(t *testing.T, grant []string, phase string) {
		mo := e.OperatorOptions()
		mo.Namespaces = []string{e.NS, other}
		opts := operator.Options{Modules: []string{claimFile(t, "")}, Registerer: prometheus.NewRegistry()}
		if grant != nil {
			opts.ModuleReadNamespaces = map[string][]string{"claim": grant}
		}
		optest.Start(t, e.Cfg, mo, opts) // stops when the subtest ends
		for _, c := range []struct{ name, ns string }{{"own-" + phase, e.NS}, {"other-" + phase, other}} {
			r := optest.Responder(e.NS, c.name, map[string]any{"status": map[string]any{"phase": phase}})
			_ = unstructured.SetNestedField(r.Object, read(c.ns), "spec", "read")
			if err := e.C.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		own := optest.WaitPhase(t, e, "own-"+phase, phase)
		if own["read"] != "found" {
			t.Errorf("%s: reading a Secret of the object's own namespace: %v", phase, own["read"])
		}
		otherStatus := optest.WaitPhase(t, e, "other-"+phase, phase)
		got, _ := otherStatus["read"].(string)
		if grant == nil && !strings.Contains(got, "outside the module's read scope") {
			t.Errorf("reading a Secret of another namespace without a grant: %q, want it refused", got)
		}
		if grant != nil && got != "found" {
			t.Errorf("reading a Secret of a granted namespace: %q", got)
		}
		t.Logf("%s: other namespace: %s", phase, got)
	}
	t.Run("scoped", func(t *testing.T) { run(t, nil, "scoped") })
	t.Run("granted", func(t *testing.T) { run(t, []string{other}, "granted") })
}

// watchCounter counts the watches open through a transport, by resource.
type watchCounter struct {
	mu   sync.Mutex
	open map[string]int
	next http.RoundTripper
}

func (w *watchCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") != "true" {
		return w.next.RoundTrip(req)
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	resource := parts[len(parts)-1]
	resp, err := w.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	w.mu.Lock()
	w.open[resource]++
	w.mu.Unlock()
	resp.Body = &watchBody{ReadCloser: resp.Body, done: func() {
		w.mu.Lock()
		w.open[resource]--
		w.mu.Unlock()
	}}
	return resp, nil
}

func (w *watchCounter) count(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open[resource]
}

type watchBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *watchBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// TestRemovedModuleLeavesNoInformer: removing a module stops the watches
// of its kinds (its own, owned and read kinds) that no other module uses.
func TestRemovedModuleLeavesNoInformer(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	watches := &watchCounter{open: map[string]int{}}
	cfg := rest.CopyConfig(e.Cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { watches.next = rt; return watches })
	op := optest.Start(t, cfg, e.OperatorOptions(), operator.Options{Modules: []string{claimFile(t, "")}, Registerer: prometheus.NewRegistry()})
	if err := e.C.Create(ctx, optest.Responder(e.NS, "r", map[string]any{"status": map[string]any{"phase": "one"}})); err != nil {
		t.Fatal(err)
	}
	optest.WaitPhase(t, e, "r", "one")
	for _, r := range []string{"responders", "configmaps", "secrets"} {
		if watches.count(r) == 0 {
			t.Fatalf("no watch of %s while the module runs", r)
		}
	}
	if !op.Remove("claim") {
		t.Fatal("Remove: the module did not run")
	}
	testenv.Eventually(t, time.Minute, "the removed module's watches closed", func() error {
		for _, r := range []string{"responders", "configmaps", "secrets"} {
			if n := watches.count(r); n != 0 {
				return fmt.Errorf("%d watches of %s still open", n, r)
			}
		}
		return nil
	})
}
