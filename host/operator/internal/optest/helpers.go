package optest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
)

// ClaimFinalizer is the finalizer the claim guest's "fin" variant
// (module claim-fin) declares on its Responders.
const ClaimFinalizer = reconciler.FinalizerPrefix + "claim-fin"

// GetResponder reads Responder name live; ok is false when it is gone.
func GetResponder(t *testing.T, e Env, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ResponderKind)
	err := e.C.Get(context.Background(), types.NamespacedName{Namespace: e.NS, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return u, true
}

// WaitFinalizer waits until Responder name holds the claim-fin finalizer.
func WaitFinalizer(t *testing.T, e Env, name string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "Responder "+name+" to hold "+ClaimFinalizer, func() error {
		u, ok := GetResponder(t, e, name)
		if !ok {
			return fmt.Errorf("gone")
		}
		if !slices.Contains(u.GetFinalizers(), ClaimFinalizer) {
			return fmt.Errorf("finalizers %v", u.GetFinalizers())
		}
		return nil
	})
}

// DeleteAndWaitGone deletes Responder name and waits until it is gone.
func DeleteAndWaitGone(t *testing.T, e Env, name string) {
	t.Helper()
	if err := e.C.Delete(context.Background(), Responder(e.NS, name, nil)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "deleted Responder "+name+" to go", func() error {
		if u, ok := GetResponder(t, e, name); ok {
			return fmt.Errorf("still there, deletionTimestamp %v, finalizers %v", u.GetDeletionTimestamp(), u.GetFinalizers())
		}
		return nil
	})
}

// ServiceAccount creates ServiceAccount ns/name.
func ServiceAccount(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// GrantRole binds a new Role of rules, named role, to ServiceAccount
// ns/account.
func GrantRole(t *testing.T, c client.Client, ns, account, role string, rules ...rbacv1.PolicyRule) {
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

// Rule is a PolicyRule of verbs on resources of group.
func Rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

// ReadVerbs are the verbs of reading a kind through an informer.
var ReadVerbs = []string{"get", "list", "watch"}

// WaitObjectEvent waits for an Event on the object named name in ns with
// reason whose note contains every string of want, and returns it.
func WaitObjectEvent(t *testing.T, c client.Client, ns, name, reason string, want ...string) eventsv1.Event {
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

// Responder returns a Responder of the claim guest whose spec.response is
// response: the status, children and Events the guest answers with.
func Responder(ns, name string, response map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"response": response}}}
	u.SetGroupVersionKind(ResponderKind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// WaitPhase waits until a Responder's status.phase is phase (its response
// was applied) and returns its status.
func WaitPhase(t *testing.T, e Env, name, phase string) map[string]any {
	t.Helper()
	var status map[string]any
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("Responder %s status.phase %s", name, phase), func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ResponderKind)
		if err := e.C.Get(context.Background(), types.NamespacedName{Namespace: e.NS, Name: name}, u); err != nil {
			return err
		}
		status, _, _ = unstructured.NestedMap(u.Object, "status")
		if got, _ := status["phase"].(string); got != phase {
			return fmt.Errorf("status %v", status)
		}
		return nil
	})
	return status
}

// WaitVersion waits until any Widget in names reports widget version v, and
// returns how long that took from since.
func WaitVersion(t *testing.T, c client.Client, ns string, names []string, v string, since time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for _, n := range names {
			w := Widget(ns, n, 0)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), w); err == nil &&
				strings.HasSuffix(ReadyMessage(w), "by widget v"+v) {
				return time.Since(since)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Widget reconciled by widget v%s within 3 minutes", v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ReadyMessage returns a Widget's Ready condition message, or "".
func ReadyMessage(w *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

// ModuleInfoDigests lists the digests wasmreconcile_module_info reports for
// module.
func ModuleInfoDigests(t *testing.T, reg prometheus.Gatherer, module string) []string {
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "wasmreconcile_module_info" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["module"] == module {
				out = append(out, labels["digest"])
			}
		}
	}
	return out
}

// WaitHTTP polls url until it answers status with a body containing want.
func WaitHTTP(t *testing.T, url string, status int, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status && strings.Contains(string(body), want) {
				return
			}
			last = fmt.Sprintf("status %d, %d bytes", resp.StatusCode, len(body))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never answered %d with %q: last %s", url, status, want, last)
}

