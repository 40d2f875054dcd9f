// Package modulecontroller reconciles ReconcileModule objects (package
// api/v1alpha1): it turns each object's spec into a module source and a
// supervisor.Spec, has the supervisor fetch, verify, load and swap the
// module in, and reports the outcome and the module's statistics in the
// object's status, conditions and Events. Module load-health warnings
// (SyncFailed, CacheStale) are recorded as Events on the object. Limits
// over the operator's ceilings (engine.Options.Ceilings) are clamped by the
// engine; the controller reports the limits in effect in
// status.effectiveLimits, the clamps in the LimitsClamped condition, and
// each new set of clamps in one Warning Event.
package modulecontroller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// Condition types and reasons of a ReconcileModule's status.
const (
	ConditionReady      = "Ready"      // a version serves (and is not paused)
	ConditionLoading    = "Loading"    // new bytes are being fetched and compiled
	ConditionLoadFailed = "LoadFailed" // the last spec could not be loaded
	// ConditionLimitsClamped is True when a limit of the version serving
	// (from spec.limits, the operator's flags or the manifest) was over an
	// operator ceiling and was lowered to it; its message lists each.
	ConditionLimitsClamped = "LimitsClamped"

	ReasonLoaded         = "Loaded"
	ReasonPaused         = "Paused"
	ReasonFetching       = "Fetching"
	ReasonFetchFailed    = "FetchFailed"
	ReasonSourceRefused  = "SourceRefused" // the operator's source policy refused the source (docs/sources.md)
	ReasonDigestMismatch = "DigestMismatch"
	ReasonInvalidModule  = "InvalidModule"
	ReasonNameMismatch   = "NameMismatch"  // the manifest names the module differently
	ReasonKindsMismatch  = "KindsMismatch" // spec.for, owns or reads disagree with the manifest
	ReasonNameConflict   = "NameConflict"  // a file module of the same name runs
	ReasonKindConflict   = "KindConflict"  // another module already reconciles spec.for's kind
	ReasonLimitsClamped  = "LimitsClamped" // a limit was lowered to an operator ceiling
	ReasonWithinCeilings = "WithinCeilings"
	ReasonSyncFailed     = supervisor.ReasonSyncFailed
	// ReasonCachesNotSynced: Ready is False because the module's caches
	// cannot sync (a kind not served, a kind the operator may not list);
	// the message says why. The other modules are not affected.
	ReasonCachesNotSynced = "CachesNotSynced"
	ReasonCacheStale      = supervisor.ReasonCacheStale

	// ConditionDraining is True while a deleted ReconcileModule waits for
	// its module's finalizer to be removed from the module's objects; its
	// message counts the objects still holding it.
	ConditionDraining = "Draining"
	ReasonDraining    = "Draining"
	ReasonDeleting    = "Deleting"
)

// DrainFinalizer is the finalizer of a ReconcileModule whose module
// declares a finalizer: the ReconcileModule stays until the module's
// finalizer is removed from every object of its kind, so that deleting it
// leaves no object stuck terminating.
const DrainFinalizer = "wasmreconcile.io/drain"

// Options configure the controller. Zero fields take the stated defaults.
type Options struct {
	// DefaultServiceAccount, "namespace/name", is the account of the
	// modules whose spec.serviceAccountName is empty. Defaults to "": the
	// operator's own identity.
	DefaultServiceAccount string
	// ServiceAccountNamespace is the namespace of spec.serviceAccountName
	// when spec.serviceAccountNamespace is empty: the operator's. Defaults
	// to "default".
	ServiceAccountNamespace string
	// MaxModuleBytes caps a module's size, compressed and uncompressed.
	// Defaults to source.DefaultMaxBytes (64 MiB).
	MaxModuleBytes int64
	// FetchTimeout bounds fetching a module from a URL or a registry.
	// Defaults to 30 s.
	FetchTimeout time.Duration
	// StatusInterval is how often a serving module's statistics are
	// refreshed in its status. Defaults to 30 s.
	StatusInterval time.Duration
	// HTTPClient fetches url sources. Defaults to
	// source.NewHTTPClient(URLPolicy), which checks every address it dials.
	// A client of the caller's keeps its Transport: URLPolicy's hosts and
	// redirect rules still apply, its address rules only through a
	// Transport of source.NewTransport.
	HTTPClient *http.Client
	// URLPolicy is what url sources may reach. Defaults to the zero policy:
	// any host with public addresses (source.URLPolicy).
	URLPolicy source.URLPolicy
	// SourceNamespaces are the namespaces configMap and secret sources may
	// name; "*" is any. Defaults to the namespace the operator runs in (its
	// service account's, in-cluster), else "default".
	SourceNamespaces []string
	// BlobCache is a directory where oci sources keep the manifests and
	// modules they fetched, by digest, so that a restart while the
	// registry is down still loads them. Defaults to "": nothing is kept.
	BlobCache string
	// Workers is how many ReconcileModules are reconciled at once, and so
	// how many modules may fetch and compile at once: one module's slow
	// load (a large module, an unreachable registry, a compile stopped at
	// its limits) never holds up the others'. Defaults to 4.
	Workers int
}

