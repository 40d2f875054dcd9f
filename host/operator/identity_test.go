package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

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
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.ServiceAccount(t, e.C, e.NS, "widget")
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")},
		Policy:  policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		// Short TTLs, so that each grant is used soon.
		Identity: operator.IdentityOptions{DefaultServiceAccount: e.NS + "/widget", AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
	})
	if err := e.C.Create(ctx, optest.Widget(e.NS, "w", 3)); err != nil {
		t.Fatal(err)
	}
	account := "ServiceAccount " + e.NS + "/widget"
	optest.WaitObjectEvent(t, e.C, e.NS, "w", "Forbidden", "module[widget] does not reconcile this object", account+" may not get widgets.examples.wasmreconcile.io")

	optest.GrantRole(t, e.C, e.NS, "widget", "widget-read", optest.Rule("examples.wasmreconcile.io", []string{"widgets"}, optest.ReadVerbs...))
	optest.WaitObjectEvent(t, e.C, e.NS, "w", "ApplyFailed", "forbidden", `"system:serviceaccount:`+e.NS+`:widget"`, "widgets/status")
	w := optest.Widget(e.NS, "w", 0)
	if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if st, ok := w.Object["status"]; ok {
		t.Fatalf("the Widget has a status %v although its module may not write it", st)
	}

	optest.GrantRole(t, e.C, e.NS, "widget", "widget-status", optest.Rule("examples.wasmreconcile.io", []string{"widgets/status"}, "patch", "update"))
	optest.WaitSummary(t, e.C, e.NS, "w", "3 x grey")
	optest.UpdateWidgetSize(t, e.C, e.NS, "w", 4)
	optest.WaitSummary(t, e.C, e.NS, "w", "4 x grey")
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
	e := optest.NewEnv(t)
	ctx := context.Background()
	optest.ServiceAccount(t, e.C, e.NS, "misbehave")
	optest.GrantRole(t, e.C, e.NS, "misbehave", "gadgets",
		optest.Rule("test.wasmreconcile.io", []string{"gadgets"}, optest.ReadVerbs...),
		optest.Rule("test.wasmreconcile.io", []string{"gadgets/status"}, "patch", "update"))
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:  []string{testwasm.BuildFile(t, "./internal/testguests/misbehave")},
		Policy:   policy.Policy{RateLimit: policy.RateLimit{MaxDelay: 2 * time.Second}},
		Identity: operator.IdentityOptions{DefaultServiceAccount: e.NS + "/misbehave", AuthorizationTTL: time.Second, AuthorizationDeniedTTL: 200 * time.Millisecond},
	})
	if err := e.C.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "cfg"}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	reader := optest.Gadget(e.NS, "reader", "read")
	_ = unstructured.SetNestedField(reader.Object, "cfg", "spec", "configMap")
	if err := e.C.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}
	if err := e.C.Create(ctx, optest.Gadget(e.NS, "talker", "events")); err != nil {
		t.Fatal(err)
	}
	account := "ServiceAccount " + e.NS + "/misbehave"

	// The guest sees the missing right in its read's error, and returns it.
	optest.WaitObjectEvent(t, e.C, e.NS, "reader", "ReconcileFailed", "get: cache read:", account+` may not get configmaps in namespace "`+e.NS+`"`)
	// The guest's Events are refused as the account. (The operator's
	// EventForbidden Warnings on one object are one series: its note is
	// the first refusal's, Hello's or Careful's.)
	optest.WaitObjectEvent(t, e.C, e.NS, "talker", "EventForbidden", "the guest's Event", "was refused", account+" may not post it")
	var list eventsv1.EventList
	if err := e.C.List(ctx, &list, client.InNamespace(e.NS)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range list.Items {
		if ev.Reason == "Hello" || ev.Reason == "Careful" {
			t.Fatalf("the guest's Event %s was posted although its account may not post Events", ev.Reason)
		}
	}

	optest.GrantRole(t, e.C, e.NS, "misbehave", "configmaps-and-events",
		optest.Rule("", []string{"configmaps"}, optest.ReadVerbs...),
		optest.Rule("events.k8s.io", []string{"events"}, "create", "patch"))
	testenv.Eventually(t, 2*time.Minute, "the guest reads the ConfigMap", func() error {
		g := optest.Gadget(e.NS, "reader", "")
		if err := e.C.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if found, _, _ := unstructured.NestedBool(g.Object, "status", "found"); !found {
			return fmt.Errorf("status %v", g.Object["status"])
		}
		return nil
	})
	// A new generation calls the guest again: its Events are posted now,
	// by the module's controller, as the account.
	talker := optest.Gadget(e.NS, "talker", "")
	testenv.Update(t, e.C, talker, func() { _ = unstructured.SetNestedField(talker.Object, "again", "spec", "round") })
	ev := optest.WaitObjectEvent(t, e.C, e.NS, "talker", "Hello", "normal event from the guest")
	if ev.ReportingController != "wasmreconcile/misbehave" {
		t.Errorf("the guest's Event was reported by %q; want wasmreconcile/misbehave", ev.ReportingController)
	}
}
