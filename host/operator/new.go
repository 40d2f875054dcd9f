package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/internal/authz"
	"github.com/wasmreconcile/wasmreconcile/host/internal/flightrecorder"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
)

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
	io.Packed = true // the cache's transform packs (below)
	informers, err := informer.New(io)
	if err != nil {
		return nil, fmt.Errorf("informer metrics: %w", err)
	}
	// Guests never see managedFields, and nothing of the host reads them
	// from the cache: strip them, often half of an object's memory.
	// The cache's own HTTP client cuts managedFields out of the JSON before
	// it is decoded; the transform stays for what comes otherwise. The
	// cache keeps unstructured objects packed: JSON beside typed metadata,
	// two fifths of the maps' memory (package packed).
	if opts.Sharding.Enabled && opts.Sharding.Identity != "" {
		// Every request names the replica and its claims' generation in
		// its User-Agent (the API server's audit log shows who wrote).
		cfg = rest.CopyConfig(cfg)
		opts.Sharding.agent = newShardAgent(cfg, opts.Sharding.Identity)
		cfg.Wrap(opts.Sharding.agent.wrap)
	}
	cacheHTTP, err := informer.HTTPClient(cfg)
	if err != nil {
		return nil, err
	}
	cacheOptions := cache.Options{
		HTTPClient:       cacheHTTP,
		NewInformer:      informers.NewInformer,
		DefaultTransform: packed.Transform(stripManagedFields(cache.TransformStripManagedFields())),
	}
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
		HealthProbeBindAddress:        "0", // probeServer serves them
		PprofBindAddress:              mo.PprofBindAddress,
		Cache:                         cacheOptions,
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Controller:                    config.Controller{SkipNameValidation: &mo.SkipControllerNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("creating controller manager: %w", err)
	}
	opts.Informers = informers
	if opts.Sharding.Enabled {
		if !mo.LeaderElection {
			return nil, errors.New("sharding needs leader election (--leader-elect): module-level work (ReconcileModule status, finalizer drains) has one writer, the elected replica")
		}
		if opts.Sharding.Namespace == "" {
			opts.Sharding.Namespace = mo.LeaderElectionNamespace
		}
	}
	h, err := Setup(mgr, opts)
	if err != nil {
		return nil, err
	}
	if mo.HealthProbeBindAddress != "0" {
		probes, err := probeServer(mo.HealthProbeBindAddress, h)
		if err == nil {
			if err = mgr.Add(probes); err != nil {
				_ = probes.Listener.Close()
			}
		}
		if err != nil {
			_ = h.Close(context.Background())
			return nil, err
		}
	}
	if fr := h.FlightRecorder(records.mayRead(mgr.GetRESTMapper())); fr != nil {
		records.set(fr)
	}
	return &Operator{Host: h, mgr: mgr}, nil
}

// Defaults of IdentityOptions.AuthorizationTTL and AuthorizationDeniedTTL.
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

// stripManagedFields is typed, controller-runtime's transform, for an
// unstructured object a map deletion: controller-runtime's converts an
// unstructured object's managedFields to typed entries (reflection) only to
// see whether there are any, 2.5% of the operator's CPU at 10,000 objects
// (docs/benchmarks.md).
func stripManagedFields(typed toolscache.TransformFunc) toolscache.TransformFunc {
	return func(in any) (any, error) {
		if u, ok := in.(*unstructured.Unstructured); ok {
			if md, ok := u.Object["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
			}
			return in, nil
		}
		return typed(in)
	}
}
