package reconciler_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

var (
	cfg     *rest.Config
	k8s     client.Client
	eng     *engine.Engine
	nsCount atomic.Int32

	widgetGVK = schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	gadgetGVK = schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Gadget"}
)

// TestMain starts one real kube-apiserver and etcd for the package.
func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	env, c, err := testenv.Start("examples/crds", "host/reconciler/testdata")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg = c
	if k8s, err = client.New(cfg, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if eng, err = engine.New(engine.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// run starts a manager with one module's controller and returns a fresh
// namespace for the test's objects.
func run(t *testing.T, pkg string, limits engine.Limits, opts ...reconciler.Options) (string, *engine.Module) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mod, err := eng.Load(ctx, pkg, testwasm.Build(t, pkg), limits)
	if err != nil {
		t.Fatal(err)
	}
	skip := true
	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countStatusWrites{rt} })
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
		Client:     client.Options{Cache: &client.CacheOptions{Unstructured: true}}, // as the operator does
	})
	if err != nil {
		t.Fatal(err)
	}
	var o reconciler.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if _, err := reconciler.SetupWithManager(mgr, mod, o); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		_ = mod.Close(context.Background())
	})
	ns := fmt.Sprintf("t%d-%d", time.Now().Unix()%100000, nsCount.Add(1))
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns, mod
}

// statusWrites counts the requests the managers under test send to a status
// subresource with a writing verb; liveGets counts their GETs of single
// objects, which must all be served by the informer cache instead.
var statusWrites, liveGets atomic.Int64

type countStatusWrites struct{ next http.RoundTripper }

func (c countStatusWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/status") {
		statusWrites.Add(1)
	}
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/namespaces/") && req.URL.Query().Get("watch") == "" &&
		strings.Count(strings.SplitN(req.URL.Path, "/namespaces/", 2)[1], "/") >= 2 {
		liveGets.Add(1) // GET .../namespaces/NS/RESOURCE/NAME
	}
	return c.next.RoundTrip(req)
}

func newObject(gvk schema.GroupVersionKind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// eventually polls cond every 50 ms until it returns nil or the timeout ends.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
}

func get(t *testing.T, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

func statusString(u *unstructured.Unstructured, field string) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", field)
	return s
}

func readyCondition(u *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m
		}
	}
	return nil
}

// events lists the events.k8s.io Events regarding the named object.
func events(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func findEvent(t *testing.T, ns, name, typ, reason string) (*eventsv1.Event, error) {
	for _, e := range events(t, ns, name) {
		if e.Type == typ && e.Reason == reason {
			return &e, nil
		}
	}
	return nil, fmt.Errorf("no %s event with reason %s on %s/%s", typ, reason, ns, name)
}

// reconcileTotal reads controller_runtime_reconcile_total for a controller.
func reconcileTotal(t *testing.T, controller string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

func TestGuestComputesStatusAndFollowsSpec(t *testing.T) {
	ns, _ := run(t, "./widget", engine.Limits{})
	ctx := context.Background()
	w := newObject(widgetGVK, ns, "w1", map[string]any{"size": int64(3), "color": "blue"})
	if err := k8s.Create(ctx, w); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "status from the guest", func() error {
		u := get(t, widgetGVK, ns, "w1")
		if got := statusString(u, "summary"); got != "3 x blue" {
			return fmt.Errorf("summary %q", got)
		}
		if gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); gen != u.GetGeneration() {
			return fmt.Errorf("observedGeneration %d, generation %d", gen, u.GetGeneration())
		}
		if c := readyCondition(u); c == nil || c["status"] != "True" || c["reason"] != "Reconciled" {
			return fmt.Errorf("Ready condition %v", c)
		}
		return nil
	})

	// A spec change makes the status follow.
	u := get(t, widgetGVK, ns, "w1")
	if err := unstructured.SetNestedField(u.Object, int64(7), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "status to follow the spec", func() error {
		u := get(t, widgetGVK, ns, "w1")
		gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if got := statusString(u, "summary"); got != "7 x blue" || gen != 2 {
			return fmt.Errorf("summary %q observedGeneration %d", got, gen)
		}
		return nil
	})

	// An invalid spec gives Ready=False, a Warning Event and no retry storm.
	u = get(t, widgetGVK, ns, "w1")
	if err := unstructured.SetNestedField(u.Object, int64(1000), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Ready=False and a Warning Event", func() error {
		u := get(t, widgetGVK, ns, "w1")
		if c := readyCondition(u); c == nil || c["status"] != "False" || c["reason"] != "InvalidSpec" {
			return fmt.Errorf("Ready condition %v", c)
		}
		e, err := findEvent(t, ns, "w1", corev1.EventTypeWarning, reconciler.ReasonReconcileFailed)
		if err != nil {
			return err
		}
		if !strings.Contains(e.Note, "spec.size 1000 is outside 0..100") {
			return fmt.Errorf("event note %q", e.Note)
		}
		return nil
	})
}

