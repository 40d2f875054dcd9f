// Package modulecontroller reconciles ReconcileModule objects
// (config/crd/reconcilemodules.wasmreconcile.io.yaml): it fetches each
// module's bytes from its source, has the supervisor verify, load and swap
// them in, and reports the outcome in the object's status and Events.
package modulecontroller

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	dto "github.com/prometheus/client_model/go"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/informer"
	"github.com/wasmreconcile/wasmreconcile/host/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/ratelimit"
	"github.com/wasmreconcile/wasmreconcile/host/supervisor"
)

// GVK is the ReconcileModule kind.
var GVK = schema.GroupVersionKind{Group: "wasmreconcile.io", Version: "v1alpha1", Kind: "ReconcileModule"}

// Condition types and reasons of a ReconcileModule's status.
const (
	ConditionReady      = "Ready"      // a version serves (and is not paused)
	ConditionLoading    = "Loading"    // new bytes are being fetched and compiled
	ConditionLoadFailed = "LoadFailed" // the last spec could not be loaded

	ReasonLoaded         = "Loaded"
	ReasonPaused         = "Paused"
	ReasonFetchFailed    = "FetchFailed"
	ReasonDigestMismatch = "DigestMismatch"
	ReasonInvalidModule  = "InvalidModule"
	ReasonKindsMismatch  = "KindsMismatch"
	ReasonNameConflict   = "NameConflict" // a file module of the same name runs
	ReasonSyncFailed     = "SyncFailed"   // the module's informer caches did not sync
	ReasonCacheStale     = "CacheStale"   // no event or list for the module's kind in a long time
)

// Options configure the controller. Zero fields take the stated defaults.
type Options struct {
	// MaxModuleBytes caps a module's (uncompressed) size. Defaults to 64 MiB.
	MaxModuleBytes int64
	// FetchTimeout bounds fetching a module from a URL. Defaults to 30 s.
	FetchTimeout time.Duration
	// StatusInterval is how often a serving module's statistics and cache
	// health are refreshed. Defaults to 30 s.
	StatusInterval time.Duration
	// SyncTimeout is how long a module's caches may take to sync before a
	// SyncFailed Event. Defaults to 2 minutes.
	SyncTimeout time.Duration
	// StaleAfter is how long the module's kind may go without a watch event
	// (bookmarks count) or list before a CacheStale Event. Defaults to 10
	// minutes.
	StaleAfter time.Duration
	// HTTPClient fetches url sources. Defaults to http.DefaultClient.
	HTTPClient *http.Client
}

func (o Options) withDefaults() Options {
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = 64 << 20
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 30 * time.Second
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = 30 * time.Second
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 2 * time.Minute
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 10 * time.Minute
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	return o
}

// Spec is a ReconcileModule's spec.
type Spec struct {
	Source struct {
		SHA256    string  `json:"sha256"`
		File      string  `json:"file,omitempty"`
		ConfigMap *KeyRef `json:"configMap,omitempty"`
		Secret    *KeyRef `json:"secret,omitempty"`
		URL       string  `json:"url,omitempty"`
	} `json:"source"`
	For    *abi.GroupVersionKind  `json:"for,omitempty"`
	Owns   []abi.GroupVersionKind `json:"owns,omitempty"`
	Reads  []abi.GroupVersionKind `json:"reads,omitempty"`
	Limits struct {
		Fuel                    uint64 `json:"fuel,omitempty"`
		Timeout                 string `json:"timeout,omitempty"`
		MemoryPages             uint32 `json:"memoryPages,omitempty"`
		MaxConcurrentReconciles int    `json:"maxConcurrentReconciles,omitempty"`
		Rate                    struct {
			QPS   float64 `json:"qps,omitempty"`
			Burst int     `json:"burst,omitempty"`
		} `json:"rate,omitempty"`
	} `json:"limits,omitempty"`
	Config map[string]any `json:"config,omitempty"`
	Paused bool           `json:"paused,omitempty"`
}

// KeyRef names a key of a ConfigMap or Secret.
type KeyRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key,omitempty"`
}

// Controller reconciles ReconcileModules.
type Controller struct {
	client     client.Client
	reader     client.Reader // live reads of ConfigMaps and Secrets: no cluster-wide Secret cache
	supervisor *supervisor.Supervisor
	recorder   recorder.EventRecorder
	cache      cache.Informers
	opts       Options
	leader     func() bool // whether this replica leads: only the leader writes

	served    map[string]served        // by module name; only touched by Reconcile (one worker)
	failedGen map[string]served        // the generation that last failed to load, by module name
	written   map[string]writtenStatus // the status last written, by module name
}

