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
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Options configure the host. Zero fields take the stated defaults.
type Options struct {
	// Modules are paths of .wasm files to load; each module's manifest names
	// it. A path may pin the file's bytes: "widget.wasm@sha256:<hex>"; bytes
	// that do not match are refused. An entry may also be an OCI reference,
	// "oci://REGISTRY/REPOSITORY[:TAG]@sha256:<manifest digest>", fetched
	// with ModuleRegistryConfig's credentials under the URL policy below
	// (its hosts and addresses). A module that fails to load is reported by
	// LoadErrors and logged; the others still run. Defaults to none.
	Modules []string
	// ModuleRegistryConfig is a Docker config file ({"auths": …}) with the
	// credentials of the registries of oci:// Modules. Credential helpers
	// it names are never run. Defaults to "": anonymous.
	ModuleRegistryConfig string
	// FlightRecorder configures the flight recorder: every module's last
	// failed calls and a sample of its successful ones, kept in memory for
	// offline replay (docs/rollout.md). Defaults to on, with the defaults
	// of FlightRecorderOptions.
	FlightRecorder FlightRecorderOptions
	// ModuleCacheDir is a directory where oci sources (Modules and
	// ReconcileModules) keep the manifests and modules they fetched, by
	// digest, checked again when read: a restart while the registry is
	// down still loads them. Defaults to "": nothing is kept.
	ModuleCacheDir string

	// ModuleDir is a directory of .wasm files to load and watch: a file
	// written or replaced there is hot-reloaded, a file removed stops its
	// module. Defaults to "": no directory.
	ModuleDir string
	// ModuleDirSettle is how long a file in ModuleDir must see no write
	// before it is loaded. Defaults to 100 ms.
	ModuleDirSettle time.Duration

	// ReconcileModules runs the modules declared by ReconcileModule objects
	// (api/v1alpha1, config/crd), and needs that CRD installed. Setup adds
	// v1alpha1 to the manager's scheme. Defaults to false.
	ReconcileModules bool
	// MaxModuleBytes caps a module's size from any source, compressed and
	// uncompressed. Defaults to 64 MiB.
	MaxModuleBytes int64
	// ModuleFetchTimeout bounds fetching a module from a url or oci source.
	// Defaults to 30 s.
	ModuleFetchTimeout time.Duration
	// ModuleStatusInterval is how often a ReconcileModule's status
	// statistics are refreshed. Defaults to 30 s.
	ModuleStatusInterval time.Duration
	// ModuleLoadWorkers is how many ReconcileModules are reconciled, and
	// so fetched and compiled, at once: one module's slow load never holds
	// up the others'. Defaults to 4.
	ModuleLoadWorkers int
	// ModuleHTTPClient fetches url sources. Defaults to a client that
	// enforces the whole URL policy below (source.NewHTTPClient), checking
	// each address as it dials. A client of your own keeps its Transport:
	// ModuleURLAllowedHosts, the redirect rules and the error texts still
	// apply, but ModuleURLAllowPrivate only if its Transport comes from
	// source.NewTransport (docs/sources.md).
	ModuleHTTPClient *http.Client
	// ModuleURLAllowedHosts are the hosts url sources may fetch from:
	// names, "*.example.com" for any name under a domain, or IP addresses
	// (source.URLPolicy.AllowedHosts). Defaults to none: any host whose
	// addresses are public.
	ModuleURLAllowedHosts []string
	// ModuleURLAllowPrivate lets url sources reach loopback, private and
	// other non-public addresses; link-local (cloud metadata), multicast
	// and unspecified addresses stay refused. Defaults to false.
	ModuleURLAllowPrivate bool
	// ModuleSourceNamespaces are the namespaces whose ConfigMaps and
	// Secrets a ReconcileModule's source may name; "*" is any. A source in
	// another namespace is refused (reason SourceRefused) and not read.
	// Defaults to the namespace the operator runs in (its service
	// account's, in-cluster), else "default".
	ModuleSourceNamespaces []string

	// DefaultServiceAccount, "namespace/name", is the identity of the
	// modules that name none: files (Modules, ModuleDir), modules of
	// Host.Apply without Module.ServiceAccount, and ReconcileModules
	// without spec.serviceAccountName. A module's writes (children,
	// status, finalizers) and its guest's Events impersonate its account,
	// and what it reads (its objects, their children, the guest's cache
	// reads) is authorized for the account; the host's own Warnings and
	// the informers stay the operator's (docs/security.md). Defaults to
	// "": the operator's own identity (single tenant).
	DefaultServiceAccount string
	// ServiceAccountNamespace is the namespace of a ReconcileModule's
	// spec.serviceAccountName when its spec.serviceAccountNamespace is
	// empty. Defaults to the operator's namespace: its service account's
	// in-cluster, else "default".
	ServiceAccountNamespace string
	// AuthorizationTTL is how long an allowed answer of a
	// SubjectAccessReview (may this account get or list this kind in this
	// namespace?) is reused: a right revoked is still used for up to this
	// long. Defaults to 1 minute.
	AuthorizationTTL time.Duration
	// AuthorizationDeniedTTL is how long a denied answer is reused: a
	// right granted takes up to this long to be used. Defaults to 10
	// seconds.
	AuthorizationDeniedTTL time.Duration

	// KeepVersions is how many versions of each module stay compiled, so
	// that rolling back to one is instant. Defaults to 3.
	KeepVersions int
	// InterpreterFirst serves new module bytes from wazero's interpreter
	// while the compiler works, then switches to the compiled code.
	// Defaults to false.
	InterpreterFirst bool
	// CompilationCacheDir persists compiled modules across restarts.
	// Defaults to "" (in memory only; with a Compile.Worker, a directory
	// of the engine's own under os.TempDir, removed on close).
	CompilationCacheDir string
	// Compile bounds compiling module bytes: the shapes refused before
	// compiling, and the worker processes compiles run in
	// (engine.CompileOptions). A compile over a limit fails the load as
	// InvalidModule, naming the limit; the serving version stays. To
	// isolate compiles, set Compile.Worker to engine.SelfCompileWorker()
	// and call engine.MaybeRunCompileWorker first in main, as the operator
	// binary does. Defaults to the zero CompileOptions: the default
	// complexity limits, and compiles in this process, where a module's
	// bytes can make the compiler take the process's memory.
	Compile engine.CompileOptions
	// MemoryBudget, when positive, bounds in bytes what guests can make the
	// process hold: every instance reserves its memory cap while it lives,
	// every compile worker its memory limit while it runs
	// (engine.MemoryBudget); an instance that does not fit waits, closing
	// idle instances of other modules first (wasmreconcile_memory_budget_*
	// metrics, a MemoryBudgetWait Warning Event). The memory ceiling is
	// lowered to it. Defaults to 0: no budget. The operator binary sets
	// DefaultMemoryBudgetPercent of DetectMemoryLimit (--memory-budget).
	MemoryBudget int64

	// Limits apply to every module. Zero fields take the module's manifest
	// defaults, then the engine's.
	Limits engine.Limits
	// Ceilings cap the Fuel, Timeout and MemoryLimitPages of every module:
	// no Limits, Module.Limits, ReconcileModule spec.limits or manifest can
	// exceed them. A limit over its ceiling is clamped to it, and reported
	// (a ReconcileModule's status and a Warning Event; a log line for
	// files). Its other fields are ignored. Zero fields take
	// engine.DefaultMaxFuel (5,000,000,000), engine.DefaultMaxTimeout (60 s)
	// and engine.DefaultMaxMemoryPages (4096 pages = 256 MiB).
	Ceilings engine.Limits
	// ModuleConfig is the configuration passed to each module, by module
	// name, as Request.Config; a ReconcileModule's spec.config takes its
	// place. Defaults to none.
	ModuleConfig map[string]map[string]any
	// ModuleReadNamespaces are, by module name, the namespaces beyond the
	// reconciled object's own whose objects the module's guest may read
	// through cache_read ("*": every namespace); a ReconcileModule's
	// spec.readNamespaces takes their place. Defaults to none: a guest
	// reads its object's namespace, and cluster-scoped kinds.
	ModuleReadNamespaces map[string][]string
	// Storm configures reconcile-storm damping for every module: of each
	// object, and of each related object a trigger maps.
	Storm StormOptions
	// TriggerMaxFanOut caps the objects one event of a related object
	// reconciles through a selector or all trigger (the others are
	// dropped and counted in wasmreconcile_trigger_fanout_dropped_total).
	// Defaults to 1000.
	TriggerMaxFanOut int
	// CallUnchanged calls every module's guest for every event, even one
	// that carries nothing the guest can react to, such as the event of
	// the host's own status write (docs/abi.md, "When the guest is
	// called"). Defaults to false: such events are answered without a
	// call.
	CallUnchanged bool
	// Events is the budget of every module's guest Events (docs/abi.md,
	// "Events and logs"): token buckets per object and per module.
	Events EventBudget
	// ResponseLimits bound every module's responses (docs/abi.md, "Response
	// rules"); `operator test` takes the same limits. See protocol.Limits
	// for the defaults.
	ResponseLimits protocol.Limits
	// RateLimit configures every module's workqueue rate limiter.
	RateLimit RateLimit
	// MaxConcurrentReconciles per module. Defaults to the module's
	// MaxInstances, so no worker waits for an instance.
	MaxConcurrentReconciles int

	// QuiescentAfter is how long a converged module must write nothing to
	// be reported quiescent. Defaults to 1 minute.
	QuiescentAfter time.Duration
	// SyncTimeout is how long a module's kind may take to sync before a
	// SyncFailed warning. Defaults to 2 minutes.
	SyncTimeout time.Duration
	// StaleAfter is how long a module's kind may see no watch event or list
	// before a CacheStale warning; it needs Informers. Defaults to 10
	// minutes.
	StaleAfter time.Duration
	// HealthInterval is how often modules' caches are checked for those
	// warnings. Defaults to 10 seconds.
	HealthInterval time.Duration

	// Registerer registers the host's metrics. Defaults to
	// controller-runtime's registry, which the manager's metrics endpoint
	// serves.
	Registerer prometheus.Registerer
	// Informers, when the manager's cache was built with them
	// (cache.Options{NewInformer: informers.NewInformer}), tell how fresh
	// each kind's cache is, for CacheStale warnings. New sets it. Defaults
	// to nil: no staleness warnings.
	Informers *informer.Informers
}

