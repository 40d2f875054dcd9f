package operator

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/shard"
	"github.com/wasmreconcile/wasmreconcile/host/internal/sharding"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Options configure the host. Zero fields take the stated defaults.
type Options struct {
	// Modules are paths of .wasm files to load; each module's manifest names
	// it. A path may pin the file's bytes: "widget.wasm@sha256:<hex>"; bytes
	// that do not match are refused. An entry may also be an OCI reference,
	// "oci://REGISTRY/REPOSITORY[:TAG]@sha256:<manifest digest>", fetched
	// with Sources.RegistryConfig's credentials under the URL policy of
	// Sources (its hosts and addresses). A module that fails to load is
	// reported by LoadErrors and logged; the others still run. Defaults to
	// none.
	Modules []string
	// ModuleDir is a directory of .wasm files to load and watch: a file
	// written or replaced there is hot-reloaded, a file removed stops its
	// module. Defaults to "": no directory.
	ModuleDir string
	// FileModulesYield makes a module of Modules or ModuleDir give way to
	// a ReconcileModule of the same name: the ReconcileModule takes it
	// over (with its candidate, canary and promotion), and the file serves
	// again once the ReconcileModule is deleted. operator dev sets it, so
	// that a module in its directory can be rolled out with a
	// ReconcileModule. Defaults to false: the ReconcileModule is refused
	// with reason NameConflict while the file's module runs.
	FileModulesYield bool
	// ReconcileModules runs the modules declared by ReconcileModule objects
	// (api/v1alpha1, config/crd), and needs that CRD installed. Setup adds
	// v1alpha1 to the manager's scheme. Defaults to false.
	ReconcileModules bool

	// Policy is every module's policy (package policy): the limits of
	// each call, storm damping, the Event budget, the response limits, the
	// workqueue's rate limit, concurrency, read scope, the trigger fan-out
	// cap and whether unchanged events call the guest. A module's own
	// layer (Module.Policy, a ReconcileModule's spec) overrides it field
	// by field, and its manifest may lower the Limits. Zero fields take
	// policy's defaults, and Limits' the manifest's, then the engine's.
	Policy policy.Policy
	// ModuleConfig is the configuration passed to each module, by module
	// name, as Request.Config; a ReconcileModule's spec.config takes its
	// place. Defaults to none.
	ModuleConfig map[string]map[string]any
	// ModuleReadNamespaces are, by module name, the namespaces beyond the
	// reconciled object's own whose objects the module's guest may read
	// through cache_read ("*": every namespace): the ReadNamespaces of
	// those modules' policy unless their own layer sets it (a
	// ReconcileModule's spec.readNamespaces). Defaults to none: a guest
	// reads its object's namespace, and cluster-scoped kinds.
	ModuleReadNamespaces map[string][]string

	// Sources configure fetching modules' bytes: size, timeouts, the URL
	// policy, OCI credentials and cache, the namespaces a ReconcileModule
	// may read them from.
	Sources SourceOptions
	// Identity configures the identities modules run as.
	Identity IdentityOptions
	// Engine configures loading, compiling and keeping modules.
	Engine EngineOptions
	// ModuleController configures the controller of ReconcileModules.
	ModuleController ModuleControllerOptions
	// Health configures the health of modules' caches and convergence.
	Health HealthOptions
	// FlightRecorder configures the flight recorder: every module's last
	// failed calls and a sample of its successful ones, kept in memory for
	// offline replay (docs/rollout.md). Defaults to on, with the defaults
	// of FlightRecorderOptions.
	FlightRecorder FlightRecorderOptions
	// Sharding splits module controllers' objects among replicas (issue
	// 27; docs/scaling.md). Defaults to off: module controllers run in the
	// elected replica only.
	Sharding ShardingOptions

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

// SourceOptions configure fetching modules' bytes. Zero fields take the
// stated defaults.
type SourceOptions struct {
	// MaxBytes caps a module's size from any source, compressed and
	// uncompressed. Defaults to DefaultMaxModuleBytes (64 MiB).
	MaxBytes int64
	// FetchTimeout bounds fetching a module from a url or oci source.
	// Defaults to DefaultModuleFetchTimeout (30 s).
	FetchTimeout time.Duration
	// DirSettle is how long a file in Options.ModuleDir must see no write
	// before it is loaded. Defaults to DefaultModuleDirSettle (100 ms).
	DirSettle time.Duration
	// RegistryConfig is a Docker config file ({"auths": …}) with the
	// credentials of the registries of oci:// Modules. Credential helpers
	// it names are never run. Defaults to "": anonymous.
	RegistryConfig string
	// CacheDir is a directory where oci sources (Modules and
	// ReconcileModules) keep the manifests and modules they fetched, by
	// digest, checked again when read: a restart while the registry is
	// down still loads them. Defaults to "": nothing is kept.
	CacheDir string
	// CacheMaxBytes bounds what the files in CacheDir add up to: past it
	// the least recently used manifests and modules are removed, never
	// those a ReconcileModule (its source or candidate) or Modules names,
	// nor files used in the last two minutes (source.BlobCache). Defaults
	// to 0: no bound; the operator's --module-cache-max-size is 256Mi.
	CacheMaxBytes int64
	// HTTPClient fetches url sources. Defaults to a client that enforces
	// the whole URL policy below (source.NewHTTPClient), checking each
	// address as it dials. A client of your own keeps its Transport:
	// URLAllowedHosts, the redirect rules and the error texts still apply,
	// but URLAllowPrivate only if its Transport comes from
	// source.NewTransport (docs/sources.md).
	HTTPClient *http.Client
	// URLAllowedHosts are the hosts url sources may fetch from: names,
	// "*.example.com" for any name under a domain, or IP addresses
	// (source.URLPolicy.AllowedHosts). Defaults to none: any host whose
	// addresses are public.
	URLAllowedHosts []string
	// URLAllowPrivate lets url sources reach loopback, private and other
	// non-public addresses; link-local (cloud metadata), multicast and
	// unspecified addresses stay refused. Defaults to false.
	URLAllowPrivate bool
	// Namespaces are the namespaces whose ConfigMaps and Secrets a
	// ReconcileModule's source may name; "*" is any. A source in another
	// namespace is refused (reason SourceRefused) and not read. Defaults
	// to the namespace the operator runs in (its service account's,
	// in-cluster), else "default".
	Namespaces []string
}

// IdentityOptions configure the identities modules run as. Zero fields
// take the stated defaults.
type IdentityOptions struct {
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
}

// EngineOptions configure loading, compiling and keeping modules. Zero
// fields take the stated defaults.
type EngineOptions struct {
	// KeepVersions is how many versions of each module stay compiled, so
	// that rolling back to one is instant. Defaults to DefaultKeepVersions
	// (3).
	KeepVersions int
	// InterpreterFirst serves new module bytes from wazero's interpreter
	// while the compiler works, then switches to the compiled code.
	// Defaults to false.
	InterpreterFirst bool
	// GuestCodeInMemory keeps compiled guest code in anonymous memory
	// instead of mapping it from files in the compilation cache directory
	// (engine.Options.CodeInMemory). Defaults to false: mapped, so that
	// only the code guests run is resident; a module whose code cannot be
	// mapped (a directory mounted noexec) runs from memory and is logged.
	GuestCodeInMemory bool
	// CompilationCacheDir persists compiled modules, and the metered
	// rewrites they were compiled from, across restarts (see
	// engine.Options.CompilationCacheDir); keep it private to the operator.
	// Defaults to "" (in memory only; with a Compile.Worker, a directory
	// of the engine's own under os.TempDir, removed on close).
	CompilationCacheDir string
	// CompilationCacheMaxBytes bounds what the files under the compilation
	// cache directory add up to: past it the least recently used are
	// removed, never what an unloaded module needs to come back
	// (engine.Options.CompilationCacheMaxBytes;
	// wasmreconcile_compilation_cache_*). Defaults to 0: no bound; operator
	// run's --compilation-cache-max-size defaults to 512Mi.
	CompilationCacheMaxBytes int64
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
	// Ceilings cap the Fuel, Timeout and MemoryLimitPages of every module:
	// no Policy.Limits, Module.Policy.Limits, ReconcileModule spec.limits
	// or manifest can exceed them. A limit over its ceiling is clamped to
	// it, and reported (a ReconcileModule's status and a Warning Event; a
	// log line for files). Its other fields are ignored. Zero fields take
	// engine.DefaultMaxFuel (5,000,000,000), engine.DefaultMaxTimeout (60 s)
	// and engine.DefaultMaxMemoryPages (4096 pages = 256 MiB).
	Ceilings engine.Limits
}

// ModuleControllerOptions configure the controller of ReconcileModules
// (Options.ReconcileModules). Zero fields take the stated defaults.
type ModuleControllerOptions struct {
	// StatusInterval is how often a ReconcileModule's status statistics
	// are refreshed. Defaults to DefaultModuleStatusInterval (30 s).
	StatusInterval time.Duration
	// LoadWorkers is how many ReconcileModules are reconciled, and so
	// fetched and compiled, at once: one module's slow load never holds up
	// the others'. Defaults to DefaultModuleLoadWorkers (4).
	LoadWorkers int
}

// HealthOptions configure the health of modules' caches and convergence.
// Zero fields take the stated defaults.
type HealthOptions struct {
	// QuiescentAfter is how long a converged module must write nothing to
	// be reported quiescent. Defaults to 1 minute.
	QuiescentAfter time.Duration
	// SyncTimeout is how long a module's kind may take to sync before a
	// SyncFailed warning. Defaults to DefaultSyncTimeout (2 minutes).
	SyncTimeout time.Duration
	// StaleAfter is how long a module's kind may see no watch event or list
	// before a CacheStale warning; it needs Options.Informers. Defaults to
	// DefaultStaleAfter (10 minutes).
	StaleAfter time.Duration
	// Interval is how often modules' caches are checked for those
	// warnings. Defaults to DefaultHealthInterval (10 seconds).
	Interval time.Duration
}

// Module is a module a program adds with Host.Apply.
type Module struct {
	// Name must match the module's manifest. Defaults to the manifest's.
	Name string
	// Source fetches the module's bytes. Required.
	Source source.Fetcher
	// SHA256, when set, pins the bytes (hex, optionally "sha256:"-prefixed).
	SHA256 string
	// Policy is the module's own layer over Options.Policy: the fields it
	// sets override Options.Policy's (policy.Policy.Merge).
	Policy policy.Policy
	// Config is passed to the guest as Request.Config. Defaults to
	// Options.ModuleConfig[Name].
	Config map[string]any
	// ServiceAccount, "namespace/name", is the module's identity.
	// Defaults to Options.DefaultServiceAccount.
	ServiceAccount string
}

// ShardingOptions configure sharding across replicas (docs/scaling.md):
// each replica renews a Lease of its own in Namespace, the live ones split
// the slots of the hash of an object's namespace by rendezvous hashing,
// and each reconciles only the objects of the slots it holds; a slot moves
// only once its old holder has stopped working on it. In the server-side
// mode each replica's informers list and watch only its share (the API
// server's shardSelector, feature gate ShardedListAndWatch); in the
// client-side mode every replica caches every object. Module-level work
// (ReconcileModule status, finalizer drains) stays with the replica the
// manager elects: run the manager with leader election.
type ShardingOptions struct {
	// Enabled turns sharding on. Defaults to false.
	Enabled bool
	// Identity names this replica in the group: its pod's name. Required
	// with Enabled; two live replicas of one identity stop with an error.
	Identity string
	// Namespace holds the replicas' Leases. Required with Enabled (New
	// sets the leader election's).
	Namespace string
	// Group names the replicas that share the work (the Leases' label).
	// Defaults to DefaultShardGroup.
	Group string
	// Slots is the number of slots the hash space is cut into, a power of
	// two up to 4096; every replica of a group must use the same. Defaults
	// to DefaultShardSlots.
	Slots int
	// LeaseDuration, RenewDeadline and RetryPeriod time the replicas'
	// Leases: a replica that cannot renew for RenewDeadline stops its
	// work, and the others take its slots LeaseDuration after they last
	// saw its Lease change. Defaults: DefaultLeaseDuration,
	// DefaultRenewDeadline, DefaultRetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Mode is ShardModeAuto (server-side when the API server filters by
	// shard, no module reads beyond its own namespace and the cache's
	// informers are Options.Informers; client-side otherwise, saying why
	// in the log and /readyz/modules), ShardModeServerSide (an error at
	// start when it cannot run) or ShardModeClientSide. Defaults to
	// ShardModeAuto.
	Mode string
	// Key is what places an object in a slot: "namespace" (an object, its
	// children and what it reads in its namespace land on one replica; a
	// namespace never splits) or "uid" (objects spread evenly whatever
	// their namespaces, so one large namespace splits; it runs
	// client-side, every replica caching every object, since children
	// and reads are not placed by their owner's uid). Defaults to
	// "namespace".
	Key string
	// NamespaceDebounce, server-side, is how long a replica gathers
	// namespaces that come and go before it lists its share again with
	// them. Defaults to DefaultShardNamespaceDebounce.
	NamespaceDebounce time.Duration
	// ReshardTimeout, server-side, bounds the wait for the informers to
	// list new slots' objects before the slots are admitted (they are
	// admitted then anyway, and reconciled as their objects arrive), and
	// the probe of the API server at start. Defaults to
	// DefaultShardReshardTimeout.
	ReshardTimeout time.Duration
	// Settle is how long a replica that finds no other live replica when
	// it starts waits for replicas starting at the same time before it
	// claims every slot (a replica that finds peers claims its share at
	// once). Defaults to DefaultShardSettle; negative: no wait.
	Settle time.Duration
	// BalanceTolerance is how far above the mean load (the objects of
	// its slots) a replica may hold before the elected replica moves
	// slots to balance them, as a fraction (0.1: 10%); a plan then
	// aims at half of it. Every replica follows the plans it sees,
	// whatever its own setting. Defaults to DefaultShardBalanceTolerance;
	// negative: this replica makes no plans and publishes no load.
	BalanceTolerance float64
	// BalanceInterval paces balancing, at least a second: every replica
	// counts its load every half interval, at the wall clock's multiples
	// of it (the same moments in every replica), and the elected replica
	// compares the counts of one moment a quarter interval after each,
	// making at most one plan an interval. Defaults to
	// DefaultShardBalanceInterval.
	BalanceInterval time.Duration

	// agent, set by New, names the replica and its claims' generation in
	// the User-Agent of the operator's requests.
	agent *shardAgent
}

// Defaults of ShardingOptions.
const (
	DefaultShardGroup             = "wasmreconcile-operator"
	DefaultShardSlots             = shard.DefaultSlots
	DefaultShardNamespaceDebounce = time.Second
	DefaultShardReshardTimeout    = 30 * time.Second
	DefaultShardSettle            = sharding.DefaultSettle
	DefaultShardBalanceTolerance  = 0.1
	DefaultShardBalanceInterval   = 30 * time.Second
)