type writtenStatus struct {
	uid    types.UID
	status map[string]any
}

type served struct {
	uid         types.UID // a ReconcileModule deleted and created again is new
	generation  int64
	digest      string
	since       time.Time
	syncWarned  bool
	staleWarned bool
}

// Setup registers the controller with mgr. It needs the ReconcileModule CRD
// installed.
func Setup(mgr ctrl.Manager, sup *supervisor.Supervisor, opts Options) error {
	if _, err := mgr.GetRESTMapper().RESTMapping(GVK.GroupKind(), GVK.Version); err != nil {
		return fmt.Errorf("the ReconcileModule CRD is not installed (%w); apply config/crd, or run without ReconcileModules (--reconcile-modules=false)", err)
	}
	c := &Controller{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), supervisor: sup,
		recorder: mgr.GetEventRecorder("wasmreconcile"), opts: opts.withDefaults(), served: map[string]served{}, failedGen: map[string]served{}, written: map[string]writtenStatus{},
	}
	c.cache = mgr.GetCache()
	c.leader = func() bool {
		select {
		case <-mgr.Elected():
			return true
		default:
			return false
		}
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(GVK)
	// Every replica fetches and loads its modules, so that a new leader
	// reconciles at once; only the leader writes status and Events (the
	// supervisor starts module controllers only in the leader).
	everyReplica := false
	return ctrl.NewControllerManagedBy(mgr).Named("reconcilemodule").For(obj).
		WithOptions(crcontroller.Options{NeedLeaderElection: &everyReplica}).Complete(c)
}

// event records an Event, in the leader only.
func (c *Controller) event(obj *unstructured.Unstructured, typ, reason, action, format string, args ...any) {
	if c.leader() {
		c.recorder.Eventf(obj, nil, typ, reason, action, format, args...)
	}
}

// Reconcile loads a ReconcileModule's module when its generation changes,
// removes it when the object is gone, and otherwise refreshes its status
// every StatusInterval.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(GVK)
	if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			if c.supervisor.Remove(req.Name) {
				logger.Info("ReconcileModule deleted; module stopped", "module", req.Name)
			}
			delete(c.served, req.Name)
			delete(c.failedGen, req.Name)
			delete(c.written, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	var spec Spec
	raw, _, _ := unstructured.NestedMap(obj.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		return ctrl.Result{}, c.failed(ctx, obj, ReasonInvalidModule, fmt.Errorf("spec: %w", err))
	}
	status := c.statusOf(obj)
	conds := conditionsOf(status)

	s, known := c.served[obj.GetName()]
	if f, ok := c.failedGen[obj.GetName()]; ok && f.uid == obj.GetUID() && f.generation == obj.GetGeneration() {
		// This generation failed for a reason only a spec change fixes; do
		// not fetch and compile it again on every event.
		if !known {
			return ctrl.Result{}, nil
		}
	} else if !known || s.uid != obj.GetUID() || s.generation != obj.GetGeneration() {
		setCondition(&conds, obj, ConditionLoading, metav1.ConditionTrue, "Fetching", "fetching and compiling the module")
		status["conditions"] = conds
		if err := c.writeStatus(ctx, obj, status); err != nil {
			return ctrl.Result{}, err
		}
		loaded, reason, err := c.load(ctx, obj.GetName(), spec)
		if err != nil {
			if reason != ReasonFetchFailed {
				c.failedGen[obj.GetName()] = served{uid: obj.GetUID(), generation: obj.GetGeneration()}
			}
			return ctrl.Result{}, c.failed(ctx, obj, reason, err)
		}
		delete(c.failedGen, obj.GetName())
		s = served{uid: obj.GetUID(), generation: obj.GetGeneration(), digest: loaded.Digest, since: loaded.At, syncWarned: s.syncWarned, staleWarned: s.staleWarned}
		c.served[obj.GetName()] = s
		status["digest"] = loaded.Digest
		status["loadedAt"] = loaded.At.UTC().Format(time.RFC3339)
		if loaded.Compile > 0 {
			status["compileSeconds"] = loaded.Compile.Seconds()
		}
		setCondition(&conds, obj, ConditionLoadFailed, metav1.ConditionFalse, ReasonLoaded, "")
		c.event(obj, corev1.EventTypeNormal, ReasonLoaded, "Load", "module %s serving (compile %s)", loaded.Digest, loaded.Compile.Round(time.Millisecond))
	}
	setCondition(&conds, obj, ConditionLoading, metav1.ConditionFalse, ReasonLoaded, "")
	if spec.Paused {
		setCondition(&conds, obj, ConditionReady, metav1.ConditionFalse, ReasonPaused, "spec.paused is true: the module is not called")
	} else {
		msg := "module " + s.digest + " serving"
		if f, ok := c.failedGen[obj.GetName()]; ok && f.generation == obj.GetGeneration() {
			msg = "module " + s.digest + " still serving; the new spec failed to load (see LoadFailed)"
		}
		setCondition(&conds, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, msg)
	}
	if c.leader() {
		c.checkCaches(ctx, obj, spec, &s, &conds)
	}
	c.served[obj.GetName()] = s
	st := metrics.StatsFor(obj.GetName())
	status["stats"] = map[string]any{"reconciles": st.Reconciles, "errors": st.Errors, "meanFuel": st.MeanFuel, "meanDurationSeconds": st.MeanDurationSeconds}
	if rec := c.supervisor.Reconciler(obj.GetName()); rec != nil && rec.LastError() != "" {
		status["lastError"] = rec.LastError()
	}
	status["observedGeneration"] = obj.GetGeneration()
	status["conditions"] = conds
	if err := c.writeStatus(ctx, obj, status); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: c.opts.StatusInterval}, nil
}

