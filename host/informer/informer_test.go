package informer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.MainOptions{})) }

// clientIn returns a client of cfg and a namespace of the test's own.
func clientIn(t *testing.T, cfg *rest.Config) (client.Client, string) {
	t.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, testenv.Namespace(t, c)
}

// TestPaginatedListAndEvents creates 1,201 ConfigMaps (or
// $WASMRECONCILE_PAGING_OBJECTS; `make test-faults` uses 10,000) in a real
// API server, starts a cache whose informers come from this package with
// pages of 500, and reads in the metrics that the initial list came in
// ceil(n/500) pages or more, and that a later create arrives as a counted
// watch event.
func TestPaginatedListAndEvents(t *testing.T) {
	cfg := testenv.Shared(t).Config
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, ns := clientIn(t, cfg)
	n := 1201
	if v := os.Getenv("WASMRECONCILE_PAGING_OBJECTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("WASMRECONCILE_PAGING_OBJECTS=%q: want a positive number", v)
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", i)}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if (i+1)%2000 == 0 {
			t.Logf("created %d of %d", i+1, n)
		}
	}
	t.Logf("created %d ConfigMaps in %s", n, time.Since(start).Round(time.Millisecond))

	reg := prometheus.NewRegistry()
	informers, err := informer.New(informer.Options{PageSize: 500, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	metric := func(name string) float64 { // summed over the ConfigMap series
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && l.GetValue() == "ConfigMap" {
						total += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount()) + m.GetGauge().GetValue()
					}
				}
			}
		}
		return total
	}
	ca, err := cache.New(cfg, cache.Options{NewInformer: informers.NewInformer})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	var list corev1.ConfigMapList
	for deadline := time.Now().Add(30 * time.Second); ; { // the first List starts and syncs the informer
		err := ca.List(ctx, &list, client.InNamespace(ns))
		if err == nil {
			break
		}
		var notStarted *cache.ErrCacheNotStarted
		if !errors.As(err, &notStarted) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list.Items) != n {
		t.Fatalf("cache holds %d ConfigMaps, want %d", len(list.Items), n)
	}
	gotPages := metric("wasmreconcile_informer_list_pages_total")
	gotObjects := metric("wasmreconcile_informer_list_objects_total")
	// The informer lists all namespaces: at least our n plus kube-root-ca.crt ones.
	if wantPages := float64((n + 499) / 500); gotPages < wantPages || gotObjects < float64(n) {
		t.Fatalf("initial list: %v pages, %v objects; want >= %v pages of 500 and >= %d objects", gotPages, gotObjects, wantPages, n)
	}
	t.Logf("initial list: %v pages, %v objects", gotPages, gotObjects)
	if metric("wasmreconcile_informer_list_duration_seconds") < 1 {
		t.Error("the list's duration was not observed")
	}
	if last := informers.LastEvent(schema.GroupKind{Kind: "ConfigMap"}); last.Before(start) {
		t.Errorf("LastEvent(ConfigMap) = %v, before the test started (%v)", last, start)
	}

	added := metric("wasmreconcile_informer_events_total")
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for metric("wasmreconcile_informer_events_total") <= added {
		if time.Now().After(deadline) {
			t.Fatal("the ADDED event of a new ConfigMap was not counted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ts := metric("wasmreconcile_informer_last_event_timestamp_seconds"); ts < float64(start.Unix()) {
		t.Errorf("last event timestamp %v is before the test started", ts)
	}
}

func TestRestartReasons(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for err, want := range map[error]string{
		apierrors.NewResourceExpired("too old"): "gone",
		&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonGone, Message: "gone"}}: "gone",
		io.EOF: "eof",
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF):         "eof",
		context.DeadlineExceeded:                            "timeout",
		apierrors.NewTimeoutError("slow", 1):                "timeout",
		apierrors.NewServerTimeout(gr, "list", 1):           "timeout",
		errors.New("connection refused"):                    "error",
		apierrors.NewInternalError(errors.New("something")): "error",
	} {
		if got := informer.RestartReason(err); got != want {
			t.Errorf("RestartReason(%v) = %s, want %s", err, got, want)
		}
	}
}

