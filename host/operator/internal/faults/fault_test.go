package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

const widgetLabel = "Widget.examples.wasmreconcile.io" // the informer metrics' kind label

// TestWatchesSurviveCutConnections runs the operator through a TCP proxy,
// cuts every connection twice, and checks that watches restart (counted by
// reason) and that changes made around the cuts are all reconciled.
func TestWatchesSurviveCutConnections(t *testing.T) {
	e := optest.NewEnv(t)
	viaProxy, proxy := optest.StartBehindProxy(t, e.Cfg)
	reg := prometheus.NewRegistry()
	optest.Start(t, viaProxy, e.OperatorOptions(), operator.Options{Modules: []string{testwasm.BuildFile(t, "./widget")}, Registerer: reg})
	ctx := context.Background()
	if err := e.C.Create(ctx, optest.Widget(e.NS, "before", 1)); err != nil { // the test's own client bypasses the proxy
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "before", "1 x grey")
	restarts := func() float64 {
		return optest.Gather(t, reg, "wasmreconcile_informer_watch_restarts_total", map[string]string{"kind": widgetLabel})
	}
	base := restarts()
	for round, size := range []int64{2, 3} {
		if n := proxy.Cut(); n == 0 {
			t.Fatalf("round %d: no connection to cut", round)
		}
		// Changes while the watch is down must not be lost.
		optest.UpdateWidgetSize(t, e.C, e.NS, "before", size)
		optest.WaitSummary(t, e.C, e.NS, "before", fmt.Sprintf("%d x grey", size))
	}
	if err := e.C.Create(ctx, optest.Widget(e.NS, "after", 7)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "after", "7 x grey")
	if got := restarts() - base; got < 2 {
		t.Errorf("watch restarts counted: %v, want at least 2 (one per cut)", got)
	}
}

// TestSlowAPIServer adds latency to every API server response past the list
// timeout: initial lists time out, so the operator is not ready and
// reconciles nothing; when the latency is lifted it syncs and converges.
func TestSlowAPIServer(t *testing.T) {
	e := optest.NewEnv(t)
	viaProxy, proxy := optest.StartBehindProxy(t, e.Cfg)
	ctx := context.Background()
	if err := e.C.Create(ctx, optest.Widget(e.NS, "patient", 5)); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(3 * time.Second) // every response, past the 1 s list timeout below
	mo := e.OperatorOptions()
	mo.Informers = informer.Options{ListTimeout: time.Second}
	reg := prometheus.NewRegistry()
	op := optest.Start(t, viaProxy, mo, operator.Options{Modules: []string{testwasm.BuildFile(t, "./widget")}, Registerer: reg})
	// A positive barrier: two whole lists of Widgets have ended (each
	// timed out), so the operator has had its chances to sync.
	deadline := time.Now().Add(2 * time.Minute)
	for optest.Gather(t, reg, "wasmreconcile_informer_list_duration_seconds", map[string]string{"kind": widgetLabel}) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the operator never tried to list Widgets twice")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := op.Ready(); err == nil {
		t.Error("ready although no list could complete")
	}
	got := optest.Widget(e.NS, "patient", 0)
	if err := e.C.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "status"); found {
		t.Error("reconciled although the cache never synced")
	}
	proxy.SetLatency(0)
	optest.WaitSummary(t, e.C, e.NS, "patient", "5 x grey")
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
	e := optest.NewEnv(t)
	proxy, err := faultproxy.StartHTTP(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close) // runs after the operator stops (cleanups run last-in, first-out)
	ctx := context.Background()
	const n = 5
	for i := 0; i < n; i++ {
		if err := e.C.Create(ctx, optest.Widget(e.NS, fmt.Sprintf("w%d", i), int64(i))); err != nil {
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

	mo := e.OperatorOptions()
	mo.Informers = informer.Options{PageSize: 2} // 5 Widgets: three pages, two continue tokens
	reg := prometheus.NewRegistry()
	optest.Start(t, proxy.Config(), mo, operator.Options{Modules: []string{testwasm.BuildFile(t, "./widget")}, Registerer: reg})
	for i := 0; i < n; i++ {
		optest.WaitSummary(t, e.C, e.NS, fmt.Sprintf("w%d", i), fmt.Sprintf("%d x grey", i))
	}
	// A change after the faults is seen too.
	if err := e.C.Create(ctx, optest.Widget(e.NS, "late", 9)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "late", "9 x grey")

	if serverError.Hits() != 1 || expired.Hits() != 1 || gone.Hits() != 1 {
		t.Fatalf("faults not all injected: 500 %d, expired %d, gone %d\n%s", serverError.Hits(), expired.Hits(), gone.Hits(), strings.Join(proxy.Requests(), "\n"))
	}
	if got := optest.Gather(t, reg, "wasmreconcile_informer_list_expired_total", map[string]string{"kind": widgetLabel}); got != 1 {
		t.Errorf("expired continue tokens counted: %v, want 1", got)
	}
	if got := optest.Gather(t, reg, "wasmreconcile_informer_watch_restarts_total", map[string]string{"kind": widgetLabel, "reason": "gone"}); got < 1 {
		t.Errorf("watch restarts for gone counted: %v, want >= 1", got)
	}
}