func (o Options) withDefaults() Options {
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = source.DefaultMaxBytes
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = source.DefaultURLTimeout
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = 30 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.HTTPClient == nil {
		o.HTTPClient = source.NewHTTPClient(o.URLPolicy)
	}
	if len(o.SourceNamespaces) == 0 {
		o.SourceNamespaces = []string{OperatorNamespace()}
	}
	return o
}

// OperatorNamespace is the namespace the operator runs in: its service
// account's, in-cluster, else "default".
func OperatorNamespace() string {
	if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(bytes.TrimSpace(ns)) > 0 {
		return string(bytes.TrimSpace(ns))
	}
	return "default"
}

// Controller reconciles ReconcileModules.
type Controller struct {
	client     client.Client
	reader     client.Reader // live reads of ConfigMaps and Secrets: no cluster-wide Secret cache
	supervisor *supervisor.Supervisor
	recorder   recorder.EventRecorder
	opts       Options
	leader     func() bool // whether this replica leads: only the leader writes

	// By module name. Reconcile runs on several workers (Options.Workers),
	// never two for one name: each map is locked, its entries are not.
	applied   lockedMap[applied]                   // the generation serving
	failedGen lockedMap[applied]                   // the generation that last failed to load
	written   lockedMap[writtenStatus]             // the status last written
	mu        sync.Mutex                           // guards objects
	objects   map[string]*v1alpha1.ReconcileModule // the object last seen, for health Events
}

// lockedMap is a map safe for concurrent use.
type lockedMap[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (l *lockedMap[V]) get(k string) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	return v, ok
}

func (l *lockedMap[V]) set(k string, v V) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]V{}
	}
	l.m[k] = v
}

func (l *lockedMap[V]) del(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, k)
}

type writtenStatus struct {
	uid    types.UID
	status v1alpha1.ReconcileModuleStatus
}

type applied struct {
	uid        types.UID // a ReconcileModule deleted and created again is new
	generation int64
}

// Setup registers the controller with mgr. It needs the ReconcileModule CRD
// installed and v1alpha1 in mgr's scheme.
func Setup(mgr ctrl.Manager, sup *supervisor.Supervisor, opts Options) error {
	gvk := v1alpha1.GroupVersion.WithKind("ReconcileModule")
	if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return fmt.Errorf("the ReconcileModule CRD is not installed (%w); apply config/crd, or run without ReconcileModules (--reconcile-modules=false)", err)
	}
	if err := opts.URLPolicy.Validate(); err != nil {
		return err
	}
	c := &Controller{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), supervisor: sup,
		recorder: mgr.GetEventRecorder("wasmreconcile"), opts: opts.withDefaults(),
		objects: map[string]*v1alpha1.ReconcileModule{},
	}
	hosts := any("any")
	if len(c.opts.URLPolicy.AllowedHosts) > 0 {
		hosts = c.opts.URLPolicy.AllowedHosts
	}
	mgr.GetLogger().WithName("reconcilemodule").Info("module source policy (docs/sources.md)",
		"sourceNamespaces", c.opts.SourceNamespaces, "urlAllowedHosts", hosts, "urlAllowPrivate", c.opts.URLPolicy.AllowPrivate,
		"customHTTPClient", opts.HTTPClient != nil)
	c.leader = func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
	// Every replica fetches and loads its modules, so that a new leader
	// reconciles at once; only the leader writes status and Events (the
	// supervisor starts module controllers only in the leader).
	everyReplica := false
	return ctrl.NewControllerManagedBy(mgr).Named("reconcilemodule").For(&v1alpha1.ReconcileModule{}).
		WithOptions(crcontroller.Options{NeedLeaderElection: &everyReplica, MaxConcurrentReconciles: c.opts.Workers}).Complete(c)
}

