// Package operator runs wasm reconcile modules in a controller-runtime
// manager. It is the host as a library:
//
//   - Setup adds the host to a manager the caller built and runs, beside
//     the caller's own controllers: module sources, the supervisor that
//     runs one controller per module, the ReconcileModule controller,
//     metrics and a readiness check;
//   - New builds a manager the way the operator binary wants it (the
//     host's paginated informers, unstructured objects read from the cache,
//     leader election, metrics and probe endpoints) and calls Setup. It is
//     what cmd/operator runs.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shadow"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Host runs modules in a manager. Create it with Setup.
type Host struct {
	mgr         manager.Manager
	engine      *engine.Engine
	interpreter *engine.Engine // nil unless InterpreterFirst
	supervisor  *supervisor.Supervisor
	shards      *shards // nil unless Options.Sharding.Enabled
	metrics     *metrics.Metrics
	loadErrors  []error
	log         logr.Logger
	reclaimMu   sync.Mutex
	reclaimDue  bool // reclaimSoon's return is due
	maxBytes    int64
	account     string         // Options.DefaultServiceAccount
	filesYield  bool           // Options.FileModulesYield
	ociOptions  source.Options // of oci:// Modules
	ociCreds    source.Credentials
	ociTimeout  time.Duration
	recorder    *flightrecorder.Recorder // nil when disabled

	started          atomic.Bool // the manager has started the host's runnables
	reconcileModules bool        // Options.ReconcileModules

	mu          sync.Mutex
	fileModules map[string]string // path -> module name, for files applied
	closeOnce   sync.Once
	closeErr    error
}

