// Package operator wires modules, the engine and controller-runtime into one
// runnable operator. cmd/operator is a thin flag layer over it.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/moduledir"
	"github.com/wasmreconcile/wasmreconcile/host/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/supervisor"
)

// Options configure an Operator. Zero fields take the stated defaults.
type Options struct {
	// Modules are paths of .wasm files to load; each module's manifest names
	// it. A path may pin the file's bytes: "widget.wasm@sha256:<hex>"; bytes
	// that do not match are refused. A module that fails to load is reported by LoadErrors and logged;
	// the others still run.
	Modules []string

	// ModuleDir is a directory of .wasm files to load and watch: a file
	// written or replaced there is hot-reloaded, a file removed stops its
	// module. Defaults to "": no directory.
	ModuleDir string

	// ModuleDirSettle is how long a file in ModuleDir must see no write
	// before it is loaded. Defaults to moduledir.Settle (100 ms).
	ModuleDirSettle time.Duration

	// KeepVersions is how many versions of each module stay compiled, so
	// that rolling back to one is instant. Defaults to 3.
	KeepVersions int

	// InterpreterFirst serves new module bytes from wazero's interpreter
	// while the compiler works, then switches to the compiled code (see
	// supervisor.Options.Interpreter). Defaults to false.
	InterpreterFirst bool

	// LeaderElection makes replicas elect one leader through a
	// coordination.k8s.io Lease; only the leader runs module controllers
	// and the ReconcileModule controller. Every replica keeps its caches
	// warm and its modules loaded, so a takeover starts reconciling at once.
	// Defaults to false.
	LeaderElection bool

	// LeaderElectionID names the Lease. Defaults to "wasmreconcile-operator".
	LeaderElectionID string

	// LeaderElectionNamespace holds the Lease. Defaults to the namespace the
	// operator runs in (in-cluster), else "default".
	LeaderElectionNamespace string

	// LeaseDuration, RenewDeadline and RetryPeriod tune the election; zero
	// takes controller-runtime's defaults (15 s, 10 s, 2 s). A takeover after
	// a crash takes up to LeaseDuration.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// ReconcileModules runs the modules declared by ReconcileModule objects
	// (config/crd), and needs that CRD installed. Defaults to false.
	ReconcileModules bool

	// ModuleController configures how ReconcileModules are fetched and
	// reported; see modulecontroller.Options for the defaults.
	ModuleController modulecontroller.Options

	// Limits apply to every module. Zero fields take the module's manifest
	// defaults, then the engine's.
	Limits engine.Limits

	// ModuleConfig is the configuration passed to each module, by module
	// name, as Request.Config; a ReconcileModule's spec.config takes its
	// place. Defaults to none.
	ModuleConfig map[string]map[string]any

	// CompilationCacheDir persists compiled modules across restarts.
	// Defaults to "" (in memory only).
	CompilationCacheDir string

	// MetricsBindAddress serves Prometheus metrics. "0" disables it.
	// Defaults to ":8080".
	MetricsBindAddress string

	// HealthProbeBindAddress serves /healthz and /readyz. "0" disables it.
	// /readyz answers 503 until every informer cache has synced.
	// Defaults to ":8081".
	HealthProbeBindAddress string

	// PprofBindAddress serves net/http/pprof. Defaults to "": disabled.
	PprofBindAddress string

	// Informers configure list pagination, timeouts and WatchList; zero
	// fields take package informer's defaults.
	Informers informer.Options

	// Storm configures reconcile-storm damping for every module; zero
	// fields take reconciler.StormOptions' defaults.
	Storm reconciler.StormOptions

	// RateLimit configures every module's workqueue rate limiter; zero
	// fields take controller-runtime's defaults (see package ratelimit).
	RateLimit ratelimit.Options

	// MaxConcurrentReconciles per module. Defaults to the module's
	// MaxInstances, so no worker waits for an instance.
	MaxConcurrentReconciles int

	// QuiescentAfter is how long a converged module must write nothing to
	// be reported quiescent. Defaults to 1 minute.
	QuiescentAfter time.Duration

	// SkipControllerNameValidation allows several operators with modules of
	// the same name in one process (tests). controller-runtime otherwise
	// refuses a second controller of a name, because their metrics would
	// mix. Defaults to false.
	SkipControllerNameValidation bool
}