// StormOptions configure storm damping: an object reconciled more than
// Threshold times within Window without any change is quiescent; its guest
// is then called at most once per Backoff until it changes.
type StormOptions struct {
	// Threshold defaults to 20.
	Threshold int
	// Window defaults to 10 seconds.
	Window time.Duration
	// Backoff defaults to 1 minute.
	Backoff time.Duration
	// Disabled turns damping off. Defaults to false.
	Disabled bool
}

// EventBudget bounds the Events a module's guest records: every Event takes
// a token from its object's bucket and one from the module's, and an Event
// either cannot pay for is dropped and counted
// (wasmreconcile_events_dropped_total). The host's own Warning Events are
// not budgeted. Zero fields take the stated defaults.
type EventBudget struct {
	// ObjectQPS is the refill rate of each object's bucket, in Events per
	// second. Defaults to 0.1 (one per 10 s).
	ObjectQPS float64
	// ObjectBurst is the size of each object's bucket. Defaults to 10.
	ObjectBurst int
	// ModuleQPS is the refill rate of the module's bucket. Defaults to 10.
	ModuleQPS float64
	// ModuleBurst is the size of the module's bucket. Defaults to 100.
	ModuleBurst int
	// Disabled records every Event. Defaults to false.
	Disabled bool
}

// Defaults of EventBudget.
const (
	DefaultEventObjectQPS   = reconciler.DefaultEventObjectQPS
	DefaultEventObjectBurst = reconciler.DefaultEventObjectBurst
	DefaultEventModuleQPS   = reconciler.DefaultEventModuleQPS
	DefaultEventModuleBurst = reconciler.DefaultEventModuleBurst
)