// Setup adds the host to mgr: it loads opts.Modules now (their failures are
// in LoadErrors, not in the error), and adds to mgr the supervisor that runs
// the module controllers (in the leader only), the ModuleDir watcher, the
// ReconcileModule controller, a readiness check ("wasmreconcile": 503 until
// the manager has started, the ReconcileModule cache has synced and no
// module's caches are still syncing normally; a module unready for a reason
// of its own leaves the host ready, see Ready) and a runnable that closes
// the host when the manager stops. It fails only on errors that stop the host as a whole:
// a bad option, an unusable directory, a missing CRD.
//
// The host reads the objects of its modules' kinds, which are unstructured,
// from mgr's cache, whatever mgr's client does for unstructured objects.
// Lists are paginated and verified only when mgr's cache was built with
// informer.Informers (as New does); pass them as opts.Informers.
func Setup(mgr manager.Manager, opts Options) (*Host, error) {
	if opts.Identity.DefaultServiceAccount != "" {
		if _, _, err := authz.ParseServiceAccount(opts.Identity.DefaultServiceAccount); err != nil {
			return nil, fmt.Errorf("the default service account: %w", err)
		}
	}
	if opts.Identity.ServiceAccountNamespace == "" {
		opts.Identity.ServiceAccountNamespace = operatorNamespace()
	}
	identities, err := authz.NewIdentities(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper(),
		authz.Options{AllowedTTL: opts.Identity.AuthorizationTTL, DeniedTTL: opts.Identity.AuthorizationDeniedTTL})
	if err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("wasmreconcile")
	reg := opts.Registerer
	if reg == nil {
		reg = crmetrics.Registry
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	// Objects of module kinds are unstructured, which controller-runtime's
	// client reads live by default. Read them from the cache like
	// everything else.
	c, err := client.New(mgr.GetConfig(), client.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the host's client: %w", err)
	}
	h := &Host{mgr: mgr, metrics: m, log: log, fileModules: map[string]string{}, maxBytes: opts.Sources.MaxBytes, account: opts.Identity.DefaultServiceAccount, filesYield: opts.FileModulesYield,
		ociTimeout: opts.Sources.FetchTimeout,
		ociOptions: source.Options{MaxBytes: opts.Sources.MaxBytes,
			URL: source.URLPolicy{AllowedHosts: opts.Sources.URLAllowedHosts, AllowPrivate: opts.Sources.URLAllowPrivate}}}
	if opts.Sources.CacheDir != "" {
		if h.ociOptions.BlobCache, err = newModuleCache(mgr, opts, m, log); err != nil {
			return nil, err
		}
	}
	if opts.Sources.RegistryConfig != "" {
		h.ociCreds = source.DockerConfigFile(opts.Sources.RegistryConfig)
	}
	var budget *engine.MemoryBudget
	if opts.Engine.MemoryBudget > 0 {
		if budget, err = engine.NewMemoryBudget(opts.Engine.MemoryBudget); err != nil {
			return nil, fmt.Errorf("the guest memory budget: %w", err)
		}
		m.ReportBudget(budget.Stats)
	}
	if h.engine, err = engine.New(engine.Options{CompilationCacheDir: opts.Engine.CompilationCacheDir, CompilationCacheMaxBytes: opts.Engine.CompilationCacheMaxBytes,
		CompilationCachePruned: func(p engine.CachePrune) {
			m.ObserveCachePrune(p)
			logCachePrune(log, "compilation cache directory", "--compilation-cache-max-size", p.Removed, p.Freed, p.Bytes-p.Freed, p.Over, p.Err)
		},
		Ceilings: opts.Engine.Ceilings, IdleReleased: m.ObserveIdleRelease,
		ModuleUnloaded: h.observeUnload, ModuleReloaded: h.observeReload, Compile: opts.Engine.Compile, MemoryBudget: budget,
		CodeInMemory: opts.Engine.GuestCodeInMemory, CodeMapFailed: func(module string, err error) {
			log.Info("guest code stays in anonymous memory: it could not be mapped from the compilation cache directory", "module", module, "reason", err.Error())
		}}); err != nil {
		return nil, err
	}
	if opts.Engine.InterpreterFirst {
		if h.interpreter, err = engine.New(engine.Options{Interpreter: true, Ceilings: opts.Engine.Ceilings, IdleReleased: m.ObserveIdleRelease,
			Compile: opts.Engine.Compile, MemoryBudget: budget}); err != nil {
			return nil, err
		}
	}
	where := "in this process (a module's bytes can make the compiler take its memory; set Options.Compile.Worker)"
	if w := opts.Engine.Compile.Worker; w != nil {
		where = "in worker processes"
	}
	budgetText := "none"
	if budget != nil {
		budgetText = fmt.Sprintf("%d MiB", budget.Limit()>>20)
	}
	log.Info("guest limits", "compiles", where, "memoryBudget", budgetText, "memoryCeiling", fmt.Sprintf("%d MiB", int64(h.engine.Ceilings().MemoryLimitPages)<<16>>20))
	var lastEvent func(schema.GroupKind) time.Time
	var lastError func(schema.GroupKind) error
	if opts.Informers != nil {
		lastEvent, lastError = opts.Informers.LastEvent, opts.Informers.LastError
	}
	if fr := opts.FlightRecorder; !fr.Disabled {
		h.recorder = flightrecorder.New(fr)
	}
	var sopts supervisor.Options
	if opts.Sharding.Enabled {
		if h.shards, err = newShards(mgr, m, opts.Sharding, opts.Informers, opts.ReconcileModules, func(keep func(string, types.UID) bool) { h.supervisor.RequeueEvery(keep) }); err != nil {
			return nil, err
		}
		sopts.Shard, sopts.Leading, sopts.ShardByUID, sopts.Admits = h.shards.admit, h.shards.leading, h.shards.byUID(), h.shards.admits
		if h.shards.serverSide {
			sopts.ReadLive = h.shards.readLive
		}
	}
	h.supervisor, err = supervisor.New(supervisor.Options{
		Shard: sopts.Shard, ShardByUID: sopts.ShardByUID, Admits: sopts.Admits, Leading: sopts.Leading, ReadLive: sopts.ReadLive,
		FlightRecorder: h.recorder,
		Manager:        mgr, Client: c, Engine: h.engine, Metrics: m, Interpreter: h.interpreter, Identities: identities,
		Policy: opts.Policy, KeepVersions: opts.Engine.KeepVersions, ModuleConfig: opts.ModuleConfig, ModuleReadNamespaces: opts.ModuleReadNamespaces,
		LastEvent: lastEvent, LastError: lastError, HealthInterval: opts.Health.Interval, SyncTimeout: opts.Health.SyncTimeout,
		StaleAfter: opts.Health.StaleAfter, QuiescentAfter: opts.Health.QuiescentAfter,
	})
	if err != nil {
		return nil, err
	}
	if h.shards != nil {
		h.shards.supervisor = h.supervisor // before Start: publishShadowCounts reads it
	}
	fail := func(err error) (*Host, error) {
		_ = h.Close(context.Background())
		return nil, err
	}
	hostID := fmt.Sprintf("%p", h)
	m.ReportModules(hostID, func() []metrics.Module { return h.supervisor.Metrics(context.Background()) })
	if err := mgr.Add(h.supervisor); err != nil {
		return fail(err)
	}
	if h.shards != nil {
		if err := mgr.Add(h.shards); err != nil {
			return fail(err)
		}
	}
	if err := mgr.AddReadyzCheck("wasmreconcile", func(*http.Request) error { return h.Ready() }); err != nil {
		return fail(err)
	}

	unknownConfig := map[string]bool{}
	for name := range opts.ModuleConfig {
		unknownConfig[name] = true
	}
	loadAtStart := func(paths []string, hint string) {
		for _, path := range paths {
			name, err := h.applyFile(context.Background(), path)
			if err != nil {
				log.Error(err, "module not loaded; "+hint, "path", path)
				h.loadErrors = append(h.loadErrors, err)
				continue
			}
			delete(unknownConfig, name)
		}
	}
	loadAtStart(opts.Modules, "the operator keeps running without it")
	if opts.ModuleDir != "" {
		dir, err := source.WatchDir(opts.ModuleDir, func(ctx context.Context, path string) error {
			_, err := h.applyFile(ctx, path)
			return err
		}, func(path string) {
			h.mu.Lock()
			name, ok := h.fileModules[path]
			delete(h.fileModules, path)
			h.mu.Unlock()
			if ok {
				h.supervisor.RemoveOwned(name, fileOwner(path))
			}
		})
		if err != nil {
			return fail(err)
		}
		if opts.Sources.DirSettle > 0 {
			dir.SetSettle(opts.Sources.DirSettle)
		}
		loadAtStart(dir.Initial(), "fix the file and it is loaded when it changes")
		if err := mgr.Add(dir); err != nil {
			return fail(err)
		}
	}
	var peerShadowStats func(module, digest string) shadow.Stats
	if h.shards != nil {
		peerShadowStats = h.shards.peerShadowStats
	}
	if opts.ReconcileModules {
		if err := v1alpha1.AddToScheme(mgr.GetScheme()); err != nil {
			return fail(err)
		}
		if err := modulecontroller.Setup(mgr, h.supervisor, modulecontroller.Options{
			MaxModuleBytes: opts.Sources.MaxBytes, FetchTimeout: opts.Sources.FetchTimeout,
			StatusInterval: opts.ModuleController.StatusInterval, HTTPClient: opts.Sources.HTTPClient, Workers: opts.ModuleController.LoadWorkers,
			DefaultServiceAccount: opts.Identity.DefaultServiceAccount, ServiceAccountNamespace: opts.Identity.ServiceAccountNamespace,
			URLPolicy:        source.URLPolicy{AllowedHosts: opts.Sources.URLAllowedHosts, AllowPrivate: opts.Sources.URLAllowPrivate},
			SourceNamespaces: opts.Sources.Namespaces, BlobCache: h.ociOptions.BlobCache,
			PeerShadowStats: peerShadowStats,
		}); err != nil {
			return fail(err)
		}
	}
	h.reconcileModules = opts.ReconcileModules
	// The manager starts runnables that need no leader once its caches
	// have started, in every replica: from then on the host may be ready.
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		h.started.Store(true)
		return nil
	})); err != nil {
		return fail(err)
	}
	// Close the host when the manager stops: every runnable's context ends
	// at once, and the manager waits for this one to return.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		m.StopReporting(hostID)
		return h.Close(context.Background())
	})); err != nil {
		return fail(err)
	}
	for name := range unknownConfig {
		log.Info("configuration given for a module that is not loaded; check the module name in --module-config", "module", name)
	}
	return h, nil
}