// checkCaches records SyncFailed and CacheStale on the module's object,
// once per episode: a Warning when the problem starts, nothing while it
// lasts, and a Normal Event when it ends.
func (c *Controller) checkCaches(ctx context.Context, obj *unstructured.Unstructured, spec Spec, s *served, conds *[]any) {
	rec := c.supervisor.Reconciler(obj.GetName())
	if rec == nil || spec.Paused {
		return
	}
	f := rec.Module().Manifest().For
	kind := &unstructured.Unstructured{}
	kind.SetGroupVersionKind(schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: f.Kind})
	synced, why := false, ""
	if inf, err := c.cache.GetInformer(ctx, kind); err != nil {
		why = err.Error()
	} else if synced = inf.HasSynced(); !synced {
		why = "the informer has not synced"
	}
	switch {
	case !synced && time.Since(s.since) > c.opts.SyncTimeout && !s.syncWarned:
		s.syncWarned = true
		c.event(obj, corev1.EventTypeWarning, ReasonSyncFailed, "Sync",
			"the cache for %s has not synced %s after the module loaded: %s; check that the kind's CRD is installed, the operator's RBAC for it, and the API server's health", f.Kind, c.opts.SyncTimeout, why)
	case synced && s.syncWarned:
		s.syncWarned = false
		c.event(obj, corev1.EventTypeNormal, "Synced", "Sync", "the cache for %s has synced", f.Kind)
	}
	var last dto.Metric
	if err := informer.LastEvent.WithLabelValues(f.Kind).Write(&last); err != nil || last.GetGauge().GetValue() <= 0 {
		return // no event yet: nothing to be stale against
	}
	age := time.Since(time.Unix(0, int64(last.GetGauge().GetValue()*1e9)))
	switch stale := age > c.opts.StaleAfter; {
	case stale && !s.staleWarned:
		s.staleWarned = true
		c.event(obj, corev1.EventTypeWarning, ReasonCacheStale, "Sync",
			"no watch event or list for %s in %s; watches may be failing (see wasmreconcile_informer_watch_restarts_total)", f.Kind, age.Round(time.Second))
	case !stale && s.staleWarned:
		s.staleWarned = false
		c.event(obj, corev1.EventTypeNormal, "Fresh", "Sync", "events for %s arrive again", f.Kind)
	}
}