// RateLimit configures a module's workqueue: per-object exponential backoff
// for failures, combined (the slower wins) with an overall token bucket.
// The defaults are controller-runtime's.
type RateLimit struct {
	// BaseDelay is the first retry delay; it doubles per failure.
	// Defaults to 5 ms.
	BaseDelay time.Duration
	// MaxDelay caps the per-object delay. Defaults to 1000 s.
	MaxDelay time.Duration
	// QPS is the bucket's rate. Defaults to 10.
	QPS float64
	// Burst is the bucket's size. Defaults to 100.
	Burst int
}

// Module is a module a program adds with Host.Apply.
type Module struct {
	// Name must match the module's manifest. Defaults to the manifest's.
	Name string
	// Source fetches the module's bytes. Required.
	Source source.Fetcher
	// SHA256, when set, pins the bytes (hex, optionally "sha256:"-prefixed).
	SHA256 string
	// Limits override Options.Limits where non-zero.
	Limits engine.Limits
	// Config is passed to the guest as Request.Config. Defaults to
	// Options.ModuleConfig[Name].
	Config map[string]any
	// ServiceAccount, "namespace/name", is the module's identity.
	// Defaults to Options.DefaultServiceAccount.
	ServiceAccount string
}

// Host runs modules in a manager. Create it with Setup.
type Host struct {
	mgr         manager.Manager
	engine      *engine.Engine
	interpreter *engine.Engine // nil unless InterpreterFirst
	supervisor  *supervisor.Supervisor
	metrics     *metrics.Metrics
	loadErrors  []error
	log         logr.Logger
	maxBytes    int64
	account     string         // Options.DefaultServiceAccount
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
	if opts.DefaultServiceAccount != "" {
		if _, _, err := authz.ParseServiceAccount(opts.DefaultServiceAccount); err != nil {
			return nil, fmt.Errorf("the default service account: %w", err)
		}
	}
	if opts.ServiceAccountNamespace == "" {
		opts.ServiceAccountNamespace = operatorNamespace()
	}
	identities, err := authz.NewIdentities(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper(),
		authz.Options{AllowedTTL: opts.AuthorizationTTL, DeniedTTL: opts.AuthorizationDeniedTTL})
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
	h := &Host{mgr: mgr, metrics: m, log: log, fileModules: map[string]string{}, maxBytes: opts.MaxModuleBytes, account: opts.DefaultServiceAccount,
		ociTimeout: opts.ModuleFetchTimeout,
		ociOptions: source.Options{MaxBytes: opts.MaxModuleBytes, BlobCache: opts.ModuleCacheDir,
			URL: source.URLPolicy{AllowedHosts: opts.ModuleURLAllowedHosts, AllowPrivate: opts.ModuleURLAllowPrivate}}}
	if opts.ModuleRegistryConfig != "" {
		h.ociCreds = source.DockerConfigFile(opts.ModuleRegistryConfig)
	}
	var budget *engine.MemoryBudget
	if opts.MemoryBudget > 0 {
		if budget, err = engine.NewMemoryBudget(opts.MemoryBudget); err != nil {
			return nil, fmt.Errorf("the guest memory budget: %w", err)
		}
		m.ReportBudget(budget.Stats)
	}
	if h.engine, err = engine.New(engine.Options{CompilationCacheDir: opts.CompilationCacheDir, Ceilings: opts.Ceilings, IdleReleased: m.ObserveIdleRelease,
		Compile: opts.Compile, MemoryBudget: budget}); err != nil {
		return nil, err
	}
	if opts.InterpreterFirst {
		if h.interpreter, err = engine.New(engine.Options{Interpreter: true, Ceilings: opts.Ceilings, IdleReleased: m.ObserveIdleRelease,
			Compile: opts.Compile, MemoryBudget: budget}); err != nil {
			return nil, err
		}
	}
	where := "in this process (a module's bytes can make the compiler take its memory; set Options.Compile.Worker)"
	if w := opts.Compile.Worker; w != nil {
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
		h.recorder = flightrecorder.New(flightrecorder.Options{Failures: fr.Failures, Successes: fr.Successes,
			SampleEvery: fr.SampleEvery, MaxBytes: fr.MaxBytes, KeepSecrets: fr.KeepSecrets, QueueSize: fr.QueueSize})
	}
	h.supervisor, err = supervisor.New(supervisor.Options{
		FlightRecorder: h.recorder,
		Manager:        mgr, Client: c, Engine: h.engine, Metrics: m, Interpreter: h.interpreter, Identities: identities,
		Limits: opts.Limits, KeepVersions: opts.KeepVersions, ModuleConfig: opts.ModuleConfig, ModuleReadNamespaces: opts.ModuleReadNamespaces,
		Storm: reconciler.StormOptions(opts.Storm), TriggerMaxFanOut: opts.TriggerMaxFanOut, CallUnchanged: opts.CallUnchanged, ResponseLimits: opts.ResponseLimits, Events: reconciler.EventBudget(opts.Events),
		RateLimit: ratelimit.Options(opts.RateLimit), MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		LastEvent: lastEvent, LastError: lastError, HealthInterval: opts.HealthInterval, SyncTimeout: opts.SyncTimeout,
		StaleAfter: opts.StaleAfter, QuiescentAfter: opts.QuiescentAfter,
	})
	if err != nil {
		return nil, err
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
				h.supervisor.Remove(name)
			}
		})
		if err != nil {
			return fail(err)
		}
		if opts.ModuleDirSettle > 0 {
			dir.SetSettle(opts.ModuleDirSettle)
		}
		loadAtStart(dir.Initial(), "fix the file and it is loaded when it changes")
		if err := mgr.Add(dir); err != nil {
			return fail(err)
		}
	}
	if opts.ReconcileModules {
		if err := v1alpha1.AddToScheme(mgr.GetScheme()); err != nil {
			return fail(err)
		}
		if err := modulecontroller.Setup(mgr, h.supervisor, modulecontroller.Options{
			MaxModuleBytes: opts.MaxModuleBytes, FetchTimeout: opts.ModuleFetchTimeout,
			StatusInterval: opts.ModuleStatusInterval, HTTPClient: opts.ModuleHTTPClient, Workers: opts.ModuleLoadWorkers,
			DefaultServiceAccount: opts.DefaultServiceAccount, ServiceAccountNamespace: opts.ServiceAccountNamespace,
			URLPolicy:        source.URLPolicy{AllowedHosts: opts.ModuleURLAllowedHosts, AllowPrivate: opts.ModuleURLAllowPrivate},
			SourceNamespaces: opts.ModuleSourceNamespaces, BlobCache: opts.ModuleCacheDir,
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
	fetcher, owner, what := source.File(path, source.Options{MaxBytes: h.maxBytes}), "the file "+path, "module file "+path
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
		ServiceAccount: h.account,
		Check:          func(m *engine.Module) error { clamped = m.Clamped(); return nil },
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
		Name: m.Name, Source: m.Source, SHA256: m.SHA256, Limits: m.Limits, Config: m.Config, Owner: "the program",
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
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// FlightRecorderOptions configure the flight recorder. Zero fields take
// the stated defaults.
type FlightRecorderOptions struct {
	// Disabled records nothing. Defaults to false.
	Disabled bool
	// Failures is how many failed calls are kept per module. Defaults to
	// 20.
	Failures int
	// Successes is how many sampled successful calls are kept per module.
	// Defaults to 20.
	Successes int
	// SampleEvery keeps one successful call in SampleEvery. Defaults to
	// 100.
	SampleEvery int
	// MaxBytes bounds the records of one module. Defaults to 8 MiB.
	MaxBytes int
	// KeepSecrets keeps Secrets' data in recorded inputs. Defaults to
	// false: they are redacted.
	KeepSecrets bool
	// QueueSize bounds the kept calls waiting for their replay run (one
	// worker); more are dropped. Defaults to 64.
	QueueSize int
}

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

// ManagerOptions are the binary's manager settings: see New.
type ManagerOptions struct {
	// LeaderElection makes replicas elect one leader through a
	// coordination.k8s.io Lease; only the leader runs module controllers.
	// Every replica keeps its caches warm and its modules loaded, so a
	// takeover starts reconciling at once. Defaults to false.
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
	// GracefulShutdownTimeout bounds how long the manager waits for its
	// runnables to stop. Zero takes controller-runtime's default (30 s).
	GracefulShutdownTimeout time.Duration

	// MetricsBindAddress serves Prometheus metrics. "0" disables it.
	// Defaults to ":8080".
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz. "0" disables it.
	// Defaults to ":8081".
	HealthProbeBindAddress string
	// PprofBindAddress serves net/http/pprof. Defaults to "": disabled.
	PprofBindAddress string

	// Informers configure list pagination, timeouts and WatchList; zero
	// fields take package informer's defaults.
	Informers informer.Options

	// Namespaces, when set, limits the cache, and so every module, to the
	// objects of these namespaces; cluster-scoped objects (ReconcileModules,
	// cluster-scoped kinds) are still seen. Defaults to none: every
	// namespace.
	Namespaces []string

	// SkipControllerNameValidation allows several operators with modules of
	// the same name in one process (tests). controller-runtime otherwise
	// refuses a second controller of a name, because their metrics would
	// mix. Defaults to false.
	SkipControllerNameValidation bool
}

// Operator is a manager with the host set up in it: what the binary runs.
type Operator struct {
	*Host
	mgr manager.Manager
}

// New builds a manager for cfg the way the operator binary runs: the host's
// paginated, verified informers (informer.Informers), unstructured objects
// read from the cache, v1alpha1 in the scheme, a "ping" liveness check,
// leader election and the metrics and probe endpoints of mo. Then it calls
// Setup with opts. Module load failures are in LoadErrors, not in the error.
func New(cfg *rest.Config, mo ManagerOptions, opts Options) (*Operator, error) {
	if mo.MetricsBindAddress == "" {
		mo.MetricsBindAddress = ":8080"
	}
	if mo.HealthProbeBindAddress == "" {
		mo.HealthProbeBindAddress = ":8081"
	}
	if mo.LeaderElectionID == "" {
		mo.LeaderElectionID = "wasmreconcile-operator"
	}
	if mo.LeaderElectionNamespace == "" {
		mo.LeaderElectionNamespace = operatorNamespace()
	}
	optional := func(d time.Duration) *time.Duration {
		if d <= 0 {
			return nil
		}
		return &d
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	io := mo.Informers
	if io.Registerer == nil {
		io.Registerer = opts.Registerer
	}
	io.Scheme = scheme
	informers, err := informer.New(io)
	if err != nil {
		return nil, fmt.Errorf("informer metrics: %w", err)
	}
	// Guests never see managedFields, and nothing of the host reads them
	// from the cache: strip them, often half of an object's memory.
	cacheOptions := cache.Options{NewInformer: informers.NewInformer, DefaultTransform: cache.TransformStripManagedFields()}
	if len(mo.Namespaces) > 0 {
		cacheOptions.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range mo.Namespaces {
			cacheOptions.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	var graceful *time.Duration
	if mo.GracefulShutdownTimeout > 0 {
		graceful = &mo.GracefulShutdownTimeout
	}
	// The flight recorder's records hold the objects guests saw: they are
	// served only to a client the API server authenticates (a bearer
	// token, TokenReview) and authorizes for GET on the non-resource URL
	// (SubjectAccessReview), as controller-runtime's metrics filter does.
	// The metrics themselves stay as they are.
	records, err := newRecordsEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		GracefulShutdownTimeout: graceful,
		Scheme:                  scheme,
		LeaderElection:          mo.LeaderElection,
		LeaderElectionID:        mo.LeaderElectionID,
		LeaderElectionNamespace: mo.LeaderElectionNamespace,
		LeaseDuration:           optional(mo.LeaseDuration),
		RenewDeadline:           optional(mo.RenewDeadline),
		RetryPeriod:             optional(mo.RetryPeriod),
		// Release the Lease on a clean shutdown, so the next leader takes
		// over at once instead of after LeaseDuration.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: mo.MetricsBindAddress, ExtraHandlers: map[string]http.Handler{flightrecorder.Path: records}},
		HealthProbeBindAddress:        mo.HealthProbeBindAddress,
		PprofBindAddress:              mo.PprofBindAddress,
		Cache:                         cacheOptions,
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Controller:                    config.Controller{SkipNameValidation: &mo.SkipControllerNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("creating controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	opts.Informers = informers
	h, err := Setup(mgr, opts)
	if err != nil {
		return nil, err
	}
	if fr := h.FlightRecorder(records.mayRead(mgr.GetRESTMapper())); fr != nil {
		records.set(fr)
	}
	return &Operator{Host: h, mgr: mgr}, nil
}

// Defaults of Options.AuthorizationTTL and AuthorizationDeniedTTL.
const (
	DefaultAuthorizationTTL       = authz.DefaultAllowedTTL
	DefaultAuthorizationDeniedTTL = authz.DefaultDeniedTTL
)

// ParseServiceAccount checks a ServiceAccount given as "namespace/name",
// as Options.DefaultServiceAccount takes it, and returns its parts.
func ParseServiceAccount(s string) (namespace, name string, err error) {
	return authz.ParseServiceAccount(s)
}

// operatorNamespace is the namespace the operator runs in: its service
// account's, in-cluster, else "default".
func operatorNamespace() string {
	if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(ns)); ns != "" {
			return ns
		}
	}
	return "default"
}

// Manager is the underlying controller-runtime manager.
func (o *Operator) Manager() manager.Manager { return o.mgr }

// Start runs the operator until ctx is done; the host closes as the manager
// stops.
func (o *Operator) Start(ctx context.Context) error {
	err := o.mgr.Start(ctx)
	return errors.Join(err, o.Host.Close(context.Background()))
}

// everyReplica is a runnable that runs in every replica, leader or not.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
