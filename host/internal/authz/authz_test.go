package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// fakeReviews answers reviews from a rule function and counts them.
type fakeReviews struct {
	mu    sync.Mutex
	calls []Attributes
	allow func(Attributes) bool
	err   error
}

func (f *fakeReviews) review(_ context.Context, a Attributes) (Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, a)
	if f.err != nil {
		return Decision{}, f.err
	}
	return Decision{Allowed: f.allow(a)}, nil
}

func (f *fakeReviews) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestCheckCachesAllowedAndDeniedForTheirTTLs(t *testing.T) {
	f := &fakeReviews{allow: func(a Attributes) bool { return a.Resource == "configmaps" }}
	clk := &clock{now: time.Unix(1000, 0)}
	a, err := New(Options{Review: f.review, AllowedTTL: time.Minute, DeniedTTL: 10 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cm := Attributes{User: "u", Verb: "get", Resource: "configmaps", Namespace: "a"}
	secret := Attributes{User: "u", Verb: "get", Resource: "secrets", Namespace: "a"}
	for i := 0; i < 5; i++ {
		if d, err := a.Check(ctx, cm); err != nil || !d.Allowed {
			t.Fatalf("configmaps: %+v, %v; want allowed", d, err)
		}
		if d, err := a.Check(ctx, secret); err != nil || d.Allowed {
			t.Fatalf("secrets: %+v, %v; want denied", d, err)
		}
	}
	if n := f.count(); n != 2 {
		t.Fatalf("%d reviews for 10 checks of 2 attributes; want 2", n)
	}
	// Another namespace, verb or user is another question.
	for _, other := range []Attributes{
		{User: "u", Verb: "get", Resource: "configmaps", Namespace: "b"},
		{User: "u", Verb: "list", Resource: "configmaps", Namespace: "a"},
		{User: "v", Verb: "get", Resource: "configmaps", Namespace: "a"},
		{User: "u", Verb: "get", Group: "apps", Resource: "configmaps", Namespace: "a"},
	} {
		if _, err := a.Check(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count(); n != 6 {
		t.Fatalf("%d reviews; want 6", n)
	}
	clk.advance(11 * time.Second) // the denial expires, the grant does not
	_, _ = a.Check(ctx, cm)
	_, _ = a.Check(ctx, secret)
	if n := f.count(); n != 7 {
		t.Fatalf("%d reviews after the denied TTL; want 7 (the denial reviewed again)", n)
	}
	clk.advance(time.Minute)
	_, _ = a.Check(ctx, cm)
	if n := f.count(); n != 8 {
		t.Fatalf("%d reviews after the allowed TTL; want 8", n)
	}
}

func TestCheckSharesAReviewInFlight(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	a, err := New(Options{Review: func(ctx context.Context, _ Attributes) (Decision, error) {
		calls.Add(1)
		<-release
		return Decision{Allowed: true}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, err := a.Check(context.Background(), Attributes{User: "u", Verb: "get", Resource: "pods"}); err != nil || !d.Allowed {
				t.Errorf("%+v, %v", d, err)
			}
		}()
	}
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d reviews for 20 concurrent checks; want 1", n)
	}
}

func TestCheckDoesNotCacheErrors(t *testing.T) {
	f := &fakeReviews{err: errors.New("the API server is away"), allow: func(Attributes) bool { return true }}
	a, _ := New(Options{Review: f.review})
	attrs := Attributes{User: "u", Verb: "get", Resource: "pods"}
	if _, err := a.Check(context.Background(), attrs); err == nil {
		t.Fatal("no error")
	}
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	if d, err := a.Check(context.Background(), attrs); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v after the error cleared; want allowed", d, err)
	}
	if n := f.count(); n != 2 {
		t.Fatalf("%d reviews; want 2", n)
	}
}

func TestCheckSweepsExpiredAnswers(t *testing.T) {
	f := &fakeReviews{allow: func(Attributes) bool { return true }}
	clk := &clock{now: time.Unix(1000, 0)}
	a, _ := New(Options{Review: f.review, Now: clk.Now})
	for i := 0; i < 3000; i++ {
		_, _ = a.Check(context.Background(), Attributes{User: "u", Verb: "get", Resource: "pods", Namespace: fmt.Sprint("ns", i)})
		clk.advance(100 * time.Millisecond)
	}
	// Answers live a minute: at most about 600 are fresh at any time, and
	// the cache sweeps when it doubles past 1024.
	if n := a.Len(); n > 2048 {
		t.Fatalf("%d answers cached; want expired ones swept", n)
	}
}

func TestParseServiceAccount(t *testing.T) {
	for _, c := range []struct {
		in, ns, name, err string
	}{
		{in: "team-a/widget", ns: "team-a", name: "widget"},
		{in: "team-a/widget.module", ns: "team-a", name: "widget.module"},
		{in: "widget", err: "want NAMESPACE/NAME"},
		{in: "/widget", err: "want NAMESPACE/NAME"},
		{in: "team-a/", err: "want NAMESPACE/NAME"},
		{in: "a/b/c", err: "want NAMESPACE/NAME"},
		{in: "Team_A/widget", err: "namespace"},
		{in: "team-a/Widget", err: "name"},
	} {
		ns, name, err := ParseServiceAccount(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseServiceAccount(%q) = %v; want an error containing %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || ns != c.ns || name != c.name {
			t.Errorf("ParseServiceAccount(%q) = %q, %q, %v; want %q, %q", c.in, ns, name, err, c.ns, c.name)
		}
	}
	if u := UserName("team-a", "widget"); u != "system:serviceaccount:team-a:widget" {
		t.Errorf("UserName = %q", u)
	}
}

func TestForbiddenErrorIsAForbiddenAPIError(t *testing.T) {
	for _, e := range []*ForbiddenError{
		{Account: "a/w", Verb: "list", Resource: "secrets", Namespace: "x"},
		{Account: "a/w", Verb: "get", Group: "apps", Resource: "deployments"},
		{Account: "a/w", Impersonate: true},
	} {
		var err error = fmt.Errorf("wrapped: %w", e)
		if !apierrors.IsForbidden(err) {
			t.Errorf("%v: not Forbidden", err)
		}
	}
	msg := (&ForbiddenError{Account: "a/w", Verb: "list", Resource: "secrets", Namespace: "x"}).Error()
	if want := `ServiceAccount a/w may not list secrets in namespace "x"`; !strings.Contains(msg, want) {
		t.Errorf("message %q; want it to contain %q", msg, want)
	}
	msg = (&ForbiddenError{Account: "a/w", Verb: "get", Group: "apps", Resource: "deployments"}).Error()
	if want := "may not get deployments.apps cluster-wide"; !strings.Contains(msg, want) {
		t.Errorf("message %q; want it to contain %q", msg, want)
	}
}

var (
	widgetGVK = schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	nodeGVK   = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	cmGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(widgetGVK, meta.RESTScopeNamespace)
	m.Add(cmGVK, meta.RESTScopeNamespace)
	m.Add(secretGVK, meta.RESTScopeNamespace)
	m.Add(nodeGVK, meta.RESTScopeRoot)
	return m
}

// newTestIdentities has an account "team-a/widget" that may read widgets
// and configmaps in namespace team-a, and nodes, and that the operator may
// impersonate unless noImpersonation.
func newTestIdentities(t *testing.T, noImpersonation bool) (*Identities, *fakeReviews) {
	t.Helper()
	f := &fakeReviews{allow: func(a Attributes) bool {
		switch {
		case a.User == "":
			return a.Verb == "impersonate" && a.Resource == "serviceaccounts" && a.Namespace == "team-a" && a.Name == "widget" && !noImpersonation
		case a.User != "system:serviceaccount:team-a:widget":
			return false
		case a.Resource == "nodes":
			return a.Namespace == ""
		}
		return a.Namespace == "team-a" && (a.Resource == "widgets" || a.Resource == "configmaps")
	}}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ids, err := NewIdentities(&rest.Config{Host: "https://127.0.0.1:1"}, nil, scheme, testMapper(), Options{Review: f.review})
	if err != nil {
		t.Fatal(err)
	}
	return ids, f
}

func TestIdentityAuthorize(t *testing.T) {
	ids, f := newTestIdentities(t, false)
	id, err := ids.Get("team-a/widget")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := ids.Get("team-a/widget"); again != id {
		t.Error("a second Get of the account made a second identity")
	}
	ctx := context.Background()
	for _, c := range []struct {
		verb      string
		gvk       schema.GroupVersionKind
		namespace string
		allowed   bool
	}{
		{"get", widgetGVK, "team-a", true},
		{"list", cmGVK, "team-a", true},
		{"get", secretGVK, "team-a", false},
		{"get", widgetGVK, "team-b", false},
		{"list", widgetGVK, "", false},
		{"list", nodeGVK, "", true},
	} {
		err := id.Authorize(ctx, c.verb, c.gvk, c.namespace)
		if c.allowed != (err == nil) {
			t.Errorf("Authorize(%s %s in %q) = %v; want allowed %v", c.verb, c.gvk.Kind, c.namespace, err, c.allowed)
		}
		if err != nil && !apierrors.IsForbidden(err) {
			t.Errorf("Authorize(%s %s in %q) = %v; want Forbidden", c.verb, c.gvk.Kind, c.namespace, err)
		}
	}
	// The reviews name the account with its groups and the resource.
	f.mu.Lock()
	var sar *Attributes
	for i, a := range f.calls {
		if a.User != "" && a.Resource == "secrets" {
			sar = &f.calls[i]
		}
	}
	f.mu.Unlock()
	if sar == nil || strings.Join(sar.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:team-a,system:authenticated" || sar.Verb != "get" || sar.Namespace != "team-a" {
		t.Errorf("review of secrets: %+v", sar)
	}
	n := f.count()
	for i := 0; i < 100; i++ {
		_ = id.Authorize(ctx, "get", widgetGVK, "team-a")
	}
	if f.count() != n {
		t.Errorf("%d reviews for 100 cached checks; want none", f.count()-n)
	}
	if err := id.Authorize(ctx, "get", schema.GroupVersionKind{Group: "x", Version: "v1", Kind: "Unknown"}, "team-a"); err == nil || !strings.Contains(err.Error(), "Unknown") {
		t.Errorf("an unknown kind: %v; want a mapping error", err)
	}
}

func TestIdentityAuthorizeWithoutImpersonation(t *testing.T) {
	ids, _ := newTestIdentities(t, true)
	id, err := ids.Get("team-a/widget")
	if err != nil {
		t.Fatal(err)
	}
	err = id.Authorize(context.Background(), "get", widgetGVK, "team-a")
	var fe *ForbiddenError
	if !errors.As(err, &fe) || !fe.Impersonate || !strings.Contains(err.Error(), "the operator may not impersonate ServiceAccount team-a/widget") {
		t.Fatalf("Authorize = %v; want the operator's missing impersonate right", err)
	}
}

// fakeRecorder records Eventf calls.
type fakeRecorder struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, _ := meta.Accessor(regarding)
	r.events = append(r.events, fmt.Sprintf("%s %s %s/%s: %s", eventtype, reason, o.GetNamespace(), o.GetName(), fmt.Sprintf(note, args...)))
}

func (r *fakeRecorder) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r *fakeRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func TestReaderGuardsReads(t *testing.T) {
	ids, _ := newTestIdentities(t, false)
	id, _ := ids.Get("team-a/widget")
	objs := []client.Object{}
	for _, ns := range []string{"team-a", "team-b"} {
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(widgetGVK)
		w.SetNamespace(ns)
		w.SetName("w")
		objs = append(objs, w, &corev1.ConfigMap{})
		objs[len(objs)-1].SetNamespace(ns)
		objs[len(objs)-1].SetName("c")
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	scheme.AddKnownTypeWithName(widgetGVK, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(widgetGVK.GroupVersion().WithKind("WidgetList"), &unstructured.UnstructuredList{})
	base := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(testMapper()).WithObjects(objs...).Build()
	host := &fakeRecorder{}
	c := id.Reader(base, "widget", widgetGVK, host)
	ctx := context.Background()

	get := func(ns string) error {
		w := &unstructured.Unstructured{}
		w.SetGroupVersionKind(widgetGVK)
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w"}, w)
	}
	if err := get("team-a"); err != nil {
		t.Fatalf("get a widget in team-a: %v", err)
	}
	if err := get("team-b"); !apierrors.IsForbidden(err) {
		t.Fatalf("get a widget in team-b: %v; want Forbidden", err)
	}
	if ev := host.all(); len(ev) != 1 || !strings.Contains(ev[0], "Warning Forbidden team-b/w: module[widget] does not reconcile this object: ServiceAccount team-a/widget may not get widgets.examples.wasmreconcile.io in namespace \"team-b\"") {
		t.Fatalf("host events %q; want one Forbidden Warning on team-b/w", ev)
	}
	// A refused read of another kind records nothing: it is not the
	// object reconciled.
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "c"}, &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get a configmap in team-b: %v; want Forbidden", err)
	}
	if n := len(host.all()); n != 1 {
		t.Fatalf("%d host events; want still 1", n)
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("team-a")); err != nil {
		t.Fatalf("list configmaps in team-a: %v", err)
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("team-b")); !apierrors.IsForbidden(err) {
		t.Fatalf("list configmaps in team-b: %v; want Forbidden", err)
	}
	// Across all namespaces (the host's requeue): let through.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(widgetGVK.GroupVersion().WithKind("WidgetList"))
	if err := c.List(ctx, list); err != nil || len(list.Items) != 2 {
		t.Fatalf("list widgets everywhere: %d, %v; want 2", len(list.Items), err)
	}
}

func TestRecorderSendsTheHostsWarningsAsTheOperator(t *testing.T) {
	ids, _ := newTestIdentities(t, false)
	id, _ := ids.Get("team-a/widget")
	host := &fakeRecorder{}
	r := id.Recorder("widget", "wasmreconcile/widget", host, func(eventtype, reason string) bool {
		return eventtype == corev1.EventTypeWarning && reason == "ApplyFailed"
	})
	defer r.Stop()
	w := &corev1.ConfigMap{}
	w.SetNamespace("team-a")
	w.SetName("w")
	r.Eventf(w, nil, corev1.EventTypeWarning, "ApplyFailed", "Reconcile", "%s", "forbidden")
	if ev := host.all(); len(ev) != 1 || ev[0] != "Warning ApplyFailed team-a/w: forbidden" {
		t.Fatalf("host events %q", ev)
	}
	r.mu.Lock()
	started := r.rec != nil
	r.mu.Unlock()
	if started {
		t.Error("the account's broadcaster started for a host Warning")
	}
	r.Stop()
	r.Stop()
	r.Eventf(w, nil, corev1.EventTypeNormal, "Hello", "Reconcile", "after stop") // dropped, no panic
	r.mu.Lock()
	started = r.rec != nil
	r.mu.Unlock()
	if started {
		t.Error("a stopped recorder started its broadcaster")
	}
}