// load fetches the module's bytes and applies them.
func (c *Controller) load(ctx context.Context, name string, spec Spec) (supervisor.Loaded, string, error) {
	wasm, source, err := c.fetch(ctx, spec)
	if err != nil {
		return supervisor.Loaded{}, ReasonFetchFailed, fmt.Errorf("module[%s] fetching %s: %w", name, source, err)
	}
	var timeout time.Duration
	if spec.Limits.Timeout != "" {
		if timeout, err = time.ParseDuration(spec.Limits.Timeout); err != nil {
			return supervisor.Loaded{}, ReasonInvalidModule, fmt.Errorf("module[%s]: spec.limits.timeout: %w", name, err)
		}
	}
	loaded, err := c.supervisor.Apply(ctx, supervisor.Spec{
		Name: name, Source: source, Wasm: wasm, SHA256: spec.Source.SHA256, Owner: "the ReconcileModule " + name,
		Limits:                  engine.Limits{Fuel: spec.Limits.Fuel, Timeout: timeout, MemoryLimitPages: spec.Limits.MemoryPages},
		Config:                  spec.Config,
		Paused:                  spec.Paused,
		MaxConcurrentReconciles: spec.Limits.MaxConcurrentReconciles,
		RateLimit:               ratelimit.Options{QPS: spec.Limits.Rate.QPS, Burst: spec.Limits.Rate.Burst},
		Check:                   func(m *engine.Module) error { return checkKinds(spec, m) },
	})
	var mismatch *supervisor.DigestMismatchError
	var invalid *engine.InvalidModuleError
	var kinds *KindsMismatchError
	var conflict *supervisor.NameConflictError
	switch {
	case errors.As(err, &conflict):
		return loaded, ReasonNameConflict, err
	case err == nil:
		return loaded, "", nil
	case errors.As(err, &mismatch):
		return loaded, ReasonDigestMismatch, err
	case errors.As(err, &kinds):
		return loaded, ReasonKindsMismatch, err
	case errors.As(err, &invalid):
		return loaded, ReasonInvalidModule, err
	}
	return loaded, ReasonInvalidModule, err
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

func checkKinds(spec Spec, m *engine.Module) error {
	man := m.Manifest()
	if spec.For != nil && *spec.For != man.For {
		return &KindsMismatchError{Module: m.Name(), Field: "for", Spec: *spec.For, Declared: man.For}
	}
	if spec.Owns != nil && !reflect.DeepEqual(spec.Owns, man.Owns) && !(len(spec.Owns) == 0 && len(man.Owns) == 0) {
		return &KindsMismatchError{Module: m.Name(), Field: "owns", Spec: spec.Owns, Declared: man.Owns}
	}
	if spec.Reads != nil && !reflect.DeepEqual(spec.Reads, man.Reads) && !(len(spec.Reads) == 0 && len(man.Reads) == 0) {
		return &KindsMismatchError{Module: m.Name(), Field: "reads", Spec: spec.Reads, Declared: man.Reads}
	}
	return nil
}

// fetch returns the module's uncompressed bytes and a description of where
// they came from.
func (c *Controller) fetch(ctx context.Context, spec Spec) ([]byte, string, error) {
	src := spec.Source
	switch {
	case src.File != "":
		f, err := os.Open(src.File)
		if err != nil {
			return nil, src.File, fmt.Errorf("%w; mount the volume holding it into the operator", err)
		}
		defer f.Close()
		b, err := c.readCapped(f)
		if err != nil {
			return nil, src.File, err
		}
		b, err = c.maybeGunzip(b)
		return b, src.File, err
	case src.ConfigMap != nil || src.Secret != nil:
		ref, what := src.ConfigMap, "ConfigMap"
		var obj client.Object = &corev1.ConfigMap{}
		if src.Secret != nil {
			ref, what, obj = src.Secret, "Secret", &corev1.Secret{}
		}
		key := ref.Key
		if key == "" {
			key = "module.wasm.gz"
		}
		desc := fmt.Sprintf("%s %s/%s key %s", what, ref.Namespace, ref.Name, key)
		if err := c.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, obj); err != nil {
			return nil, desc, err
		}
		var b []byte
		var ok bool
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			if b, ok = o.BinaryData[key]; !ok {
				var s string
				s, ok = o.Data[key]
				b = []byte(s)
			}
		case *corev1.Secret:
			b, ok = o.Data[key]
		}
		if !ok {
			return nil, desc, fmt.Errorf("no key %q; create it with `kubectl create %s ... --from-file=%s=module.wasm.gz`", key, map[string]string{"ConfigMap": "configmap", "Secret": "secret generic"}[what], key)
		}
		b, err := c.maybeGunzip(b)
		return b, desc, err
	case src.URL != "":
		ctx, cancel := context.WithTimeout(ctx, c.opts.FetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, src.URL, nil)
		if err != nil {
			return nil, src.URL, err
		}
		resp, err := c.opts.HTTPClient.Do(req)
		if err != nil {
			return nil, src.URL, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, src.URL, fmt.Errorf("HTTP %s", resp.Status)
		}
		b, err := c.readCapped(resp.Body)
		if err != nil {
			return nil, src.URL, err
		}
		b, err = c.maybeGunzip(b)
		return b, src.URL, err
	}
	return nil, "spec.source", errors.New("no source set; set one of file, configMap, secret and url")
}

