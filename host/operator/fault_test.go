package operator_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestWatchesSurviveCutConnections runs the operator through a TCP proxy,
// cuts every connection twice, and checks that watches restart (counted by
// reason) and that changes made around the cuts are all reconciled.
func TestWatchesSurviveCutConnections(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + proxy.Addr

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op, err := operator.New(ctx, viaProxy, operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")}, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		SkipControllerNameValidation: true,
	})
	if err != nil || len(op.LoadErrors()) > 0 {
		t.Fatalf("operator.New: %v %v", err, op.LoadErrors())
	}
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	defer func() { cancel(); <-done }()

	direct, err := client.New(cfg, client.Options{}) // the test's own client bypasses the proxy
	if err != nil {
		t.Fatal(err)
	}
	widget := func(name string, size int64) *unstructured.Unstructured {
		w := &unstructured.Unstructured{}
		w.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
		w.SetKind("Widget")
		w.SetNamespace("default")
		w.SetName(name)
		_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
		return w
	}
	summary := func(name, want string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			w := widget(name, 0)
			if err := direct.Get(ctx, client.ObjectKeyFromObject(w), w); err == nil {
				if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == want {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached summary %q", name, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	restarts := func() float64 {
		total := 0.0
		for _, reason := range []string{"eof", "timeout", "gone", "error"} {
			total += testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", reason))
		}
		return total
	}

	if err := direct.Create(ctx, widget("before", 1)); err != nil {
		t.Fatal(err)
	}
	summary("before", "1 x grey")
	base := restarts()

	for round, size := range []int64{2, 3} {
		if n := proxy.Cut(); n == 0 {
			t.Fatalf("round %d: no connection to cut", round)
		}
		// Changes while the watch is down must not be lost.
		w := widget("before", 0)
		if err := direct.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
		if err := direct.Update(ctx, w); err != nil {
			t.Fatal(err)
		}
		summary("before", map[int64]string{2: "2 x grey", 3: "3 x grey"}[size])
	}
	if err := direct.Create(ctx, widget("after", 7)); err != nil {
		t.Fatal(err)
	}
	summary("after", "7 x grey")

	if got := restarts() - base; got < 2 {
		t.Errorf("watch restarts counted: %v, want at least 2 (one per cut)", got)
	}
	t.Logf("watch restarts after two cuts: eof %v, error %v, timeout %v, gone %v",
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "eof")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "error")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "timeout")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "gone")))
}

// TestSlowAPIServer delays every connection to the API server past the list
// timeout: initial lists time out, so the operator is not ready and
// reconciles nothing; when the delay is lifted it syncs and converges.
func TestSlowAPIServer(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + proxy.Addr

	direct, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
	w.SetKind("Widget")
	w.SetNamespace("default")
	w.SetName("patient")
	_ = unstructured.SetNestedField(w.Object, int64(5), "spec", "size")
	if err := direct.Create(context.Background(), w); err != nil {
		t.Fatal(err)
	}

	proxy.SetLatency(3 * time.Second) // every response, past the 1 s list timeout below
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op, err := operator.New(ctx, viaProxy, operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")}, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		Informers:                    informer.Options{ListTimeout: time.Second},
		SkipControllerNameValidation: true,
	})
	if err != nil || len(op.LoadErrors()) > 0 {
		t.Fatalf("operator.New: %v %v", err, op.LoadErrors())
	}
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(5 * time.Second)
	if err := op.Ready(); err == nil {
		t.Error("ready although no list could complete")
	}
	got := &unstructured.Unstructured{Object: map[string]any{"apiVersion": w.GetAPIVersion(), "kind": w.GetKind()}}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "status"); found {
		t.Error("reconciled although the cache never synced")
	}

	proxy.SetLatency(0)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := direct.Get(ctx, client.ObjectKeyFromObject(w), got); err == nil {
			if s, _, _ := unstructured.NestedString(got.Object, "status", "summary"); s == "5 x grey" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("never converged after the delay was lifted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := op.Ready(); err != nil {
		t.Errorf("not ready after converging: %v", err)
	}
}
