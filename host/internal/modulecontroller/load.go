package modulecontroller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

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
	account, err := c.serviceAccount(spec)
	if err != nil {
		return loadResult{}, ReasonInvalidModule, fmt.Errorf("module[%s]: %w", obj.Name, err)
	}
	name := obj.Name
	var served loadResult // what Check saw of the version about to serve
	l, err := c.supervisor.Apply(ctx, supervisor.Spec{
		Name: name, Source: fetcher, SHA256: src.SHA256, Owner: ownerOf(name),
		Policy:         specPolicy(spec),
		Config:         cfg,
		Paused:         spec.Paused,
		ServiceAccount: account,
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

// specPolicy is the policy a ReconcileModule's spec sets: the module's own
// layer, over the operator's (policy.Policy.Merge). spec.readNamespaces
// unset is nil: the operator's --module-read-namespaces apply.
func specPolicy(spec v1alpha1.ReconcileModuleSpec) policy.Policy {
	var timeout, idle time.Duration
	if spec.Limits.Timeout != nil {
		timeout = spec.Limits.Timeout.Duration
	}
	if spec.Limits.IdleTimeout != nil {
		idle = spec.Limits.IdleTimeout.Duration
	}
	return policy.Policy{
		Limits:                  engine.Limits{Fuel: spec.Limits.Fuel, Timeout: timeout, MemoryLimitPages: spec.Limits.MemoryPages, IdleModuleTimeout: idle},
		MaxConcurrentReconciles: spec.Limits.MaxConcurrentReconciles,
		RateLimit:               policy.RateLimit{QPS: spec.Limits.Rate.QPS, Burst: spec.Limits.Rate.Burst},
		ReadNamespaces:          spec.ReadNamespaces,
	}
}

// ownerOf is the supervisor's Spec.Owner of ReconcileModule name's module.
func ownerOf(name string) string { return "the ReconcileModule " + name }