// failedGenIs reports whether gen of module name last failed to load.
func (c *Controller) failedGenIs(name string, gen applied) bool {
	f, ok := c.failedGen.get(name)
	return ok && f == gen
}

// event records an Event, in the leader only.
func (c *Controller) event(obj *v1alpha1.ReconcileModule, typ, reason, action, format string, args ...any) {
	if c.leader() {
		c.recorder.Eventf(obj, nil, typ, reason, action, format, args...)
	}
}

// Reconcile loads a ReconcileModule's module when its generation changes,
// removes it when the object is gone, and otherwise refreshes its status
// every StatusInterval.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	obj := &v1alpha1.ReconcileModule{}
	if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			if c.supervisor.Remove(req.Name) {
				logger.Info("ReconcileModule deleted; module stopped", "module", req.Name)
			}
			c.applied.del(req.Name)
			c.failedGen.del(req.Name)
			c.written.del(req.Name)
			c.mu.Lock()
			delete(c.objects, req.Name)
			c.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !obj.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, obj)
	}
	c.mu.Lock()
	c.objects[obj.Name] = obj.DeepCopy()
	c.mu.Unlock()
	status := c.statusOf(obj)
	gen := applied{uid: obj.UID, generation: obj.Generation}

	a, known := c.applied.get(obj.Name)
	if known && a.uid != obj.UID {
		known = false // deleted and created again: a new module
	}
	switch {
	case c.failedGenIs(obj.Name, gen):
		// This generation failed for a reason only a spec change fixes; do
		// not fetch and compile it again on every event.
		if !known {
			return ctrl.Result{}, nil
		}
	case !known || a != gen:
		setCondition(&status, obj, ConditionLoading, metav1.ConditionTrue, ReasonFetching, "fetching and compiling the module")
		if err := c.writeStatus(ctx, obj, status); err != nil {
			return ctrl.Result{}, err
		}
		src, promoted := obj.Spec.Source, promotedIn(obj, &status)
		if promoted {
			src = obj.Spec.Candidate.Source // promoted in this generation (before a restart, or by the leader)
		}
		loaded, reason, err := c.loadFrom(ctx, obj, src)
		if err != nil {
			if reason != ReasonFetchFailed {
				c.failedGen.set(obj.Name, gen)
			}
			return ctrl.Result{}, c.failed(ctx, obj, reason, err)
		}
		c.failedGen.del(obj.Name)
		c.applied.set(obj.Name, gen)
		known = true
		status.Digest = loaded.Digest
		at := metav1.NewTime(loaded.At)
		status.LoadedAt = &at
		if loaded.Compile > 0 {
			status.CompileSeconds = loaded.Compile.Seconds()
		}
		setCondition(&status, obj, ConditionLoadFailed, metav1.ConditionFalse, ReasonLoaded, "")
		c.event(obj, corev1.EventTypeNormal, ReasonLoaded, "Load", "module %s serving (%s, compile %s)", loaded.Digest, loaded.Result, loaded.Compile.Round(time.Millisecond))
		c.reportLimits(obj, &status, loaded.limits, loaded.clamped)
		c.setCandidate(ctx, obj, &status, promoted)
	}
	if err := c.rollout(ctx, obj, &status); err != nil {
		return ctrl.Result{}, err
	}
	setCondition(&status, obj, ConditionLoading, metav1.ConditionFalse, ReasonLoaded, "")
	if obj.Spec.Paused {
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonPaused, "spec.paused is true: the module is not called")
	} else if st, ok := c.supervisor.Status(obj.Name); ok && !st.Synced && st.SyncProblem != "" {
		// Unready by itself: the operator and its other modules serve.
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonCachesNotSynced,
			"module "+status.Digest+" loaded, but its caches cannot sync: "+st.SyncProblem)
	} else {
		msg := "module " + status.Digest + " serving"
		if c.failedGenIs(obj.Name, gen) {
			msg = "module " + status.Digest + " still serving; the new spec failed to load (see LoadFailed)"
		}
		setCondition(&status, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, msg)
	}
	if st, ok := c.supervisor.Status(obj.Name); ok {
		s := st.Stats
		status.Stats = &v1alpha1.Stats{Reconciles: s.Reconciles, Errors: s.Errors, MeanFuel: s.MeanFuel, MeanDurationSeconds: s.MeanDurationSeconds}
		if s.LastError != "" && !c.failedGenIs(obj.Name, gen) {
			status.LastError = s.LastError
		}
	}
	status.ObservedGeneration = obj.Generation
	if err := c.writeStatus(ctx, obj, status); err != nil {
		return ctrl.Result{}, err
	}
	if st, ok := c.supervisor.Status(obj.Name); ok && st.Loaded.Manifest.Finalizer && c.leader() && !controllerutil.ContainsFinalizer(obj, DrainFinalizer) {
		if err := c.patchFinalizer(ctx, obj, true); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: c.opts.StatusInterval}, nil
}