// applyFile loads or reloads the module in arg, a path optionally followed
// by "@sha256:<hex>", and returns the module's name. The supervisor verifies
// the pin, and refuses a second file of the same module name.
//
// An arg of "oci://…" is an OCI reference (Options.Modules) instead: its
// manifest digest pins the bytes.
func (h *Host) applyFile(ctx context.Context, arg string) (string, error) {
	path, pin, _ := strings.Cut(arg, "@sha256:")
	fetcher, owner, what := source.File(path, source.Options{MaxBytes: h.maxBytes}), fileOwner(path), "module file "+path
	if strings.HasPrefix(arg, source.OCIScheme) {
		path, pin = arg, ""
		fetcher, owner, what = source.OCI(arg, h.ociCreds, h.ociTimeout, h.ociOptions), "the reference "+arg, "module "+arg
	}
	h.mu.Lock()
	name := h.fileModules[path] // "" for a new file: the manifest names it
	h.mu.Unlock()
	var clamped []string
	loaded, err := h.supervisor.Apply(ctx, supervisor.Spec{
		Name: name, Source: fetcher, SHA256: pin, Owner: owner,
		ServiceAccount: h.account, Yields: h.filesYield,
		Check: func(m *engine.Module) error { clamped = m.Clamped(); return nil },
	})
	if err != nil {
		var fetch *supervisor.FetchError
		if errors.As(err, &fetch) {
			return "", fmt.Errorf("%s: %w; check the reference or path passed to --module or --module-dir", what, fetch.Err)
		}
		return "", err
	}
	h.mu.Lock()
	h.fileModules[path] = loaded.Name
	h.mu.Unlock()
	f := loaded.Manifest.For
	h.log.Info("module loaded", "module", loaded.Name, "path", path, "digest", loaded.Digest,
		"for", f.Group+"/"+f.Version+"/"+f.Kind, "bytes", loaded.Bytes, "compile", loaded.Compile.String())
	h.logClamped(loaded.Name, clamped)
	return loaded.Name, nil
}