func (c *Controller) readCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, c.opts.MaxModuleBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > c.opts.MaxModuleBytes {
		return nil, fmt.Errorf("module is larger than %d bytes (--max-module-bytes)", c.opts.MaxModuleBytes)
	}
	return b, nil
}

// maybeGunzip returns raw wasm as is and decompresses gzip'd wasm.
func (c *Controller) maybeGunzip(b []byte) ([]byte, error) {
	if bytes.HasPrefix(b, []byte("\x00asm")) {
		return b, nil
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return nil, errors.New("neither wasm nor gzip'd wasm; store the output of `gzip -c module.wasm`")
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := c.readCapped(zr)
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return out, nil
}

// failed records a load failure: LoadFailed with the reason, Ready as it is
// (a previous version may still serve), a Warning Event, and lastError. It
// returns nil for errors that only a spec change fixes, and the error (to
// retry with backoff) for fetch failures.
func (c *Controller) failed(ctx context.Context, obj *unstructured.Unstructured, reason string, err error) error {
	status := c.statusOf(obj)
	conds := conditionsOf(status)
	setCondition(&conds, obj, ConditionLoadFailed, metav1.ConditionTrue, reason, err.Error())
	setCondition(&conds, obj, ConditionLoading, metav1.ConditionFalse, reason, "")
	if s, ok := c.served[obj.GetName()]; ok {
		setCondition(&conds, obj, ConditionReady, metav1.ConditionTrue, ReasonLoaded, "module "+s.digest+" still serving; the new spec failed to load")
	} else {
		setCondition(&conds, obj, ConditionReady, metav1.ConditionFalse, reason, "no version of the module has loaded")
	}
	status["conditions"] = conds
	status["lastError"] = err.Error()
	status["observedGeneration"] = obj.GetGeneration()
	c.event(obj, corev1.EventTypeWarning, reason, "Load", "%s", err.Error())
	log.FromContext(ctx).Error(err, "module not loaded", "reason", reason)
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
func (c *Controller) statusOf(obj *unstructured.Unstructured) map[string]any {
	if st, ok := c.written[obj.GetName()]; ok && st.uid == obj.GetUID() {
		return runtime.DeepCopyJSON(st.status)
	}
	if st, ok, _ := unstructured.NestedMap(obj.Object, "status"); ok {
		return st
	}
	return map[string]any{}
}

// writeStatus applies status in the leader; a standby only keeps it, and
// writes it (through the periodic refresh) once elected.
func (c *Controller) writeStatus(ctx context.Context, obj *unstructured.Unstructured, status map[string]any) error {
	c.written[obj.GetName()] = writtenStatus{uid: obj.GetUID(), status: runtime.DeepCopyJSON(status)}
	if !c.leader() {
		return nil
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	patch.SetGroupVersionKind(GVK)
	patch.SetName(obj.GetName())
	if err := c.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(patch), client.FieldOwner("wasmreconcile"), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing ReconcileModule %s status: %w", obj.GetName(), err)
	}
	return nil
}

func conditionsOf(status map[string]any) []any {
	conds, _ := status["conditions"].([]any)
	return conds
}

// setCondition sets a condition, keeping lastTransitionTime when the status
// does not change.
func setCondition(conds *[]any, obj *unstructured.Unstructured, typ string, st metav1.ConditionStatus, reason, msg string) {
	var list []metav1.Condition
	for _, c := range *conds {
		m, _ := c.(map[string]any)
		var cond metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
			list = append(list, cond)
		}
	}
	meta.SetStatusCondition(&list, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: obj.GetGeneration()})
	out := make([]any, 0, len(list))
	for _, cond := range list {
		m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(&cond)
		out = append(out, m)
	}
	*conds = out
}
