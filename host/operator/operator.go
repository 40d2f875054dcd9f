// Package operator wires modules, the engine and controller-runtime into one
// runnable operator. cmd/operator is a thin flag layer over it.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
	"github.com/wasmreconcile/wasmreconcile/host/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/reconciler"
)

// Options configure an Operator. Zero fields take the stated defaults.
type Options struct {
	// Modules are paths of .wasm files to load. A module that fails to load
	// is reported by LoadErrors and logged; the others still run.
	Modules []string

	// Limits apply to every module. Zero fields take the module's manifest
	// defaults, then the engine's.
	Limits engine.Limits

	// ModuleConfig is the configuration passed to each module, by module
	// name, as Request.Config. Defaults to none.
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
	mgr        manager.Manager
	engine     *engine.Engine
	modules    []*engine.Module
	loadErrors []error
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
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		HealthProbeBindAddress: opts.HealthProbeBindAddress,
		PprofBindAddress:       opts.PprofBindAddress,
		Cache:                  cache.Options{NewInformer: informer.NewInformerFunc(opts.Informers)},
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
	o := &Operator{mgr: mgr}
	if err := mgr.AddReadyzCheck("informers-synced", func(*http.Request) error { return o.Ready() }); err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Options{CompilationCacheDir: opts.CompilationCacheDir})
	if err != nil {
		return nil, err
	}
	o.engine = eng
	var reconcilers []activityReporter
	seen := map[string]string{}
	unknownConfig := map[string]bool{}
	for name := range opts.ModuleConfig {
		unknownConfig[name] = true
	}
	for _, path := range opts.Modules {
		m, err := loadFile(ctx, eng, path, opts.Limits)
		if err == nil {
			if prev, dup := seen[m.Name()]; dup {
				_ = m.Close(ctx)
				err = fmt.Errorf("module[%s] from %s: a module of that name is already loaded from %s; module names must be unique", m.Name(), path, prev)
			}
		}
		if err == nil {
			var rec *reconciler.Reconciler
			rec, err = reconciler.SetupWithManager(mgr, m, reconciler.Options{
				Config: opts.ModuleConfig[m.Name()], Storm: opts.Storm,
				RateLimiter: ratelimit.New(opts.RateLimit), MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			})
			if err != nil {
				_ = m.Close(ctx)
			} else {
				reconcilers = append(reconcilers, rec)
			}
		}
		if err != nil {
			log.Error(err, "module not loaded; the operator keeps running without it", "path", path)
			o.loadErrors = append(o.loadErrors, err)
			continue
		}
		seen[m.Name()] = path
		delete(unknownConfig, m.Name())
		o.modules = append(o.modules, m)
		f := m.Manifest().For
		log.Info("module loaded", "module", m.Name(), "path", path, "digest", m.Digest(),
			"for", f.Group+"/"+f.Version+"/"+f.Kind, "bytes", m.Size())
	}
	quiescentAfter := opts.QuiescentAfter
	if quiescentAfter <= 0 {
		quiescentAfter = time.Minute
	}
	if err := mgr.Add(&lifecycle{
		synced:      mgr.GetCache().WaitForCacheSync,
		reconcilers: reconcilers, quiescentAfter: quiescentAfter, interval: 2 * time.Second,
	}); err != nil {
		return nil, err
	}
	for name := range unknownConfig {
		log.Info("configuration given for a module that is not loaded; check the module name in --module-config", "module", name)
	}
	return o, nil
}

func loadFile(ctx context.Context, eng *engine.Engine, path string, limits engine.Limits) (*engine.Module, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("module file %s: %w; check the path passed to --module", path, err)
	}
	return eng.Load(ctx, filepath.Base(path), wasm, limits)
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

// Modules are the modules that loaded.
func (o *Operator) Modules() []*engine.Module { return o.modules }

// LoadErrors are the errors of modules that failed to load.
func (o *Operator) LoadErrors() []error { return o.loadErrors }

// Manager is the underlying controller-runtime manager.
func (o *Operator) Manager() manager.Manager { return o.mgr }

// Start runs the operator until ctx is done, then closes the modules.
func (o *Operator) Start(ctx context.Context) error {
	err := o.mgr.Start(ctx)
	var errs []error
	for _, m := range o.modules {
		errs = append(errs, m.Close(context.Background()))
	}
	errs = append(errs, o.engine.Close(context.Background()))
	return errors.Join(append([]error{err}, errs...)...)
}
