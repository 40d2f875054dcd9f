package informer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
)

// TestPaginatedListAndEvents creates 1,201 ConfigMaps (or
// $WASMRECONCILE_PAGING_OBJECTS; `make test-faults` uses 10,000) in a real
// API server, starts a cache whose informers come from this package with
// pages of 500, and reads in the metrics that the initial list came in
// ceil(n/500) pages or more, and that a later create arrives as a counted
// watch event.
func TestPaginatedListAndEvents(t *testing.T) {
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "paging"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n := 1201
	if v := os.Getenv("WASMRECONCILE_PAGING_OBJECTS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("WASMRECONCILE_PAGING_OBJECTS=%q: want a positive number", v)
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "paging", Name: fmt.Sprintf("cm-%05d", i)}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if (i+1)%2000 == 0 {
			t.Logf("created %d of %d", i+1, n)
		}
	}
	t.Logf("created %d ConfigMaps in %s", n, time.Since(start).Round(time.Millisecond))

	listCount := func() uint64 {
		var m dto.Metric
		if err := informer.ListDuration.WithLabelValues("ConfigMap").(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	lists := listCount()
	pages := testutil.ToFloat64(informer.ListPages.WithLabelValues("ConfigMap"))
	objects := testutil.ToFloat64(informer.ListObjects.WithLabelValues("ConfigMap"))
	ca, err := cache.New(cfg, cache.Options{NewInformer: informer.NewInformerFunc(informer.Options{PageSize: 500})})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	var list corev1.ConfigMapList
	for deadline := time.Now().Add(30 * time.Second); ; { // the first List starts and syncs the informer
		err := ca.List(ctx, &list, client.InNamespace("paging"))
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
	gotPages := testutil.ToFloat64(informer.ListPages.WithLabelValues("ConfigMap")) - pages
	gotObjects := testutil.ToFloat64(informer.ListObjects.WithLabelValues("ConfigMap")) - objects
	// The informer lists all namespaces: at least our n plus kube-root-ca.crt ones.
	if wantPages := float64((n + 499) / 500); gotPages < wantPages || gotObjects < float64(n) {
		t.Fatalf("initial list: %v pages, %v objects; want >= %v pages of 500 and >= %d objects", gotPages, gotObjects, wantPages, n)
	}
	t.Logf("initial list: %v pages, %v objects", gotPages, gotObjects)
	if listCount() <= lists {
		t.Error("the list's duration was not observed")
	}

	added := testutil.ToFloat64(informer.EventsReceived.WithLabelValues("ConfigMap", "ADDED"))
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "paging", Name: "late"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(informer.EventsReceived.WithLabelValues("ConfigMap", "ADDED")) <= added {
		if time.Now().After(deadline) {
			t.Fatal("the ADDED event of a new ConfigMap was not counted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ts := testutil.ToFloat64(informer.LastEvent.WithLabelValues("ConfigMap")); ts < float64(start.Unix()) {
		t.Errorf("last event timestamp %v is before the test started", ts)
	}
}

func TestRestartReasons(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for err, want := range map[error]string{
		apierrors.NewResourceExpired("too old"):             "gone",
		apierrors.NewGone("gone"):                           "gone",
		io.EOF:                                              "eof",
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