// finalize handles a ReconcileModule being deleted: its module is removed
// at once and, while the supervisor drains the module's finalizer from the
// module's objects, the Draining condition counts the objects still
// holding it; once drained, DrainFinalizer is removed and the object goes.
func (c *Controller) finalize(ctx context.Context, obj *v1alpha1.ReconcileModule) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	if c.supervisor.Remove(obj.Name) {
		logger.Info("ReconcileModule deleted; module stopped", "module", obj.Name)
	}
	c.mu.Lock()
	delete(c.objects, obj.Name) // no health Events on an object being deleted
	c.mu.Unlock()
	c.applied.del(obj.Name)
	c.failedGen.del(obj.Name)
	if !controllerutil.ContainsFinalizer(obj, DrainFinalizer) {
		return ctrl.Result{}, nil // nothing to wait for: it goes once other finalizers do
	}
	if d, ok := c.supervisor.Draining(obj.Name); ok {
		msg := fmt.Sprintf("removing finalizer %s from the module's %s objects: counting", d.Finalizer, d.Kind.Kind)
		if d.Remaining >= 0 {
			msg = fmt.Sprintf("removing finalizer %s from the module's %s objects: %d still hold it (%d released)", d.Finalizer, d.Kind.Kind, d.Remaining, d.Released)
		}
		status := c.statusOf(obj)
		setCondition(&status, obj, ConditionDraining, metav1.ConditionTrue, ReasonDraining, msg)
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, ReasonDeleting, "the ReconcileModule is being deleted: the module is stopped")
		if err := c.writeStatus(ctx, obj, status); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if !c.leader() {
		return ctrl.Result{}, nil
	}
	if err := c.patchFinalizer(ctx, obj, false); err != nil {
		return ctrl.Result{}, err
	}
	c.written.del(obj.Name)
	logger.Info("module finalizer drained; ReconcileModule released", "module", obj.Name)
	return ctrl.Result{}, nil
}

// patchFinalizer adds or removes DrainFinalizer on obj, with optimistic
// locking so that no other finalizer is lost; a conflict (our own status
// writes make the cached object stale) is retried from the live object.
func (c *Controller) patchFinalizer(ctx context.Context, obj *v1alpha1.ReconcileModule, add bool) error {
	cur := obj.DeepCopy()
	first := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if !first {
			cur = &v1alpha1.ReconcileModule{}
			if err := c.reader.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
				return err
			}
			if cur.UID != obj.UID {
				return nil // deleted and created again: not ours to change
			}
		}
		first = false
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		var changed bool
		if add {
			changed = controllerutil.AddFinalizer(cur, DrainFinalizer)
		} else {
			changed = controllerutil.RemoveFinalizer(cur, DrainFinalizer)
		}
		if !changed {
			return nil
		}
		return c.client.Patch(ctx, cur, patch)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ReconcileModule %s: finalizer %s: %w", obj.Name, DrainFinalizer, err)
	}
	return nil
}

