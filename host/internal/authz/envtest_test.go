package authz

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.MainOptions{}))
}

// grant binds a Role of rules to ServiceAccount ns/name in ns.
func grant(t *testing.T, c client.Client, ns, name, role string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityAgainstTheAPIServer impersonates a ServiceAccount against a
// real API server with RBAC: the server authenticates the writes as the
// account with its groups, SubjectAccessReviews answer Authorize, writes
// and guest Events the account may not make are refused (the refused
// Event reported as the operator), and granting the rights makes them
// succeed.
func TestIdentityAgainstTheAPIServer(t *testing.T) {
	cp := testenv.Shared(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, admin)
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "module"}}); err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cp.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	// Short TTLs: the test grants rights and wants them used soon.
	ids, err := NewIdentities(cp.Config, httpClient, scheme, mapper, Options{AllowedTTL: time.Second, DeniedTTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ids.Get(ns + "/module")
	if err != nil {
		t.Fatal(err)
	}

	// The API server sees the account, with its groups.
	review := &authenticationv1.SelfSubjectReview{}
	if err := id.Writer().Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	ui := review.Status.UserInfo
	if ui.Username != "system:serviceaccount:"+ns+":module" {
		t.Errorf("the API server sees %q; want the account", ui.Username)
	}
	for _, g := range Groups(ns) {
		if !slices.Contains(ui.Groups, g) {
			t.Errorf("groups %v lack %s", ui.Groups, g)
		}
	}

	// Nothing granted: reads and writes are refused.
	cmGVK := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	if err := id.Authorize(ctx, "get", cmGVK, ns); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not get configmaps in namespace") {
		t.Fatalf("Authorize before any grant: %v; want Forbidden", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}}
	err = id.Writer().Create(ctx, cm.DeepCopy())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:serviceaccount:"+ns+":module") {
		t.Fatalf("create as the account: %v; want Forbidden naming the account", err)
	}

	// A guest Event the account may not post is reported as the operator.
	host := &fakeRecorder{}
	rec := id.Recorder("m", "wasmreconcile/m", host, func(string, string) bool { return false })
	defer rec.Stop()
	if err := admin.Create(ctx, cm.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
		t.Fatal(err)
	}
	cm.SetGroupVersionKind(cmGVK)
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Hello", "Reconcile", "from the guest")
	testenv.Eventually(t, time.Minute, "the refused Event reported", func() error {
		for _, e := range host.all() {
			if strings.Contains(e, "Warning EventForbidden "+ns+"/c") && strings.Contains(e, `the guest's Event "Hello" was refused`) {
				return nil
			}
		}
		return fmt.Errorf("host events %q", host.all())
	})

	// Granted: reads are allowed, writes and Events made as the account.
	grant(t, admin, ns, "module", "module",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create"}},
		rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})
	testenv.Eventually(t, time.Minute, "the account may read configmaps", func() error {
		return id.Authorize(ctx, "list", cmGVK, ns)
	})
	if err := id.Authorize(ctx, "list", corev1.SchemeGroupVersion.WithKind("Secret"), ns); !apierrors.IsForbidden(err) {
		t.Errorf("Authorize secrets: %v; want Forbidden", err)
	}
	if err := id.Authorize(ctx, "list", cmGVK, ""); !apierrors.IsForbidden(err) {
		t.Errorf("Authorize configmaps in every namespace: %v; want Forbidden", err)
	}
	testenv.Eventually(t, time.Minute, "a create as the account", func() error {
		return id.Writer().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"}})
	})
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Granted", "Reconcile", "from the guest, granted")
	testenv.Eventually(t, time.Minute, "the guest's Event posted", func() error {
		var list eventsv1.EventList
		if err := admin.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == "Granted" && e.Regarding.Name == "c" && e.ReportingController == "wasmreconcile/m" {
				return nil
			}
		}
		return fmt.Errorf("%d Events, none Granted", len(list.Items))
	})
	rec.Stop()
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Late", "Reconcile", "after Stop: dropped")
}