// fileOwner is the supervisor's Spec.Owner of the module in file path.
func fileOwner(path string) string { return "the file " + path }

// Apply runs m, or replaces the running version of module m.Name with it
// (hot reload: calls running finish on the old version). It returns once
// the new version serves, or with an error and the previous version still
// serving.
func (h *Host) Apply(ctx context.Context, m Module) error {
	if m.Source == nil {
		return errors.New("operator: Module.Source is required")
	}
	var clamped []string
	account := m.ServiceAccount
	if account == "" {
		account = h.account
	}
	loaded, err := h.supervisor.Apply(ctx, supervisor.Spec{
		Name: m.Name, Source: m.Source, SHA256: m.SHA256, Policy: m.Policy, Config: m.Config, Owner: "the program",
		ServiceAccount: account,
		Check:          func(m *engine.Module) error { clamped = m.Clamped(); return nil },
	})
	if err == nil {
		h.logClamped(loaded.Name, clamped)
	}
	return err
}

// logClamped says which limits of a module loaded from a file or by the
// program were over Options.Ceilings and were lowered to them.
func (h *Host) logClamped(name string, clamped []string) {
	if len(clamped) > 0 {
		h.log.Info("module limits over the operator's ceilings were clamped; lower the limits or raise the ceilings", "module", name, "clamped", clamped)
	}
}

// Remove stops module name. Its objects keep their status and children;
// nothing is deleted. A module that declared a finalizer has it removed
// from every object of its kind in the background, so that no deletion
// waits for a module that is gone. It reports whether the module ran.
func (h *Host) Remove(name string) bool { return h.supervisor.Remove(name) }

// Names lists the modules that run, sorted.
func (h *Host) Names() []string { return h.supervisor.Names() }

// observeUnload counts and logs a module's code unloaded for idleness
// (engine.Options.ModuleUnloaded).
func (h *Host) observeUnload(module string) {
	h.metrics.ObserveUnload(module)
	h.log.Info("module unloaded: it served no call for its idle module timeout; the next event loads it back", "module", module)
	h.reclaimSoon()
}

// reclaimDelay is how long after an unload the host returns the freed heap
// to the operating system: unloads come in bursts (modules loaded
// together idle together), and one collection serves the burst.
const reclaimDelay = 5 * time.Second