// TestSpuriousEmptyListAgainstAPIServer puts an HTTP proxy in front of the
// real API server that, once, empties the items of a ConfigMap LIST answer
// (keeping its real resourceVersion), as a misbehaving server or a restored
// etcd might. A 410 on the watch forces the relist. The wrapper must verify
// the empty list, find the objects again, and hand the informer the real
// list: not one delete notification may reach the event handlers, because
// a controller acting on them would delete or prune what still exists.
func TestSpuriousEmptyListAgainstAPIServer(t *testing.T) {
	cfg := testenv.Shared(t).Config
	proxy, err := faultproxy.StartHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, ns := clientIn(t, cfg)
	const n = 3
	for i := 0; i < n; i++ {
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}

	informers, err := informer.New(informer.Options{EmptyListBackoff: 50 * time.Millisecond, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cache.New(proxy.Config(), cache.Options{
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		NewInformer:       informers.NewInformer,
	})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := ca.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var deletes atomic.Int64
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { deletes.Add(1) },
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache never synced")
	}

	refuted := func() float64 {
		return testutil.ToFloat64(informers.Metrics().EmptyListVerifications.WithLabelValues("ConfigMap", "refuted"))
	}
	configMaps := func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/namespaces/"+ns+"/configmaps") }
	emptied := proxy.Add(&faultproxy.Rule{Times: 1,
		Match:   func(r *http.Request) bool { return configMaps(r) && r.URL.Query().Get("watch") != "true" },
		Rewrite: func(body map[string]any) { body["items"] = []any{} }})
	gone := proxy.Add(&faultproxy.Rule{Times: 1, Code: 410, Reason: metav1.StatusReasonGone,
		Match: func(r *http.Request) bool { return configMaps(r) && r.URL.Query().Get("watch") == "true" }})
	proxy.CutConnections() // the watch ends; its successor gets 410 and the reflector relists

	deadline := time.Now().Add(time.Minute)
	for refuted() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no refuted empty list: rewritten %d, gone %d\n%s", emptied.Hits(), gone.Hits(), strings.Join(proxy.Requests(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A change after the relist still arrives, so the informer is live.
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}); err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	for {
		if err := ca.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == n+1 { // envtest runs no controller-manager: no kube-root-ca.crt
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache holds %d ConfigMaps, want %d", len(list.Items), n+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if emptied.Hits() != 1 || gone.Hits() != 1 {
		t.Errorf("faults injected: rewritten %d, gone %d; want 1 and 1", emptied.Hits(), gone.Hits())
	}
	if got := deletes.Load(); got != 0 {
		t.Errorf("%d delete notifications reached the handlers from an unverified empty list", got)
	}
}

// TestHTTPClientStripsManagedFields builds a cache on HTTPClient, with no
// transform, against a real API server: its unstructured lists and watch
// events (JSON) arrive without managedFields and otherwise as the API server
// holds them; typed ones (protobuf) as they came.
func TestHTTPClientStripsManagedFields(t *testing.T) {
	cfg := testenv.Shared(t).Config
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, ns := clientIn(t, cfg)
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": `{"managedFields":[]}`}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	httpClient, err := informer.HTTPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	informers, err := informer.New(informer.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cache.New(cfg, cache.Options{HTTPClient: httpClient, DefaultNamespaces: map[string]cache.Config{ns: {}}, NewInformer: informers.NewInformer})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	// check compares the cache's copy of cm-1, typed and unstructured, with
	// the API server's, which has managedFields.
	check := func(wantValue string) {
		t.Helper()
		var live corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-1"}, &live); err != nil {
			t.Fatal(err)
		}
		if len(live.ManagedFields) == 0 {
			t.Fatal("the live object has no managedFields: the test would prove nothing")
		}
		live.ManagedFields = nil
		var typed corev1.ConfigMap
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
		deadline := time.Now().Add(time.Minute)
		for { // until the watch has brought wantValue to both informers
			if err := ca.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-1"}, &typed); err != nil {
				t.Fatal(err)
			}
			if err := ca.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-1"}, u); err != nil {
				t.Fatal(err)
			}
			v, _, _ := unstructured.NestedString(u.Object, "data", "v")
			if typed.Data["v"] == wantValue && v == wantValue {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cache never saw v=%q (typed %q, unstructured %q)", wantValue, typed.Data["v"], v)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Built-in kinds come typed as protobuf, which passes as it came.
		typed.ManagedFields, typed.TypeMeta = nil, live.TypeMeta
		if !equality.Semantic.DeepEqual(&typed, &live) {
			t.Errorf("typed cache copy differs from the live object:\n%+v\n%+v", typed, live)
		}
		live.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
		want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&live)
		if err != nil {
			t.Fatal(err)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "managedFields"); found {
			t.Error("the unstructured cache copy has managedFields")
		}
		if !equality.Semantic.DeepEqual(u.Object, want) {
			t.Errorf("unstructured cache copy differs from the live object without managedFields:\n%v\n%v", u.Object, want)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "data", "k"); got != `{"managedFields":[]}` {
			t.Errorf("data.k = %q: data that looks like managedFields was cut", got)
		}
	}
	// The initial list, then a watch event.
	check("")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-1"}, &cm); err != nil {
			return err
		}
		cm.Data["v"] = "changed"
		return c.Update(ctx, &cm)
	}); err != nil {
		t.Fatal(err)
	}
	check("changed")
}

