package operator_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestTriggerMappings runs the triggered test guest, which declares one
// trigger of each mapping (selector on ConfigMaps, owner reference on
// Secrets, field spec.target on Services, all on ServiceAccounts) and
// records in each Responder's status.history what its calls saw. Each
// related object must reach exactly the Responders its mapping names: a
// Responder reached by another's related object would have an entry in its
// history that the test's sequence does not produce.
//
// Each call that changes the status is followed by one more call, for the
// event of the status write (the guest reads through cache_read, so that
// event is not answered as unchanged); before each step the test waits
// until the module's calls reach the count the steps so far produce, so
// that no such call is pending when the next related object appears.
func TestTriggerMappings(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./internal/testguests/triggered")}, Registerer: reg,
	})
	calls := 0
	settled := func(more int) {
		t.Helper()
		calls += more
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d calls of the module", calls), func() error {
			if n := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "triggered"}); int(n) < calls {
				return fmt.Errorf("%v calls", n)
			}
			return nil
		})
	}
	responder := func(name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.wasmreconcile.io/v1", "kind": "Responder",
			"metadata": map[string]any{"name": name, "namespace": e.NS}, "spec": spec,
		}}
		if err := e.C.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	history := func(name string, want ...string) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, name+"'s history "+strings.Join(want, " | "), func() error {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("test.wasmreconcile.io/v1")
			u.SetKind("Responder")
			if err := e.C.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: name}, u); err != nil {
				return err
			}
			got, _, _ := unstructured.NestedStringSlice(u.Object, "status", "history")
			if len(got) == len(want) && (len(got) == 0 || reflect.DeepEqual(got, want)) {
				return nil
			}
			if len(got) > len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want[:len(got)])) {
				t.Fatalf("%s's history is %q, want %q: a related object reached it that its triggers do not map to it", name, got, want)
			}
			return fmt.Errorf("history %q", got)
		})
	}
	create := func(obj client.Object) {
		t.Helper()
		obj.SetNamespace(e.NS)
		if err := e.C.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	responder("web", map[string]any{"selector": map[string]any{"app": "web"}, "target": "svc-web"})
	db := responder("db", map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "db"}}, "target": "svc-db"})
	history("web", "")
	history("db", "")
	settled(4) // each: the create's call, and its status write's

	// Selector: a ConfigMap labelled app=db reaches db, not web.
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-db", Labels: map[string]string{"app": "db"}}})
	history("db", "", "ConfigMap/cm-db")
	settled(2)

	// Field: the Service web's spec.target names reaches web, not db.
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}})
	history("web", "", "ConfigMap/cm-db,Service/svc-web")
	settled(2)

	// Owner reference: a Secret db owns reaches db, not web.
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-db", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "test.wasmreconcile.io/v1", Kind: "Responder", Name: "db", UID: db.GetUID(),
	}}}})
	history("db", "", "ConfigMap/cm-db", "ConfigMap/cm-db,Secret/s-db,Service/svc-web")
	settled(2)

	// All: a ServiceAccount reaches both.
	create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}})
	all := "ConfigMap/cm-db,Secret/s-db,Service/svc-web,ServiceAccount/sa"
	history("web", "", "ConfigMap/cm-db,Service/svc-web", all)
	history("db", "", "ConfigMap/cm-db", "ConfigMap/cm-db,Secret/s-db,Service/svc-web", all)
	settled(4)

	// A deletion triggers too: the Service goes, web is called, db is not.
	if err := e.C.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-web", Namespace: e.NS}}); err != nil {
		t.Fatal(err)
	}
	history("web", "", "ConfigMap/cm-db,Service/svc-web", all, "ConfigMap/cm-db,Secret/s-db,ServiceAccount/sa")
	settled(2)
	// db's history is as it was: the deletion did not reach it. (Its next
	// call would record the Service's absence.)
	history("db", "", "ConfigMap/cm-db", "ConfigMap/cm-db,Secret/s-db,Service/svc-web", all)
}