// reclaimSoon returns the heap an unload freed (a Go guest's decoded
// module, about 7 MiB) to the operating system after reclaimDelay, unless a
// return is already due. The runtime's scavenger would return it only
// gradually, so the process's RSS, which the pod's limit and the platform's
// bill count, would not show the unload for minutes.
func (h *Host) reclaimSoon() {
	h.reclaimMu.Lock()
	defer h.reclaimMu.Unlock()
	if h.reclaimDue {
		return
	}
	h.reclaimDue = true
	time.AfterFunc(reclaimDelay, func() {
		h.reclaimMu.Lock()
		h.reclaimDue = false
		h.reclaimMu.Unlock()
		debug.FreeOSMemory()
	})
}

// observeReload counts and logs a module's code loaded back for a call
// (engine.Options.ModuleReloaded).
func (h *Host) observeReload(module string, took time.Duration, err error) {
	h.metrics.ObserveWake(module, took, err)
	if err != nil {
		h.log.Error(err, "loading an unloaded module back failed; its calls fail until it loads", "module", module)
		return
	}
	h.log.V(1).Info("module loaded back", "module", module, "took", took.Round(time.Millisecond).String())
}

// LoadErrors are the errors of Options.Modules (and of the ModuleDir files
// present at Setup) that failed to load.
func (h *Host) LoadErrors() []error { return h.loadErrors }

// Ready reports whether the host serves: the manager has started, the
// ReconcileModule cache (with Options.ReconcileModules) has synced, and no
// module's caches are still syncing normally; the readiness check serves
// it (/readyz/wasmreconcile shows its message). A module whose caches
// cannot sync for a reason of its own (its CRD is not installed, the
// operator may not list one of its kinds, its sync is past SyncTimeout) is
// unready by itself, not the host: its ReconcileModule's Ready condition
// says why, as do a SyncFailed Warning, the log and
// wasmreconcile_module_health; the other modules serve.
func (h *Host) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if !h.started.Load() {
		return errors.New("the manager has not started yet")
	}
	if h.reconcileModules {
		inf, err := h.mgr.GetCache().GetInformer(ctx, &v1alpha1.ReconcileModule{}, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("the ReconcileModule cache: %w", err)
		}
		if !inf.HasSynced() {
			return errors.New("the ReconcileModule cache has not synced yet")
		}
	}
	if h.shards != nil {
		if err := h.shards.ready(); err != nil {
			return err
		}
	}
	return h.supervisor.Ready(ctx)
}

// Close stops the module controllers, waits for the calls running, and
// closes every module and the engines. The manager's stop calls it; call it
// yourself only when the manager never started. Closing twice is harmless.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		if h.recorder != nil {
			// First: its queued replays hold versions open, which the
			// supervisor's Close waits for.
			h.recorder.Close()
		}
		errs := []error{h.supervisor.Close(ctx), h.engine.Close(ctx)}
		if h.interpreter != nil {
			errs = append(errs, h.interpreter.Close(ctx))
		}
		h.ociOptions.BlobCache.Wait() // a prune a fetch started
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// FlightRecorderOptions configure the flight recorder: Disabled, and how
// many failed and sampled successful calls are kept per module, within how
// many bytes, with Secrets redacted or kept. Zero fields take the defaults
// (DefaultFlightRecorderFailures and the others).
type FlightRecorderOptions = flightrecorder.Options

// FlightRecorderPath is where New's manager serves the flight recorder's
// records, on the metrics server, to authenticated and authorized clients
// only (`operator record`; docs/rollout.md).
const FlightRecorderPath = flightrecorder.Path

// FlightRecorder returns the host's flight recorder's HTTP handler (GET
// FlightRecorderPath?module=NAME), unauthenticated: New serves it behind
// the API server's authentication and authorization; a program of its own
// must do the same. mayRead, when set, is asked whether the client of a
// request may read the objects of a kind in a namespace ("" for a
// cluster-scoped kind), and only the records of objects it may read are
// served (New asks the API server: a SubjectAccessReview of get). Nil when
// the recorder is disabled.
func (h *Host) FlightRecorder(mayRead func(req *http.Request, gvk schema.GroupVersionKind, namespace string) (bool, error)) http.Handler {
	if h.recorder == nil {
		return nil
	}
	return h.recorder.Handler(flightrecorder.HandlerOptions{MayRead: mayRead})
}