// loadResult is a successful load: the supervisor's report, and the limits the
// version serving runs under with what the engine clamped to reach them.
type loadResult struct {
	supervisor.Loaded
	limits  engine.Limits
	clamped []string
}

// loadFrom builds the module's source and spec from obj with the bytes of
// src (spec.source, or the candidate's source once it is promoted) and
// applies them. It returns the condition reason of a failure.
func (c *Controller) loadFrom(ctx context.Context, obj *v1alpha1.ReconcileModule, src v1alpha1.Source) (loadResult, string, error) {
	spec := obj.Spec
	fetcher, err := c.fetcher(src)
	if err != nil {
		return loadResult{}, ReasonFetchFailed, fmt.Errorf("module[%s]: %w", obj.Name, err)
	}
	var cfg map[string]any
	if spec.Config != nil && len(spec.Config.Raw) > 0 {
		if err := json.Unmarshal(spec.Config.Raw, &cfg); err != nil {
			return loadResult{}, ReasonInvalidModule, fmt.Errorf("module[%s]: spec.config: %w", obj.Name, err)
		}
	}
	var timeout time.Duration
	if spec.Limits.Timeout != nil {
		timeout = spec.Limits.Timeout.Duration
	}
	account, err := c.serviceAccount(spec)
	if err != nil {
		return loadResult{}, ReasonInvalidModule, fmt.Errorf("module[%s]: %w", obj.Name, err)
	}
	name := obj.Name
	var served loadResult // what Check saw of the version about to serve
	l, err := c.supervisor.Apply(ctx, supervisor.Spec{
		Name: name, Source: fetcher, SHA256: src.SHA256, Owner: "the ReconcileModule " + name,
		Limits:                  engine.Limits{Fuel: spec.Limits.Fuel, Timeout: timeout, MemoryLimitPages: spec.Limits.MemoryPages},
		Config:                  cfg,
		Paused:                  spec.Paused,
		ReadNamespaces:          spec.ReadNamespaces,
		ServiceAccount:          account,
		MaxConcurrentReconciles: spec.Limits.MaxConcurrentReconciles,
		RateLimit:               ratelimit.Options{QPS: spec.Limits.Rate.QPS, Burst: spec.Limits.Rate.Burst},
		Check: func(m *engine.Module) error {
			served.limits, served.clamped = m.Limits(), m.Clamped()
			return checkKinds(spec, m)
		},
		OnHealth: c.onHealth,
	})
	served.Loaded = l
	if err == nil {
		return served, "", nil
	}
	var (
		urlRefused *source.URLRefusedError
		nsRefused  *source.NamespaceRefusedError
		fetch      *supervisor.FetchError
		mismatch   *supervisor.DigestMismatchError
		named      *supervisor.NameMismatchError
		conflict   *supervisor.NameConflictError
		kindTaken  *supervisor.KindConflictError
		kinds      *KindsMismatchError
	)
	switch {
	case errors.As(err, &urlRefused), errors.As(err, &nsRefused):
		return served, ReasonSourceRefused, err
	case errors.As(err, &fetch):
		return served, ReasonFetchFailed, err
	case errors.As(err, &conflict):
		return served, ReasonNameConflict, err
	case errors.As(err, &kindTaken):
		return served, ReasonKindConflict, err
	case errors.As(err, &mismatch):
		return served, ReasonDigestMismatch, err
	case errors.As(err, &named):
		return served, ReasonNameMismatch, err
	case errors.As(err, &kinds):
		return served, ReasonKindsMismatch, err
	}
	return served, ReasonInvalidModule, err
}

