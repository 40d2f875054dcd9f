package supervisor

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Options configure a Supervisor. Fields marked required have no default.
type Options struct {
	// Manager runs the controllers and provides the cache, the RESTMapper,
	// the scheme and the Event recorders. Required.
	Manager ctrl.Manager
	// Client reads from the informer cache (unstructured objects included)
	// and writes to the API server. Required.
	Client client.Client
	// Engine loads modules. Required.
	Engine *engine.Engine
	// Identities gives the modules that name a Spec.ServiceAccount their
	// account's identity: writes and Events impersonate it, cache reads
	// are authorized for it. Defaults to identities of the Manager's
	// config with authz's defaults, made when first needed.
	Identities *authz.Identities
	// Metrics receive the per-module metrics. Required.
	Metrics *metrics.Metrics

	// Policy is every module's policy (package policy); a Spec's Policy
	// overrides it field by field (policy.Policy.Merge), and the module's
	// manifest may lower its Limits (never raise them). Zero fields take
	// policy's defaults.
	Policy policy.Policy
	// KeepVersions is how many versions of each module stay compiled,
	// counting the one serving, so that a rollback is instant. Defaults to 3.
	KeepVersions int
	// StopTimeout bounds how long Start, once its context ends, waits for
	// the module controllers to stop before it returns (Close still waits
	// for them). Keep it under the manager's GracefulShutdownTimeout.
	// Defaults to 10 seconds.
	StopTimeout time.Duration
	// ModuleConfig is the config of modules whose Spec carries none, by
	// module name. Defaults to none.
	ModuleConfig map[string]map[string]any
	// ModuleReadNamespaces are, by module name, the namespaces beyond the
	// reconciled object's own that a module's guest may read, for modules
	// whose Spec.Policy.ReadNamespaces is nil. Defaults to none.
	ModuleReadNamespaces map[string][]string
	// Interpreter, when set, makes new bytes serve first from this engine
	// (one built with engine.Options{Interpreter: true}), which loads about
	// 5x faster than the compiler but runs guests tens of times slower;
	// the compiled version replaces it as soon as it is ready. Fuel is the
	// same on both, so results do not change; deadlines may be hit more
	// often meanwhile. Defaults to nil: new bytes serve once compiled.
	Interpreter *engine.Engine

	// LastEvent tells when the informer of a kind last saw an event or a
	// list, for CacheStale warnings. Defaults to nil: no staleness checks.
	LastEvent func(schema.GroupKind) time.Time
	// LastError tells the last error the informer of a kind reported since
	// its last list or event (a list refused as Forbidden), to say why a
	// module's cache has not synced. Defaults to nil: no reason given.
	LastError func(schema.GroupKind) error
	// HealthInterval is how often each module's caches are checked.
	// Defaults to 10 seconds.
	HealthInterval time.Duration
	// SyncTimeout is how long a module's caches may take to sync before a
	// SyncFailed warning. Defaults to 2 minutes.
	SyncTimeout time.Duration
	// StaleAfter is how long a module's kind may go without a watch event
	// (bookmarks count) or list before a CacheStale warning. Defaults to 10
	// minutes.
	StaleAfter time.Duration
	// QuiescentAfter is how long a converged module must write nothing to
	// be reported quiescent. Defaults to 1 minute.
	QuiescentAfter time.Duration

	// Log receives the supervisor's log lines. Defaults to
	// ctrl.Log.WithName("supervisor").
	Log logr.Logger
	// FlightRecorder, when set, keeps every module's failed calls and a
	// sample of its successful ones (package flightrecorder). Defaults to
	// nil: nothing is recorded.
	FlightRecorder *flightrecorder.Recorder
	// Shard, when set, shards module controllers across replicas (issue
	// 27): they run in every replica, not only the elected one, and each
	// reconcile asks Shard first (reconciler.Options.Shard). Leading then
	// tells the elected replica, which alone drains finalizers. Defaults
	// to nil: module controllers run in the elected replica only.
	Shard func(key types.NamespacedName, uid types.UID) (exit func(), ok bool)
	// ShardByUID is every module's reconciler.Options.ShardByUID: Shard
	// places objects by uid. Defaults to false: by key.
	ShardByUID bool
	// Admits is every module's reconciler.Options.Admits, with Shard.
	// Defaults to nil: every event is queued.
	Admits func(namespace string, uid types.UID) bool
	// ReadLive is every module's reconciler.Options.ReadLive.
	ReadLive func(gvk schema.GroupVersionKind, namespace string) bool
	// Leading reports whether this replica is the elected one, with Shard.
	// Defaults to nil: every replica that runs the supervisor leads.
	Leading func() bool
}