// TestPackedObjectsFromTheAPIServer runs a cache with Options.Packed
// against a real API server, listing in pages of 2: on HTTPClient's client
// its unstructured objects, listed and watched, are packed straight from
// the API server's JSON (its key order kept: metadata starts with "name");
// on a plain client they are decoded by client-go and packed after (Pack
// sorts the keys). Either way each reads back as the API server's
// object without managedFields.
func TestPackedObjectsFromTheAPIServer(t *testing.T) {
	cfg := testenv.Shared(t).Config
	c, ns := clientIn(t, cfg)
	for i := range 5 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"v": "0"}}
		if err := c.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	httpClient, err := informer.HTTPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		http     *http.Client
		straight bool
	}{{"HTTPClient", httpClient, true}, {"client-go decodes", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			informers, err := informer.New(informer.Options{PageSize: 2, Packed: true, Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			ca, err := cache.New(cfg, cache.Options{HTTPClient: tc.http, DefaultNamespaces: map[string]cache.Config{ns: {}},
				NewInformer: informers.NewInformer, DefaultTransform: packed.Transform(nil)})
			if err != nil {
				t.Fatal(err)
			}
			gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			inf, err := ca.GetInformer(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			stored := map[string]any{}
			keep := func(obj any) {
				if o, ok := obj.(client.Object); ok {
					mu.Lock()
					stored[o.GetName()] = obj
					mu.Unlock()
				}
			}
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: keep, UpdateFunc: func(_, obj any) { keep(obj) }}); err != nil {
				t.Fatal(err)
			}
			go func() { _ = ca.Start(ctx) }()
			syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
			defer cancelSync()
			if !ca.WaitForCacheSync(syncCtx) {
				t.Fatalf("cache did not sync: %v", informers.LastError(gvk.GroupKind()))
			}
			check := func(name, value string) {
				t.Helper()
				testenv.Eventually(t, time.Minute, name+" packed with v="+value, func() error {
					live := &unstructured.Unstructured{}
					live.SetGroupVersionKind(gvk)
					if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, live); err != nil {
						return err
					}
					if len(live.GetManagedFields()) == 0 {
						t.Fatal("the live object has no managedFields: the test would prove nothing")
					}
					mu.Lock()
					p, ok := stored[name].(*packed.Object)
					mu.Unlock()
					if !ok {
						return fmt.Errorf("the cache holds a %T", stored[name])
					}
					got, err := p.Unpack()
					if err != nil {
						t.Fatal(err)
					}
					if value == "" { // as the API server has it
						value, _, _ = unstructured.NestedString(live.Object, "data", "v")
					}
					if v, _, _ := unstructured.NestedString(got.Object, "data", "v"); v != value {
						return fmt.Errorf("v=%q", v)
					}
					unstructured.RemoveNestedField(live.Object, "metadata", "managedFields")
					if !equality.Semantic.DeepEqual(got.Object, live.Object) {
						t.Fatalf("packed:\n%v\nlive:\n%v", got.Object, live.Object)
					}
					if p.ResourceVersion != live.GetResourceVersion() || p.UID != live.GetUID() || p.Name != name {
						t.Fatalf("packed metadata %+v", p.ObjectMeta)
					}
					if straight := bytes.Contains(p.JSON(), []byte(`"metadata":{"name":`)); straight != tc.straight {
						t.Fatalf("decoded straight from the API server's JSON: %v, want %v: %.60s", straight, tc.straight, p.JSON())
					}
					return nil
				})
			}
			for i := range 5 {
				check(fmt.Sprintf("cm-%d", i), "") // listed, in three pages
			}
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var cm corev1.ConfigMap
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-3"}, &cm); err != nil {
					return err
				}
				cm.Data["v"] = tc.name
				return c.Update(ctx, &cm)
			})
			if err != nil {
				t.Fatal(err)
			}
			check("cm-3", tc.name) // watched
			// The cache's reader hands out unstructured objects.
			if err := ca.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm-3"}, u); err != nil {
				t.Fatal(err)
			}
			if v, _, _ := unstructured.NestedString(u.Object, "data", "v"); v != tc.name {
				t.Errorf("read v=%q", v)
			}
		})
	}
}