// Operator runs a set of modules against one cluster.
type Operator struct {
	mgr         manager.Manager
	engine      *engine.Engine
	interpreter *engine.Engine // nil unless InterpreterFirst
	supervisor  *supervisor.Supervisor
	loadErrors  []error

	mu          sync.Mutex
	fileModules map[string]string // path -> module name, for files applied
}

// New loads the modules in opts and registers a controller for each one with
// a new manager for cfg. It fails only on errors that stop the operator as a
// whole (a bad config, an unusable cache directory); module load failures are
// collected in LoadErrors.
func New(ctx context.Context, cfg *rest.Config, opts Options) (*Operator, error) {
	if opts.MetricsBindAddress == "" {
		opts.MetricsBindAddress = ":8080"
	}
	if opts.HealthProbeBindAddress == "" {
		opts.HealthProbeBindAddress = ":8081"
	}
	log := ctrl.Log.WithName("operator")
	if opts.LeaderElectionID == "" {
		opts.LeaderElectionID = "wasmreconcile-operator"
	}
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = "default"
		if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			opts.LeaderElectionNamespace = strings.TrimSpace(string(ns))
		}
	}
	optional := func(d time.Duration) *time.Duration {
		if d <= 0 {
			return nil
		}
		return &d
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        opts.LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		LeaseDuration:           optional(opts.LeaseDuration),
		RenewDeadline:           optional(opts.RenewDeadline),
		RetryPeriod:             optional(opts.RetryPeriod),
		// Release the Lease on a clean shutdown, so the next leader takes
		// over at once instead of after LeaseDuration.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		PprofBindAddress:              opts.PprofBindAddress,
		Cache:                         cache.Options{NewInformer: informer.NewInformerFunc(opts.Informers)},
		// Modules' objects are unstructured, which controller-runtime's
		// client reads live from the API server by default. Read them from
		// the informer cache, like everything else.
		Client:     client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Controller: config.Controller{SkipNameValidation: &opts.SkipControllerNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("creating controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	o := &Operator{mgr: mgr, fileModules: map[string]string{}}
	if err := mgr.AddReadyzCheck("informers-synced", func(*http.Request) error { return o.Ready() }); err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Options{CompilationCacheDir: opts.CompilationCacheDir})
	if err != nil {
		return nil, err
	}
	o.engine = eng
	if opts.InterpreterFirst {
		if o.interpreter, err = engine.New(engine.Options{Interpreter: true}); err != nil {
			return nil, err
		}
	}
	o.supervisor = supervisor.New(mgr, eng, supervisor.Options{
		Limits: opts.Limits, Storm: opts.Storm, RateLimit: opts.RateLimit,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles, KeepVersions: opts.KeepVersions,
		ModuleConfig: opts.ModuleConfig, Interpreter: o.interpreter,
	})
	if err := mgr.Add(o.supervisor); err != nil {
		return nil, err
	}
	unknownConfig := map[string]bool{}
	for name := range opts.ModuleConfig {
		unknownConfig[name] = true
	}
	loadAtStart := func(paths []string, hint string) {
		for _, path := range paths {
			name, err := o.applyFile(ctx, path)
			if err != nil {
				log.Error(err, "module not loaded; "+hint, "path", path)
				o.loadErrors = append(o.loadErrors, err)
				continue
			}
			delete(unknownConfig, name)
		}
	}
	loadAtStart(opts.Modules, "the operator keeps running without it")
	if opts.ModuleDir != "" {
		w, err := moduledir.New(opts.ModuleDir, func(ctx context.Context, path string) error {
			_, err := o.applyFile(ctx, path)
			return err
		}, func(path string) {
			o.mu.Lock()
			name, ok := o.fileModules[path]
			delete(o.fileModules, path)
			o.mu.Unlock()
			if ok {
				o.supervisor.Remove(name)
			}
		})
		if err != nil {
			return nil, err
		}
		if opts.ModuleDirSettle > 0 {
			w.SetSettle(opts.ModuleDirSettle)
		}
		loadAtStart(w.Initial(), "fix the file and it is loaded when it changes")
		if err := mgr.Add(w); err != nil {
			return nil, err
		}
	}
	if opts.ReconcileModules {
		if err := modulecontroller.Setup(mgr, o.supervisor, opts.ModuleController); err != nil {
			return nil, err
		}
	}
	quiescentAfter := opts.QuiescentAfter
	if quiescentAfter <= 0 {
		quiescentAfter = time.Minute
	}
	if err := mgr.Add(&lifecycle{
		synced: mgr.GetCache().WaitForCacheSync,
		reconcilers: func() []activityReporter {
			var out []activityReporter
			for _, r := range o.supervisor.Reconcilers() {
				out = append(out, r)
			}
			return out
		},
		quiescentAfter: quiescentAfter, interval: 2 * time.Second,
	}); err != nil {
		return nil, err
	}
	for name := range unknownConfig {
		log.Info("configuration given for a module that is not loaded; check the module name in --module-config", "module", name)
	}
	return o, nil
}

// applyFile loads or reloads the module in arg, a path optionally followed
// by "@sha256:<hex>", and returns the module's name. The supervisor verifies
// the pin, and refuses a second file of the same module name.
func (o *Operator) applyFile(ctx context.Context, arg string) (string, error) {
	path, pin, _ := strings.Cut(arg, "@sha256:")
	wasm, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("module file %s: %w; check the path passed to --module or --module-dir", path, err)
	}
	o.mu.Lock()
	name := o.fileModules[path] // "" for a new file: the manifest names it
	o.mu.Unlock()
	loaded, err := o.supervisor.Apply(ctx, supervisor.Spec{Name: name, Source: path, Wasm: wasm, SHA256: pin, Owner: "a file " + path})
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	o.fileModules[path] = loaded.Name
	o.mu.Unlock()
	f := loaded.Module.Manifest().For
	ctrl.Log.WithName("operator").Info("module loaded", "module", loaded.Name, "path", path, "digest", loaded.Digest,
		"for", f.Group+"/"+f.Version+"/"+f.Kind, "bytes", len(wasm), "compile", loaded.Compile.String())
	return loaded.Name, nil
}

// Ready reports whether every informer cache has synced; /readyz serves it.
// It returns an error before the manager has started and while caches sync.
func (o *Operator) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if !o.mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("informer caches have not synced yet")
	}
	return nil
}

// Modules are the modules serving now.
func (o *Operator) Modules() []*engine.Module {
	var out []*engine.Module
	for _, r := range o.supervisor.Reconcilers() {
		out = append(out, r.Module())
	}
	return out
}

// Supervisor runs the module controllers; Apply and Remove change them.
func (o *Operator) Supervisor() *supervisor.Supervisor { return o.supervisor }

// LoadErrors are the errors of modules that failed to load.
func (o *Operator) LoadErrors() []error { return o.loadErrors }

// Manager is the underlying controller-runtime manager.
func (o *Operator) Manager() manager.Manager { return o.mgr }

// Start runs the operator until ctx is done, then closes the modules.
func (o *Operator) Start(ctx context.Context) error {
	err := o.mgr.Start(ctx)
	errs := []error{err, o.supervisor.Close(context.Background()), o.engine.Close(context.Background())}
	if o.interpreter != nil {
		errs = append(errs, o.interpreter.Close(context.Background()))
	}
	return errors.Join(errs...)
}