// serviceAccount is the account, "namespace/name", the module of spec
// runs as: spec.serviceAccountName in spec.serviceAccountNamespace (by
// default the operator's), else Options.DefaultServiceAccount ("" is the
// operator's own identity).
func (c *Controller) serviceAccount(spec v1alpha1.ReconcileModuleSpec) (string, error) {
	if spec.ServiceAccountName == "" {
		if spec.ServiceAccountNamespace != "" {
			return "", fmt.Errorf("spec.serviceAccountNamespace is %q but spec.serviceAccountName is empty; name the account, or remove the namespace", spec.ServiceAccountNamespace)
		}
		return c.opts.DefaultServiceAccount, nil
	}
	ns := spec.ServiceAccountNamespace
	if ns == "" {
		ns = c.opts.ServiceAccountNamespace
	}
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + spec.ServiceAccountName, nil
}

// fetcher is the Fetcher of a source; the schema admits exactly one.
func (c *Controller) fetcher(src v1alpha1.Source) (source.Fetcher, error) {
	opts := source.Options{MaxBytes: c.opts.MaxModuleBytes, URL: c.opts.URLPolicy, Namespaces: c.opts.SourceNamespaces, BlobCache: c.opts.BlobCache}
	switch {
	case src.File != "":
		return source.File(src.File, opts), nil
	case src.ConfigMap != nil:
		return source.ConfigMap(c.reader, src.ConfigMap.Namespace, src.ConfigMap.Name, src.ConfigMap.Key, opts), nil
	case src.Secret != nil:
		return source.Secret(c.reader, src.Secret.Namespace, src.Secret.Name, src.Secret.Key, opts), nil
	case src.URL != "":
		return source.URL(c.opts.HTTPClient, src.URL, c.opts.FetchTimeout, opts), nil
	case src.OCI != nil:
		var creds source.Credentials
		if ps := src.OCI.PullSecret; ps != nil {
			creds = source.PullSecret(c.reader, ps.Namespace, ps.Name, opts)
		}
		return source.OCI(src.OCI.Ref, creds, c.opts.FetchTimeout, opts), nil
	}
	return nil, errors.New("no source set; set one of spec.source.file, configMap, secret, url and oci")
}

// reportLimits puts the limits of the version now serving in status, and
// the LimitsClamped condition; a Warning Event says what was clamped, once
// per new set of clamps (not again on a reload that clamps the same).
func (c *Controller) reportLimits(obj *v1alpha1.ReconcileModule, status *v1alpha1.ReconcileModuleStatus, l engine.Limits, clamped []string) {
	status.EffectiveLimits = &v1alpha1.EffectiveLimits{Fuel: l.Fuel, Timeout: metav1.Duration{Duration: l.Timeout}, MemoryPages: l.MemoryLimitPages}
	if len(clamped) == 0 {
		setCondition(status, obj, ConditionLimitsClamped, metav1.ConditionFalse, ReasonWithinCeilings, "every limit is within the operator's ceilings")
		return
	}
	msg := "limits over the operator's ceilings were clamped: " + strings.Join(clamped, "; ") +
		"; lower spec.limits (or the module's manifest limits), or raise the ceiling"
	prev := meta.FindStatusCondition(status.Conditions, ConditionLimitsClamped)
	if prev == nil || prev.Status != metav1.ConditionTrue || prev.Message != msg {
		c.event(obj, corev1.EventTypeWarning, ReasonLimitsClamped, "Load", "%s", protocol.Cap(msg))
	}
	setCondition(status, obj, ConditionLimitsClamped, metav1.ConditionTrue, ReasonLimitsClamped, msg)
}

// onHealth records a module's load-health change as an Event on its
// ReconcileModule. The supervisor calls it in the leader only.
func (c *Controller) onHealth(e supervisor.HealthEvent) {
	c.mu.Lock()
	obj := c.objects[e.Module]
	c.mu.Unlock()
	if obj == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	c.recorder.Eventf(obj, nil, typ, e.Reason, "Sync", "%s", protocol.Cap(e.Message))
}

// KindsMismatchError reports a spec whose for, owns or reads disagree with
// the module's manifest.
type KindsMismatchError struct {
	Module, Field  string
	Spec, Declared any
}

func (e *KindsMismatchError) Error() string {
	return fmt.Sprintf("module[%s]: spec.%s is %v but the module's manifest declares %v; make spec.%s match the module, or remove it to take the manifest's",
		e.Module, e.Field, e.Spec, e.Declared, e.Field)
}