// Get fetches url and returns its status and body; 0 and the error's text
// when the request fails.
func Get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// FlightRecords gets the flight recorder's records of module from the
// operator serving metrics at addr, with token as a bearer token ("" sends
// no Authorization header). It returns the HTTP status and the body, or 0
// and the error's text when the request fails.
func FlightRecords(ctx context.Context, addr, token, module string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+operator.FlightRecorderPath+"?module="+module, nil)
	if err != nil {
		return 0, []byte(err.Error())
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// CreateModule creates a ReconcileModule and deletes it when the test ends:
// ReconcileModules are cluster-scoped, so tests sharing a control plane
// must not leave theirs behind.
func CreateModule(t *testing.T, c client.Client, name string, src v1alpha1.Source) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ReconcileModuleSpec{Source: src}}
	if err := c.Create(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), rm); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ReconcileModule %s: %v", name, err)
		}
	})
	return rm
}

// ModuleCondition waits until the ReconcileModule's condition typ has status
// and, if reason is not empty, reason; it returns the object.
func ModuleCondition(t *testing.T, c client.Client, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{}
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("ReconcileModule %s %s=%s (%s)", name, typ, status, reason), func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(rm.Status.Conditions, typ)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) {
			return fmt.Errorf("conditions %v", rm.Status.Conditions)
		}
		return nil
	})
	return rm
}

// Gadget returns a Gadget of the misbehave module with spec.mode.
func Gadget(ns, name, mode string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.wasmreconcile.io/v1", "kind": "Gadget",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"mode": mode},
	}}
}

// ResponderKind is the claim guest's kind.
var ResponderKind = schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Responder"}

// WaitModule waits, for up to 3 minutes, until ReconcileModule name
// satisfies ok (what describes it for the failure message), and returns
// it.
func WaitModule(t *testing.T, c client.Client, name, what string, ok func(*v1alpha1.ReconcileModule) error) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{}
	testenv.Eventually(t, 3*time.Minute, what, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err != nil {
			return err
		}
		return ok(rm)
	})
	return rm
}

// SetModuleSpec changes a ReconcileModule's spec, retrying on conflicts.
func SetModuleSpec(t *testing.T, c client.Client, name string, mutate func(spec *v1alpha1.ReconcileModuleSpec)) {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}}
	testenv.Update(t, c, rm, func() { mutate(&rm.Spec) })
}

// WaitModuleEvent waits for an Event with reason on the ReconcileModule of
// uid and returns its message.
func WaitModuleEvent(t *testing.T, c client.Client, uid types.UID, reason string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 2*time.Minute, "a "+reason+" Event", func() error {
		var events corev1.EventList
		if err := c.List(context.Background(), &events); err != nil {
			return err
		}
		for _, e := range events.Items { // events.k8s.io Events are readable as core Events too
			if e.InvolvedObject.UID == uid && e.Reason == reason {
				msg = e.Message
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	return msg
}

// Sharded makes mo a replica of the sharded group named group (leader
// election group-NS in e's namespace) with the sharding tests' fast Lease
// timings, for the election and the shard Leases both (4 s Leases: a dead
// replica's slots move within seconds), and returns its ShardingOptions:
// identity id and slots slots, in the default mode (set Mode for another).
func Sharded(e Env, mo *operator.ManagerOptions, group, id string, slots int) operator.ShardingOptions {
	const lease, renew, retry = 4 * time.Second, 3 * time.Second, 250 * time.Millisecond
	mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace = true, group+"-"+e.NS, e.NS
	mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = lease, renew, retry
	// No balancing by load: the tests that place objects by ShardPair
	// expect rendezvous owners (TestShardsBalanceByLoad turns it on).
	return operator.ShardingOptions{Enabled: true, Identity: id, Slots: slots, Group: group,
		LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry, BalanceTolerance: -1}
}

// ShardPair is the assignment of slots slots to the two replicas op-a and
// op-b that the sharding tests run.
func ShardPair(t *testing.T, slots int) shard.Assignment {
	t.Helper()
	space, err := shard.NewSpace(slots)
	if err != nil {
		t.Fatal(err)
	}
	return shard.Assign(space, []string{"op-a", "op-b"})
}

// ShardNamespaces creates namespaces E.NS-PREFIXi (deleted when the test
// ends) until every member of a owns at least each of them by namespace,
// and returns them in the order created and, by member, the ones each
// owns.
func ShardNamespaces(t *testing.T, e Env, a shard.Assignment, prefix string, each int) (all []string, byMember map[string][]string) {
	t.Helper()
	byMember = map[string][]string{}
	enough := func() bool {
		for _, m := range a.Members() {
			if len(byMember[m]) < each {
				return false
			}
		}
		return true
	}
	for i := 0; !enough(); i++ {
		if i > 64*each {
			t.Fatalf("%d namespaces do not give each of %v %d", i, a.Members(), each)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s%d", e.NS, prefix, i)}}
		if err := e.C.Create(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.C.Delete(context.Background(), ns) })
		all = append(all, ns.Name)
		owner := a.OwnerOf(shard.ByNamespace, ns.Name)
		byMember[owner] = append(byMember[owner], ns.Name)
	}
	return all, byMember
}
