package informer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// scripted is a fake ListerWatcher (this is a unit test of the wrapper's
// logic; TestPaginatedListAndEvents covers the real API server) that answers
// each LIST with the next count of the script.
type scripted struct {
	counts []int
	calls  int
	seen   []metav1.ListOptions // the options of every LIST
}

func (s *scripted) ListWithContext(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	n := s.counts[min(s.calls, len(s.counts)-1)]
	s.calls++
	s.seen = append(s.seen, opts)
	l := &corev1.ConfigMapList{}
	for i := 0; i < n; i++ {
		l.Items = append(l.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}})
	}
	return l, nil
}

func (s *scripted) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewEmptyWatch(), nil
}

// newListWatcher wraps inner as NewInformer does, with metrics on a
// registry of the test's own.
func newListWatcher(t *testing.T, inner toolscache.ListerWatcherWithContext, opts Options, kind string) *listWatcher {
	t.Helper()
	opts.Registerer = prometheus.NewRegistry()
	i, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &listWatcher{inner: inner, opts: i.opts, gk: schema.GroupKind{Kind: kind}, kind: kind, informers: i, m: i.metrics}
}

func count(t *testing.T, obj runtime.Object) int {
	t.Helper()
	return len(obj.(*corev1.ConfigMapList).Items)
}

func TestEmptyListIsVerified(t *testing.T) {
	ctx := context.Background()
	opts := Options{EmptyListBackoff: time.Millisecond}

	// 3 objects, then a spurious empty list: refuted by the next list.
	s := &scripted{counts: []int{3, 0, 3}}
	w := newListWatcher(t, s, opts, "EmptyTestA")
	for _, want := range []int{3, 3} {
		l, err := w.ListWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := count(t, l); got != want {
			t.Fatalf("list = %d objects, want %d", got, want)
		}
	}
	if got := testutil.ToFloat64(w.m.EmptyListVerifications.WithLabelValues("EmptyTestA", "refuted")); got != 1 || s.calls != 3 {
		t.Errorf("refuted %v, calls %d; want 1 and 3", got, s.calls)
	}

	// 3 objects, then empty for good: confirmed after 3 verifications.
	s = &scripted{counts: []int{3, 0}}
	w = newListWatcher(t, s, opts, "EmptyTestB")
	if _, err := w.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := w.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil || count(t, l) != 0 {
		t.Fatalf("confirmed empty list: %v %v", l, err)
	}
	if got := testutil.ToFloat64(w.m.EmptyListVerifications.WithLabelValues("EmptyTestB", "confirmed")); got != 1 || s.calls != 1+1+3 {
		t.Errorf("confirmed %v, calls %d; want 1 and 5", got, s.calls)
	}

	// A kind that was empty stays empty without verification.
	s = &scripted{counts: []int{0, 0}}
	w = newListWatcher(t, s, opts, "EmptyTestC")
	for i := 0; i < 2; i++ {
		if _, err := w.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if s.calls != 2 {
		t.Errorf("calls %d: an always-empty kind was re-verified", s.calls)
	}

	// Verification stops when the caller gives up.
	s = &scripted{counts: []int{3, 0}}
	w = newListWatcher(t, s, Options{EmptyListBackoff: time.Hour}, "EmptyTestD")
	_, _ = w.ListWithContext(ctx, metav1.ListOptions{})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := w.ListWithContext(cctx, metav1.ListOptions{}); err == nil {
		t.Error("verification ignored the context")
	}
}

// TestListResourceVersionSemantics checks what the wrapper asks the server
// for. Its lists are paginated, and a paginated list at resourceVersion X
// with no resourceVersionMatch is served at exactly X: a relist after "too
// old resource version" would return stale data forever (see
// TestControlPlaneRestarts for the real API server). Only an explicit Exact
// request keeps its resourceVersion.
func TestListResourceVersionSemantics(t *testing.T) {
	cases := []struct {
		in              metav1.ListOptions
		wantRV, wantRVM string
	}{
		{metav1.ListOptions{}, "", ""},
		{metav1.ListOptions{ResourceVersion: "0"}, "", ""},
		{metav1.ListOptions{ResourceVersion: "223"}, "", ""},
		{metav1.ListOptions{ResourceVersion: "223", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, "", ""},
		{metav1.ListOptions{ResourceVersion: "223", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, "223", "Exact"},
	}
	for _, c := range cases {
		s := &scripted{counts: []int{1}}
		w := newListWatcher(t, s, Options{PageSize: 7}, "RVTest")
		if _, err := w.ListWithContext(context.Background(), c.in); err != nil {
			t.Fatal(err)
		}
		got := s.seen[0]
		if got.ResourceVersion != c.wantRV || string(got.ResourceVersionMatch) != c.wantRVM || got.Limit != 7 {
			t.Errorf("list %+v was sent as rv=%q match=%q limit=%d; want rv=%q match=%q limit=7",
				c.in, got.ResourceVersion, got.ResourceVersionMatch, got.Limit, c.wantRV, c.wantRVM)
		}
	}
}

// TestKindLabelsCarryTheGroup: two kinds of one name in two groups are two
// label values and two freshness entries, not one.
func TestKindLabelsCarryTheGroup(t *testing.T) {
	i, err := New(Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	a := &unstructured.Unstructured{}
	a.SetGroupVersionKind(schema.GroupVersionKind{Group: "a.example.io", Version: "v1", Kind: "Thing"})
	b := &unstructured.Unstructured{}
	b.SetGroupVersionKind(schema.GroupVersionKind{Group: "b.example.io", Version: "v1", Kind: "Thing"})
	ga, gb := i.groupKind(a), i.groupKind(b)
	if Label(ga) == Label(gb) {
		t.Fatalf("both kinds are labelled %q", Label(ga))
	}
	if got := Label(i.groupKind(&corev1.ConfigMap{})); got != "ConfigMap" {
		t.Errorf("a typed core object is labelled %q, want ConfigMap", got)
	}
	if got := Label(ga); got != "Thing.a.example.io" {
		t.Errorf("label %q, want Thing.a.example.io", got)
	}
	i.sawEvent(ga, Label(ga))
	if i.LastEvent(ga).IsZero() || !i.LastEvent(gb).IsZero() {
		t.Errorf("LastEvent: a %v, b %v; want only a", i.LastEvent(ga), i.LastEvent(gb))
	}
	if v := testutil.ToFloat64(i.metrics.LastEvent.WithLabelValues("Thing.a.example.io")); v <= 0 {
		t.Errorf("the last-event gauge of a is %v", v)
	}
}