func toABI(gs []v1alpha1.GroupVersionKind) []abi.GroupVersionKind {
	out := make([]abi.GroupVersionKind, 0, len(gs))
	for _, g := range gs {
		out = append(out, abi.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind})
	}
	return out
}

func checkKinds(spec v1alpha1.ReconcileModuleSpec, m *engine.Module) error {
	man := m.Manifest()
	if spec.For != nil {
		if f := (abi.GroupVersionKind{Group: spec.For.Group, Version: spec.For.Version, Kind: spec.For.Kind}); f != man.For {
			return &KindsMismatchError{Module: m.Name(), Field: "for", Spec: f, Declared: man.For}
		}
	}
	same := func(a, b []abi.GroupVersionKind) bool { return (len(a) == 0 && len(b) == 0) || reflect.DeepEqual(a, b) }
	if spec.Owns != nil && !same(toABI(spec.Owns), man.Owns) {
		return &KindsMismatchError{Module: m.Name(), Field: "owns", Spec: toABI(spec.Owns), Declared: man.Owns}
	}
	if spec.Reads != nil && !same(toABI(spec.Reads), man.Reads) {
		return &KindsMismatchError{Module: m.Name(), Field: "reads", Spec: toABI(spec.Reads), Declared: man.Reads}
	}
	return nil
}

// failed records a load failure: LoadFailed with the reason, Ready as it is
// (a previous version may still serve), a Warning Event, and lastError. It
// returns nil for errors that only a spec change fixes, and the error (to
// retry with backoff) for fetch failures.
func (c *Controller) failed(ctx context.Context, obj *v1alpha1.ReconcileModule, reason string, err error) error {
	status := c.statusOf(obj)
	setCondition(&status, obj, ConditionLoadFailed, metav1.ConditionTrue, reason, err.Error())
	setCondition(&status, obj, ConditionLoading, metav1.ConditionFalse, reason, "")
	if a, ok := c.applied.get(obj.Name); ok && a.uid == obj.UID {
		setCondition(&status, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, "module "+status.Digest+" still serving; the new spec failed to load")
	} else {
		setCondition(&status, obj, ConditionReady, metav1.ConditionFalse, reason, "no version of the module has loaded")
	}
	status.LastError = err.Error()
	status.ObservedGeneration = obj.Generation
	c.event(obj, corev1.EventTypeWarning, reason, "Load", "%s", protocol.Cap(err.Error()))
	log.FromContext(ctx).Info("module not loaded", "reason", reason, "error", err.Error())
	if werr := c.writeStatus(ctx, obj, status); werr != nil {
		return werr
	}
	if reason == ReasonFetchFailed {
		return err // the source may appear: retry with backoff
	}
	return nil
}

// statusOf returns the status last written for obj, or obj's own. The
// cache may lag behind our own writes; starting from it could write an old
// condition back.
func (c *Controller) statusOf(obj *v1alpha1.ReconcileModule) v1alpha1.ReconcileModuleStatus {
	if w, ok := c.written.get(obj.Name); ok && w.uid == obj.UID {
		return *w.status.DeepCopy()
	}
	return *obj.Status.DeepCopy()
}

// writeStatus applies status in the leader; a standby only keeps it, and
// writes it (through the periodic refresh) once elected.
func (c *Controller) writeStatus(ctx context.Context, obj *v1alpha1.ReconcileModule, status v1alpha1.ReconcileModuleStatus) error {
	c.written.set(obj.Name, writtenStatus{uid: obj.UID, status: *status.DeepCopy()})
	if !c.leader() {
		return nil
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	patch.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ReconcileModule"))
	patch.SetName(obj.Name)
	if err := c.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner("wasmreconcile"), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing ReconcileModule %s status: %w", obj.Name, err)
	}
	return nil
}

// setCondition sets a condition, keeping lastTransitionTime when its status
// does not change.
func setCondition(status *v1alpha1.ReconcileModuleStatus, obj *v1alpha1.ReconcileModule, typ string, st metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: protocol.Truncate(msg, 32768), ObservedGeneration: obj.Generation})
}
