package operator_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func widgetRestarts() float64 {
	total := 0.0
	for _, reason := range []string{"eof", "timeout", "gone", "error"} {
		total += testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", reason))
	}
	return total
}

// TestWatchesSurviveCutConnections runs the operator through a TCP proxy,
// cuts every connection twice, and checks that watches restart (counted by
// reason) and that changes made around the cuts are all reconciled.
func TestWatchesSurviveCutConnections(t *testing.T) {
	cfg, viaProxy, proxy := startBehindProxy(t)
	startOperator(t, viaProxy, operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")}, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		SkipControllerNameValidation: true,
	})
	ctx := context.Background()
	direct, err := client.New(cfg, client.Options{}) // the test's own client bypasses the proxy
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Create(ctx, widget("before", 1)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, direct, "before", "1 x grey")
	base := widgetRestarts()

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
		waitSummary(t, direct, "before", map[int64]string{2: "2 x grey", 3: "3 x grey"}[size])
	}
	if err := direct.Create(ctx, widget("after", 7)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, direct, "after", "7 x grey")

	if got := widgetRestarts() - base; got < 2 {
		t.Errorf("watch restarts counted: %v, want at least 2 (one per cut)", got)
	}
	t.Logf("watch restarts after two cuts: eof %v, error %v, timeout %v, gone %v",
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "eof")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "error")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "timeout")),
		testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "gone")))
}

// TestSlowAPIServer adds latency to every API server response past the list
// timeout: initial lists time out, so the operator is not ready and
// reconciles nothing; when the latency is lifted it syncs and converges.
func TestSlowAPIServer(t *testing.T) {
	cfg, viaProxy, proxy := startBehindProxy(t)
	ctx := context.Background()
	direct, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Create(ctx, widget("patient", 5)); err != nil {
		t.Fatal(err)
	}

	proxy.SetLatency(3 * time.Second) // every response, past the 1 s list timeout below
	op := startOperator(t, viaProxy, operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")}, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		Informers:                    informer.Options{ListTimeout: time.Second},
		SkipControllerNameValidation: true,
	})
	time.Sleep(5 * time.Second)
	if err := op.Ready(); err == nil {
		t.Error("ready although no list could complete")
	}
	got := widget("patient", 0)
	if err := direct.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "status"); found {
		t.Error("reconciled although the cache never synced")
	}

	proxy.SetLatency(0)
	waitSummary(t, direct, "patient", "5 x grey")
	if err := op.Ready(); err != nil {
		t.Errorf("not ready after converging: %v", err)
	}
}

// TestInjectedAPIErrors puts an HTTP proxy of ours in front of the API
// server that answers chosen requests with errors: a 500 on a list, an
// expired continue token in the middle of a paginated list, and a 410 Gone
// on a watch. The informers must relist as client-go prescribes, count what
// happened, and the operator must still converge every Widget.
func TestInjectedAPIErrors(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	proxy, err := faultproxy.StartHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close) // runs after the operator stops (cleanups run last-in, first-out)
	ctx := context.Background()
	direct, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := 0; i < n; i++ {
		if err := direct.Create(ctx, widget(fmt.Sprintf("w%d", i), int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	widgets := func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/widgets") }
	q := func(r *http.Request, k string) string { return r.URL.Query().Get(k) }
	serverError := proxy.Add(&faultproxy.Rule{Times: 1, Code: 500, Reason: metav1.StatusReasonInternalError,
		Match: func(r *http.Request) bool { return widgets(r) && q(r, "watch") != "true" }})
	expired := proxy.Add(&faultproxy.Rule{Times: 1, Code: 410, Reason: metav1.StatusReasonExpired,
		Match: func(r *http.Request) bool { return widgets(r) && q(r, "continue") != "" }})
	gone := proxy.Add(&faultproxy.Rule{Times: 1, Code: 410, Reason: metav1.StatusReasonGone,
		Match: func(r *http.Request) bool { return widgets(r) && q(r, "watch") == "true" }})

	expiredBefore := testutil.ToFloat64(informer.ListExpired.WithLabelValues("Widget"))
	goneBefore := testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "gone"))
	startOperator(t, proxy.Config(), operator.Options{
		Modules: []string{testwasm.BuildFile(t, "./widget")}, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		Informers:                    informer.Options{PageSize: 2}, // 5 Widgets: three pages, two continue tokens
		SkipControllerNameValidation: true,
	})
	for i := 0; i < n; i++ {
		waitSummary(t, direct, fmt.Sprintf("w%d", i), fmt.Sprintf("%d x grey", i))
	}
	// A change after the faults is seen too.
	if err := direct.Create(ctx, widget("late", 9)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, direct, "late", "9 x grey")

	if serverError.Hits() != 1 || expired.Hits() != 1 || gone.Hits() != 1 {
		t.Fatalf("faults not all injected: 500 %d, expired %d, gone %d\n%s", serverError.Hits(), expired.Hits(), gone.Hits(), strings.Join(proxy.Requests(), "\n"))
	}
	if got := testutil.ToFloat64(informer.ListExpired.WithLabelValues("Widget")) - expiredBefore; got != 1 {
		t.Errorf("expired continue tokens counted: %v, want 1", got)
	}
	if got := testutil.ToFloat64(informer.WatchRestarts.WithLabelValues("Widget", "gone")) - goneBefore; got < 1 {
		t.Errorf("watch restarts for gone counted: %v, want >= 1", got)
	}
}