// Defaults of Options.
const (
	DefaultKeepVersions   = 3
	DefaultHealthInterval = 10 * time.Second
	DefaultSyncTimeout    = 2 * time.Minute
	DefaultStaleAfter     = 10 * time.Minute
)

func (o Options) withDefaults() Options {
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.KeepVersions <= 0 {
		o.KeepVersions = DefaultKeepVersions
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	if o.QuiescentAfter <= 0 {
		o.QuiescentAfter = time.Minute
	}
	if o.Log.GetSink() == nil {
		o.Log = ctrl.Log.WithName("supervisor")
	}
	return o
}

// Spec is what to run as one module.
type Spec struct {
	// Name names the module: its controller, metrics label, field manager
	// and finalizer suffix. It must match the name in the module's
	// manifest. Defaults to the manifest's name.
	Name string
	// Source fetches the module's bytes. Required.
	Source source.Fetcher
	// SHA256, when set, pins the bytes: hex, optionally prefixed "sha256:".
	SHA256 string
	// Owner describes what declares the module, e.g. "the file
	// /m/widget.wasm" or "the ReconcileModule widget". A module of one name
	// is refused from a second owner, so that two files, or a file and a
	// ReconcileModule, cannot replace each other. Defaults to "".
	Owner string
	// Policy overrides Options.Policy where set (policy.Policy.Merge).
	// Apply keeps the merged, defaulted result as the Spec that serves.
	Policy policy.Policy
	// Config is passed to the guest as Request.Config. Defaults to
	// Options.ModuleConfig[Name].
	Config map[string]any
	// Paused stops calling the guest; resuming requeues every object.
	Paused bool
	// Check, when set, vets a loaded module before it serves; an error
	// refuses it and the previous version keeps serving.
	Check func(*engine.Module) error
	// OnHealth receives the module's load-health changes (SyncFailed and
	// Synced, CacheStale and Fresh), in the leader. Defaults to logging
	// them.
	OnHealth func(HealthEvent)
	// ServiceAccount, "namespace/name", is the identity the module's writes
	// and cache reads are made with (impersonated). Defaults to "": the
	// operator's own identity.
	ServiceAccount string
	// Yields makes the module give way to a module of the same name from
	// an owner whose spec does not yield (a ReconcileModule, when the
	// operator's file modules yield: operator dev): that one takes over,
	// and the yielding spec is kept and serves again once the other is
	// removed (RemoveOwned). An Apply of a yielding spec while the other
	// serves keeps it for then and reports Loaded.Result "yielded".
	// Defaults to false: a module of a second owner is a
	// *NameConflictError.
	Yields bool
}

// HealthEvent is a change in a module's load health: a Warning when a
// problem starts, and a Normal event when it ends.
type HealthEvent struct {
	Module  string
	Warning bool
	// Reason is SyncFailed, Synced, CacheStale or Fresh.
	Reason  string
	Message string
}

// Health reasons.
const (
	ReasonSyncFailed = "SyncFailed" // the module's kind's cache has not synced in Options.SyncTimeout
	ReasonSynced     = "Synced"
	ReasonCacheStale = "CacheStale" // no event or list for the module's kind in Options.StaleAfter
	ReasonFresh      = "Fresh"
)

// Loaded describes the version serving after a successful Apply.
type Loaded struct {
	Name   string
	Digest string // "sha256:<hex>" of the module's bytes
	Bytes  int
	At     time.Time
	// Compile is how long loading took (instrument, compile, manifest);
	// zero when the version was still compiled from before.
	Compile time.Duration
	// Result is how the version was put to serve: restarted, swapped,
	// cached or unchanged; or "yielded" when it does not serve, kept for
	// when the module of another owner that serves goes (Spec.Yields).
	Result   string
	Manifest abi.Manifest
}