func TestUnchangedStatusIsNotWritten(t *testing.T) {
	ns, mod := run(t, "./widget", engine.Limits{})
	ctx := context.Background()
	if err := k8s.Create(ctx, newObject(widgetGVK, ns, "w2", map[string]any{"size": int64(1)})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "first status", func() error {
		if got := statusString(get(t, widgetGVK, ns, "w2"), "summary"); got != "1 x grey" {
			return fmt.Errorf("summary %q", got)
		}
		return nil
	})
	// Let the reconcile triggered by our own status write finish.
	time.Sleep(500 * time.Millisecond)

	// Touch metadata: the object is reconciled again, the guest computes the
	// same status, and the host must not write it.
	before := reconcileTotal(t, mod.Name())
	writesBefore := statusWrites.Load()
	if writesBefore == 0 {
		t.Fatal("no status write was counted for the first status; the counter is broken")
	}
	u := get(t, widgetGVK, ns, "w2")
	u.SetAnnotations(map[string]string{"touched": "yes"})
	if err := k8s.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	rv := u.GetResourceVersion()
	eventually(t, 30*time.Second, "a reconcile after the annotation", func() error {
		if after := reconcileTotal(t, mod.Name()); after <= before {
			return fmt.Errorf("reconcile_total still %v", after)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if n := statusWrites.Load() - writesBefore; n != 0 {
		t.Fatalf("%d status write(s) sent for an unchanged status", n)
	}
	if got := get(t, widgetGVK, ns, "w2").GetResourceVersion(); got != rv {
		t.Fatalf("resourceVersion moved from %s to %s: an unchanged status was written", rv, got)
	}
	if n := liveGets.Load(); n != 0 {
		t.Fatalf("the reconciler made %d live GETs; objects must be read from the informer cache", n)
	}
}

func TestGuestErrorGivesWarningEventAndRetry(t *testing.T) {
	ns, _ := run(t, "./internal/testguests/misbehave", engine.Limits{})
	ctx := context.Background()
	if err := k8s.Create(ctx, newObject(gadgetGVK, ns, "flaky", map[string]any{"mode": "flaky", "failAttempts": int64(3)})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "recovery after retries", func() error {
		u := get(t, gadgetGVK, ns, "flaky")
		attempts, _, _ := unstructured.NestedInt64(u.Object, "status", "attempts")
		if statusString(u, "summary") != "recovered" || attempts != 3 {
			return fmt.Errorf("status %v", u.Object["status"])
		}
		return nil
	})
	e, err := findEvent(t, ns, "flaky", corev1.EventTypeWarning, reconciler.ReasonReconcileFailed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Note, "fails on purpose") {
		t.Errorf("event note %q", e.Note)
	}
}

func TestDeadlineExceededGivesWarningEvent(t *testing.T) {
	deadlineBefore := metricValue(t, "wasmreconcile_preemptions_total", map[string]string{"module": "misbehave", "reason": "deadline"})
	defer func() {
		if metricValue(t, "wasmreconcile_preemptions_total", map[string]string{"module": "misbehave", "reason": "deadline"}) <= deadlineBefore {
			t.Error("the deadline preemption was not counted")
		}
	}()
	ns, _ := run(t, "./internal/testguests/misbehave", engine.Limits{Fuel: 1 << 50, Timeout: 200 * time.Millisecond})
	if err := k8s.Create(context.Background(), newObject(gadgetGVK, ns, "spin", map[string]any{"mode": "spin"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a DeadlineExceeded event", func() error {
		e, err := findEvent(t, ns, "spin", corev1.EventTypeWarning, reconciler.ReasonDeadlineExceeded)
		if err != nil {
			return err
		}
		if !strings.Contains(e.Note, "module[misbehave]") || !strings.Contains(e.Note, "raise spec.limits.timeout") {
			return fmt.Errorf("event note %q", e.Note)
		}
		return nil
	})
}

func TestGuestEventsAreRecorded(t *testing.T) {
	ns, _ := run(t, "./internal/testguests/misbehave", engine.Limits{})
	if err := k8s.Create(context.Background(), newObject(gadgetGVK, ns, "ev", map[string]any{"mode": "events"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "guest events", func() error {
		if _, err := findEvent(t, ns, "ev", corev1.EventTypeNormal, "Hello"); err != nil {
			return err
		}
		_, err := findEvent(t, ns, "ev", corev1.EventTypeWarning, "Careful")
		return err
	})
}

// metricValue reads a counter or gauge, or a histogram's sample count, from
// controller-runtime's registry; labels must match exactly those given.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1 // absent
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	w := map[string]string{"module": "widget"}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{"module": "widget"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	before := map[string]float64{
		"success": metricValue(t, "wasmreconcile_reconcile_total", with(map[string]string{"result": "success"})),
		"fuel":    metricValue(t, "wasmreconcile_fuel_used", w),
		"dur":     metricValue(t, "wasmreconcile_guest_duration_seconds", w),
		"writes":  metricValue(t, "wasmreconcile_status_writes_total", w),
	}
	ns, mod := run(t, "./widget", engine.Limits{})
	if v := metricValue(t, "wasmreconcile_module_info", map[string]string{"module": "widget", "digest": mod.Digest()}); v != 1 {
		t.Errorf("module_info = %v", v)
	}
	if v := metricValue(t, "wasmreconcile_reconcile_total", with(map[string]string{"result": "trap"})); v < 0 {
		t.Error("label sets are not pre-initialised")
	}
	if err := k8s.Create(ctx, newObject(widgetGVK, ns, "m", map[string]any{"size": int64(2)})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "widget metrics", func() error {
		for key, name := range map[string]string{"fuel": "wasmreconcile_fuel_used", "dur": "wasmreconcile_guest_duration_seconds", "writes": "wasmreconcile_status_writes_total"} {
			if metricValue(t, name, w) <= before[key] {
				return fmt.Errorf("%s did not grow", name)
			}
		}
		if metricValue(t, "wasmreconcile_reconcile_total", with(map[string]string{"result": "success"})) <= before["success"] {
			return fmt.Errorf("no successful reconcile counted")
		}
		if metricValue(t, "wasmreconcile_instances", with(map[string]string{"state": "live"})) < 1 {
			return fmt.Errorf("no live instance reported")
		}
		return nil
	})

	// Preemptions, by reason, and the matching results.
	mb := func(extra map[string]string) map[string]string {
		out := map[string]string{"module": "misbehave"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	fuelBefore := metricValue(t, "wasmreconcile_preemptions_total", mb(map[string]string{"reason": "fuel"}))
	exhaustedBefore := metricValue(t, "wasmreconcile_reconcile_total", mb(map[string]string{"result": "fuel_exhausted"}))
	ns2, _ := run(t, "./internal/testguests/misbehave", engine.Limits{Fuel: 5_000_000})
	if err := k8s.Create(ctx, newObject(gadgetGVK, ns2, "spin", map[string]any{"mode": "spin"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a fuel preemption counted", func() error {
		if metricValue(t, "wasmreconcile_preemptions_total", mb(map[string]string{"reason": "fuel"})) <= fuelBefore {
			return fmt.Errorf("no fuel preemption")
		}
		if metricValue(t, "wasmreconcile_reconcile_total", mb(map[string]string{"result": "fuel_exhausted"})) <= exhaustedBefore {
			return fmt.Errorf("no fuel_exhausted result")
		}
		return nil
	})
}

func TestModuleConfigReachesTheGuest(t *testing.T) {
	ns, _ := run(t, "./internal/testguests/misbehave", engine.Limits{}, reconciler.Options{Config: map[string]any{"region": "eu", "replicas": 3.0}})
	if err := k8s.Create(context.Background(), newObject(gadgetGVK, ns, "cfg", map[string]any{"mode": "config"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the config in the status", func() error {
		cfg, _, _ := unstructured.NestedMap(get(t, gadgetGVK, ns, "cfg").Object, "status", "config")
		if cfg["region"] != "eu" || cfg["replicas"] != int64(3) {
			return fmt.Errorf("status.config = %v", cfg)
		}
		return nil
	})
}

// TestReconcileStormIsDamped churns an annotation (each change reconciles
// the object, and nothing changes), expects a ReconcileStorm Event and
// damping, then changes the spec and expects the object to resume at once.
func TestReconcileStormIsDamped(t *testing.T) {
	ctx := context.Background()
	mb := map[string]string{"module": "misbehave"}
	storms := max(0, metricValue(t, "wasmreconcile_storms_detected_total", mb)) // -1 before the module is tracked
	damped := max(0, metricValue(t, "wasmreconcile_reconciles_damped_total", mb))
	ns, _ := run(t, "./internal/testguests/misbehave", engine.Limits{},
		reconciler.Options{Storm: reconciler.StormOptions{Threshold: 5, Window: time.Minute, Backoff: 10 * time.Minute}})
	if err := k8s.Create(ctx, newObject(gadgetGVK, ns, "churn", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "first status", func() error {
		if statusString(get(t, gadgetGVK, ns, "churn"), "summary") != "ok" {
			return fmt.Errorf("no status yet")
		}
		return nil
	})
	churn := func(i int) {
		u := get(t, gadgetGVK, ns, "churn")
		u.SetAnnotations(map[string]string{"churn": fmt.Sprint(i)})
		if err := k8s.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		churn(i)
	}
	eventually(t, 30*time.Second, "a ReconcileStorm event", func() error {
		_, err := findEvent(t, ns, "churn", corev1.EventTypeWarning, reconciler.ReasonReconcileStorm)
		return err
	})
	if metricValue(t, "wasmreconcile_storms_detected_total", mb) != storms+1 {
		t.Error("storm not counted")
	}
	calls := metricValue(t, "wasmreconcile_reconcile_total", map[string]string{"module": "misbehave", "result": "success"})
	for i := 10; i < 20; i++ {
		churn(i)
	}
	eventually(t, 30*time.Second, "damped reconciles", func() error {
		if metricValue(t, "wasmreconcile_reconciles_damped_total", mb) < damped+5 {
			return fmt.Errorf("damped %v", metricValue(t, "wasmreconcile_reconciles_damped_total", mb)-damped)
		}
		return nil
	})
	if extra := metricValue(t, "wasmreconcile_reconcile_total", map[string]string{"module": "misbehave", "result": "success"}) - calls; extra > 0 {
		t.Errorf("the guest was called %v times while quiescent", extra)
	}

	// A new generation resumes at once, long before the 10-minute backoff.
	u := get(t, gadgetGVK, ns, "churn")
	if err := unstructured.SetNestedField(u.Object, "changed", "spec", "note"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new generation reconciled", func() error {
		u := get(t, gadgetGVK, ns, "churn")
		if gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); gen != u.GetGeneration() {
			return fmt.Errorf("observedGeneration %d, generation %d", gen, u.GetGeneration())
		}
		return nil
	})
}
