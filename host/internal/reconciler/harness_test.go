package reconciler_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/statusapply"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

var (
	widgetGVK = schema.GroupVersionKind{Group: "examples.wasmreconcile.io", Version: "v1alpha1", Kind: "Widget"}
	gadgetGVK = schema.GroupVersionKind{Group: "test.wasmreconcile.io", Version: "v1", Kind: "Gadget"}
)

// eng loads every test's modules: one engine, so that each module is
// compiled once for the package (compiling is seconds under -race).
var eng *engine.Engine

// TestMain shares one real kube-apiserver and etcd among the package's
// tests; each test works in a namespace of its own.
func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	// A compilation cache on disk: the engine frees a module's code when
	// its last module closes, and every test closes its module, so without
	// it each test would compile the same guest again (seconds under -race).
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Guests compile in the compile worker, a build without -race
	// (testworker), several times faster than in this process.
	if err := testworker.Use(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, err := engine.SelfCompileWorker()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if eng, err = engine.New(engine.Options{CompilationCacheDir: dir, Compile: engine.CompileOptions{Worker: w}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.Main(m, testenv.MainOptions{})
	_ = eng.Close(context.Background())
	testshare.Cleanup()
	os.Exit(code)
}

// harness is one module's controller, running in a manager of its own that
// sees only the test's namespace, with its own metrics registry.
type harness struct {
	t       *testing.T
	ns      string
	k8s     client.Client // the test's own client: live reads, no cache
	cached  client.Reader // the manager's: reads from the reconciler's cache
	module  *engine.Module
	rec     *reconciler.Reconciler
	metrics *metrics.Metrics
	reg     *prometheus.Registry

	mu           sync.Mutex
	statusWrites map[string]int // by object name
	liveGets     int
}

type runOptions struct {
	limits  engine.Limits
	rec     reconciler.Options // Config, Storm, Log
	workers int
	// recorder, when set, wraps the manager's Event recorder.
	recorder func(recorder.EventRecorder) recorder.EventRecorder
	// writer, when set, wraps the client the reconciler writes with.
	writer func(client.Client) client.Client
	// requeue, when set, is the controller's Requeue channel (RequeueAll).
	requeue chan event.GenericEvent
}

// run starts pkg's module in a fresh namespace and returns the harness.
func run(t *testing.T, pkg string, ro runOptions) *harness {
	t.Helper()
	cp := testenv.Shared(t)
	k8s, err := client.New(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, k8s: k8s, reg: prometheus.NewRegistry(), statusWrites: map[string]int{}}
	h.ns = testenv.Namespace(t, k8s)
	ctx, cancel := context.WithCancel(context.Background())
	if h.module, err = eng.Load(ctx, pkg, testwasm.Build(t, pkg), ro.limits); err != nil {
		t.Fatal(err)
	}
	if h.metrics, err = metrics.New(h.reg); err != nil {
		t.Fatal(err)
	}
	skip := true
	mgrCfg := rest.CopyConfig(cp.Config)
	mgrCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{h, rt} })
	// The cache as the operator has it (operator.New): its own HTTP client
	// and informers, objects decoded straight into packed ones.
	cacheHTTP, err := informer.HTTPClient(mgrCfg)
	if err != nil {
		t.Fatal(err)
	}
	informers, err := informer.New(informer.Options{Packed: true, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
		// Packed objects and unstructured reads, as the operator has them.
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{h.ns: {}}, DefaultTransform: packed.Transform(nil),
			HTTPClient: cacheHTTP, NewInformer: informers.NewInformer},
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.cached = mgr.GetClient()
	o := ro.rec
	o.Slot, o.Client, o.Recorder, o.Metrics = versionslot.NewSlot(versionslot.New(h.module)), mgr.GetClient(), mgr.GetEventRecorder("test/"+h.module.Name()), h.metrics
	o.Scopes = protocol.MapperScopes(mgr.GetRESTMapper())
	if ro.recorder != nil {
		o.Recorder = ro.recorder(o.Recorder)
	}
	if ro.writer != nil {
		o.Writer = ro.writer(o.Client)
	} else {
		// As the operator writes statuses (package supervisor).
		o.StatusApplier = statusapply.New(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetRESTMapper())
	}
	if h.rec, err = reconciler.New(o); err != nil {
		t.Fatal(err)
	}
	copts := reconciler.ControllerOptions{MaxConcurrentReconciles: ro.workers}
	if ro.requeue != nil {
		copts.Requeue = ro.requeue
	}
	c, err := h.rec.NewController(mgr, copts)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		_ = h.module.Close(context.Background())
	})
	return h
}

// counting counts the manager's writes to status subresources, by object,
// and its GETs of single objects, which must all be served by the informer
// cache instead.
type counting struct {
	h    *harness
	next http.RoundTripper
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	if req.Method != http.MethodGet && strings.HasSuffix(path, "/status") {
		parts := strings.Split(strings.TrimSuffix(path, "/status"), "/")
		c.h.mu.Lock()
		c.h.statusWrites[parts[len(parts)-1]]++
		c.h.mu.Unlock()
	}
	if req.Method == http.MethodGet && strings.Contains(path, "/namespaces/") && req.URL.Query().Get("watch") == "" &&
		strings.Count(strings.SplitN(path, "/namespaces/", 2)[1], "/") >= 2 {
		c.h.mu.Lock()
		c.h.liveGets++ // GET .../namespaces/NS/RESOURCE/NAME
		c.h.mu.Unlock()
	}
	return c.next.RoundTrip(req)
}

func (h *harness) writes(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statusWrites[name]
}

func newObject(gvk schema.GroupVersionKind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func (h *harness) create(gvk schema.GroupVersionKind, name string, spec map[string]any) {
	h.t.Helper()
	if err := h.k8s.Create(context.Background(), newObject(gvk, h.ns, name, spec)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) get(gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: name}, u); err != nil {
		h.t.Fatal(err)
	}
	return u
}

// update changes an object's spec field, retrying on conflicts.
func (h *harness) update(gvk schema.GroupVersionKind, name string, mutate func(u *unstructured.Unstructured)) {
	h.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(h.ns)
	u.SetName(name)
	testenv.Update(h.t, h.k8s, u, func() { mutate(u) })
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
func (h *harness) events(name string) []eventsv1.Event {
	h.t.Helper()
	var list eventsv1.EventList
	if err := h.k8s.List(context.Background(), &list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func (h *harness) findEvent(name, typ, reason string) (*eventsv1.Event, error) {
	for _, e := range h.events(name) {
		if e.Type == typ && e.Reason == reason {
			return &e, nil
		}
	}
	return nil, fmt.Errorf("no %s event with reason %s on %s/%s", typ, reason, h.ns, name)
}

func (h *harness) metric(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// samples sums the sample counts of a histogram vector's series.
func samples(t *testing.T, c prometheus.Collector) uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}
