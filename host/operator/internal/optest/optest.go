// Package optest is what host/operator's test packages share: a TestMain
// that starts one control plane per test binary, an Env per test (its own
// namespace), operators wired to the shared compilation cache and compile
// worker, and waits on the example Widgets. The tests are split by how
// they must run: host/operator holds those isolated by namespace, which run
// in parallel; host/operator/internal/clusterscoped those that create
// cluster-scoped objects (ReconcileModules, CRDs, ClusterRoles);
// host/operator/internal/faults those that break the control plane; and
// host/operator/internal/wholeprocess those that measure the process.
package optest

import (
	"context"
	"maps"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/testhooks"
	"github.com/wasmreconcile/wasmreconcile/internal/testshare"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
	"github.com/wasmreconcile/wasmreconcile/internal/testworker"
)

// Main runs a test package of the operator: it builds the compile worker
// (a build of its own, since the test binary may be -race), installs a
// development logger (a failure shows what the operator was doing, and
// client-go's reflectors log through klog), builds the widget module for
// the embedding Example, and runs the tests against one shared control
// plane (testenv.Main with opts). Call it from
// TestMain as os.Exit(optest.Main(m, testenv.MainOptions{})).
func Main(m *testing.M, opts testenv.MainOptions) int {
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
	if err := testworker.Use(); err != nil {
		logger.Error(err, "building the compile worker")
		return 1
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	if os.Getenv("WASMRECONCILE_EXAMPLE_WIDGET") == "" {
		// The embedding Example loads the widget module from this file.
		path, err := testwasm.BuildPath("./widget")
		if err != nil {
			logger.Error(err, "building the widget module")
			return 1
		}
		os.Setenv("WASMRECONCILE_EXAMPLE_WIDGET", path)
	}
	dir, err := testshare.CompilationCacheDir()
	if err != nil {
		logger.Error(err, "creating the compilation cache")
		return 1
	}
	compilationCache = dir
	code := testenv.Main(m, opts)
	testshare.Cleanup()
	return code
}

// compilationCache keeps compiled modules for every operator of a test
// binary, so that each module is compiled once (compiling is seconds under
// -race) rather than once per operator. Main sets it, from testshare: the
// directory is shared by every package of one make test.
var compilationCache string

// CompilationCache returns the directory of compiled modules the tests'
// operators share (Options.Engine.CompilationCacheDir), set by Main.
func CompilationCache() string { return compilationCache }

// Env is what a test works with: the shared control plane's config, a
// client that reads live (no cache), and the test's namespace.
type Env struct {
	Cfg *rest.Config
	C   client.Client
	NS  string
}

// NewEnv returns the test's Env: a namespace of its own on the shared
// control plane (deleted when the test ends), and a live client.
func NewEnv(t *testing.T) Env {
	t.Helper()
	cfg := testenv.Shared(t).Config
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return Env{Cfg: cfg, C: c, NS: testenv.Namespace(t, c)}
}

// OperatorOptions are the manager options of a test's operator: no
// endpoints, and only the test's namespace.
func (e Env) OperatorOptions() operator.ManagerOptions {
	return operator.ManagerOptions{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
		Namespaces: []string{e.NS},
	}
}

// NewOperator is operator.New with the tests' defaults: the shared
// compilation cache, and guests compiled in the compile worker, a build
// without -race (testworker), as the operator binary compiles them: several
// times faster than in this -race process. A test that sets Compile or a
// MemoryBudget keeps its own.
func NewOperator(t testing.TB, cfg *rest.Config, mo operator.ManagerOptions, opts operator.Options) (*operator.Operator, error) {
	t.Helper()
	if opts.Engine.CompilationCacheDir == "" {
		opts.Engine.CompilationCacheDir = compilationCache
	}
	if opts.Engine.Compile == (engine.CompileOptions{}) && opts.Engine.MemoryBudget == 0 {
		w, err := engine.SelfCompileWorker()
		if err != nil {
			t.Fatal(err)
		}
		opts.Engine.Compile.Worker = w
	}
	if mo.GracefulShutdownTimeout == 0 {
		// Under -race on a loaded 2-core machine a compile the stopping
		// operator cannot interrupt outlasts the default 30 s.
		mo.GracefulShutdownTimeout = 2 * time.Minute
	}
	return operator.New(cfg, mo, opts)
}

// Start runs an operator against cfg until the test ends. Its metrics go
// to a registry of the test's own unless opts names one.
func Start(t testing.TB, cfg *rest.Config, mo operator.ManagerOptions, opts operator.Options) *operator.Operator {
	t.Helper()
	op, _ := StartStoppable(t, cfg, mo, opts)
	return op
}

// StartStoppable is Start, and returns stop, which stops the operator as
// a signal would and returns when it has (a later call does nothing).
func StartStoppable(t testing.TB, cfg *rest.Config, mo operator.ManagerOptions, opts operator.Options) (*operator.Operator, func()) {
	t.Helper()
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	op, err := NewOperator(t, cfg, mo, opts)
	if err != nil {
		t.Fatalf("operator.New: %v", err)
	}
	if errs := op.LoadErrors(); len(errs) > 0 {
		t.Fatalf("operator.New: load errors %v", errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("operator: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return op, stop
}

// Gather sums the samples of metric whose labels include every label in
// want, from a registry.
func Gather(t testing.TB, reg prometheus.Gatherer, metric string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
	sample:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue sample
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// StartBehindProxy puts a TCP fault proxy in front of the shared control
// plane and returns a config that goes through it (for the operator).
func StartBehindProxy(t *testing.T, cfg *rest.Config) (viaProxy *rest.Config, proxy *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if proxy, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	viaProxy = rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + proxy.Addr
	return viaProxy, proxy
}

// Widget returns a Widget.
func Widget(ns, name string, size int64) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
	w.SetKind("Widget")
	w.SetNamespace(ns)
	w.SetName(name)
	_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
	return w
}

// SummaryPoll is how often WaitSummary polls; measurements lower it.
var SummaryPoll = 100 * time.Millisecond

// WaitSummary waits until the named Widget's status.summary is want. The
// deadline is generous because CI runs every package under -race at once on
// two cores; it bounds a hang, it is not a latency goal.
func WaitSummary(t testing.TB, c client.Client, ns, name, want string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for {
		w := Widget(ns, name, 0)
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), w); err == nil {
			if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached summary %q in %s", name, want, time.Since(start).Round(time.Second))
		}
		time.Sleep(SummaryPoll)
	}
}

// UpdateWidgetSize sets spec.size, retrying on conflicts and on the errors
// a control plane returns while it comes back up.
func UpdateWidgetSize(t testing.TB, c client.Client, ns, name string, size int64) {
	t.Helper()
	w := Widget(ns, name, 0)
	testenv.Update(t, c, w, func() { _ = unstructured.SetNestedField(w.Object, size, "spec", "size") })
}

// FreeAddr returns a loopback address no listener holds now, for an
// endpoint the test starts. A test that needs several calls FreeAddrs:
// two FreeAddr calls may return the same port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrs(t, 1)[0]
}

// FreeAddrs returns n distinct loopback addresses no listener holds now:
// each is held until all are chosen, so the kernel cannot hand one out
// twice (it did: a replica's metrics port went to the other replica's
// health probe, and the first replica exited).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// SummaryOf returns a Widget's status.summary.
func SummaryOf(w *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(w.Object, "status", "summary")
	return s
}

// ModuleStatus is the supervisor's status of module name in op: its
// workqueue length, running reconciles and informer sync.
func ModuleStatus(op *operator.Operator, name string) (supervisor.Status, bool) {
	return testhooks.ModuleStatus(op.Host, name)
}

// ShardActive is the slots op works on, and false when it does not shard.
func ShardActive(op *operator.Operator) ([]int, bool) {
	return testhooks.ShardActive(op.Host)
}

// ShardReport is the sharding line of op's /readyz/modules.
func ShardReport(op *operator.Operator) string { return testhooks.ShardReport(op.Host) }

// ShardAdmitted makes op, a sharding operator, call f with the key of
// every reconcile it admits.
func ShardAdmitted(op *operator.Operator, f func(types.NamespacedName)) {
	testhooks.ShardAdmitted(op.Host, f)
}

// ShardRefused makes op, a sharding operator, call f with the key of
// every reconcile its gate refuses.
func ShardRefused(op *operator.Operator, f func(types.NamespacedName)) {
	testhooks.ShardRefused(op.Host, f)
}

// Seen records, per object, the operators whose shard hook
// (ShardAdmitted, ShardRefused) saw it; an object is named by what by
// picks of its key (ByNamespace, ByName). It is safe for concurrent use.
type Seen struct {
	by   func(types.NamespacedName) string
	mu   sync.Mutex
	seen map[string]map[string]bool
}

// NewSeen returns a Seen naming objects by by.
func NewSeen(by func(types.NamespacedName) string) *Seen {
	return &Seen{by: by, seen: map[string]map[string]bool{}}
}

// ByNamespace names an object by its namespace.
func ByNamespace(k types.NamespacedName) string { return k.Namespace }

// ByName names an object by its name.
func ByName(k types.NamespacedName) string { return k.Name }

// Hook returns the hook that records the keys operator id sees.
func (s *Seen) Hook(id string) func(types.NamespacedName) {
	return func(k types.NamespacedName) {
		s.mu.Lock()
		defer s.mu.Unlock()
		name := s.by(k)
		if s.seen[name] == nil {
			s.seen[name] = map[string]bool{}
		}
		s.seen[name][id] = true
	}
}

// In returns the operators that saw object, as a new map.
func (s *Seen) In(object string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.seen[object])
}

// Clear forgets what was seen.
func (s *Seen) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.seen)
}
