package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReconcileModule is one wasm reconcile module run by the wasmreconcile
// operator. The operator fetches the module's bytes from spec.source,
// checks them against spec.source.sha256, and runs the module's reconcile
// function for its kind under spec.limits. metadata.name must equal the name
// in the module's manifest.
//
// It is cluster-scoped: a module's controller watches its kind in every
// namespace, its RBAC is cluster-wide, and its name is a cluster-wide
// identity (the controller name, metrics label and field manager). A
// namespaced resource would suggest an isolation that a cluster-wide
// controller does not have.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rm,categories=wasmreconcile
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=".status.digest",priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type=='LoadFailed')].reason"
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=".spec.paused"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (a module name: lower-case letters, digits and '-', at most 63 characters)"
type ReconcileModule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ReconcileModuleSpec   `json:"spec"`
	Status ReconcileModuleStatus `json:"status,omitempty"`
}

// ReconcileModuleSpec declares a module: where its bytes come from, what it
// reconciles, and its limits.
type ReconcileModuleSpec struct {
	// Source says where the module's bytes come from.
	// +required
	Source Source `json:"source"`

	// For is the kind the module reconciles. Defaults to the module's
	// manifest; when set, it must match the manifest, so reviewers see the
	// kind here.
	// +optional
	For *GroupVersionKind `json:"for,omitempty"`

	// Owns are the kinds the module creates as children. When set, it must
	// match the manifest.
	// +optional
	Owns []GroupVersionKind `json:"owns,omitempty"`

	// Reads are the kinds the module reads from the cache. When set, it
	// must match the manifest.
	// +optional
	Reads []GroupVersionKind `json:"reads,omitempty"`

	// Limits are per-module limits. Unset fields take the operator's flags,
	// then the engine's defaults; the module's manifest may ask for less,
	// never more. Fuel, timeout and memoryPages are held to the operator's
	// ceilings (--max-fuel, --max-timeout, --max-memory): a value over one
	// is clamped to it, and status.effectiveLimits and the LimitsClamped
	// condition say so.
	// +optional
	Limits Limits `json:"limits,omitempty"`

	// Config is passed to the guest as Request.Config.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Config *apiextensionsv1.JSON `json:"config,omitempty"`

	// Paused stops calling the module; objects keep their status and
	// children. Resuming reconciles every object.
	// +optional
	// +kubebuilder:default=false
	Paused bool `json:"paused,omitempty"`

	// ServiceAccountName names the ServiceAccount, in serviceAccountNamespace,
	// whose identity the module's writes (children, status, finalizers,
	// Events) and cache reads are made with: the operator impersonates it,
	// so the module's rights are exactly that account's RBAC. Defaults to
	// the operator's --default-service-account; when that is empty too, the
	// module runs with the operator's own identity (single-tenant; see
	// docs/security.md).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ServiceAccountNamespace is the namespace of serviceAccountName.
	// Defaults to the operator's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ServiceAccountNamespace string `json:"serviceAccountNamespace,omitempty"`

	// ReadNamespaces are the namespaces, beyond the reconciled object's
	// own, whose objects the guest may read through cache_read; "*" is
	// every namespace. Defaults to none: a guest reads only its object's
	// namespace (and cluster-scoped kinds it declares).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	ReadNamespaces []string `json:"readNamespaces,omitempty"`

	// Candidate is another version of the module to run in shadow: for
	// every reconcile, the host also calls the candidate on the same
	// request, compares its answer with the serving version's (status,
	// children, Events, requeue, error) and never writes anything the
	// candidate returns. status.rollout counts agreements, differences and
	// candidate errors, with the first differences shown. The candidate
	// must be the same module (name, kinds, triggers, finalizer); it runs
	// under spec.limits. See docs/rollout.md.
	// +optional
	Candidate *Candidate `json:"candidate,omitempty"`
}

// Candidate is a version run in shadow beside the serving one.
type Candidate struct {
	// Source is where the candidate's bytes come from, pinned as
	// spec.source is.
	// +required
	Source Source `json:"source"`

	// Promote, when set, makes the candidate serve once it has agreed
	// with the serving version on promote.afterAgreeing calls with no
	// difference and no candidate error. Defaults to unset: promotion is
	// manual (move the candidate's source to spec.source).
	// +optional
	Promote *Promote `json:"promote,omitempty"`

	// AllowDifferences are response field paths whose differences are
	// expected and not counted: status.observedAt,
	// status.conditions[*].message, children[*].metadata.annotations,
	// events. "*" matches one segment; a path covers its subtree.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	AllowDifferences []string `json:"allowDifferences,omitempty"`

	// MaxConcurrentReconciles is how many candidate calls run at once, in
	// workers of the candidate's own: the serving version never waits for
	// them. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxConcurrentReconciles int `json:"maxConcurrentReconciles,omitempty"`

	// Canary, when set, makes the candidate serve a share of the objects:
	// their calls go to the candidate and its answers are applied (they
	// are not compared); the other objects are served by spec.source and
	// shadowed as without a canary. status.rollout.candidate counts the
	// calls each version served.
	// +optional
	Canary *Canary `json:"canary,omitempty"`

	// QueueSize is how many calls may wait for a candidate worker; calls
	// beyond are not repeated on the candidate and are counted as skipped.
	// Defaults to 100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	QueueSize int `json:"queueSize,omitempty"`
}

// Canary is the share of objects a candidate serves: exactly one of
// percent and selector.
//
// +kubebuilder:validation:XValidation:rule="has(self.percent) != has(self.selector)",message="set exactly one of canary.percent and canary.selector"
type Canary struct {
	// Percent of the objects, chosen by a stable hash of namespace/name:
	// the same objects on every replica and after every restart; raising
	// it only adds objects.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`
	// Selector chooses the objects by their labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Promote is when a candidate is promoted automatically.
type Promote struct {
	// AfterAgreeing is how many agreeing calls, with no difference and no
	// candidate error, promote the candidate.
	// +required
	// +kubebuilder:validation:Minimum=1
	AfterAgreeing int64 `json:"afterAgreeing"`
}

// Source is where a module's bytes come from: exactly one of file,
// configMap, secret, url and oci.
//
// +kubebuilder:validation:XValidation:rule="[has(self.file), has(self.configMap), has(self.secret), has(self.url), has(self.oci)].filter(x, x).size() == 1",message="set exactly one of source.file, source.configMap, source.secret, source.url and source.oci"
// +kubebuilder:validation:XValidation:rule="has(self.sha256) || has(self.oci)",message="set source.sha256 (the module's sha256); only an oci source, pinned by its manifest digest, may leave it out"
type Source struct {
	// SHA256 is the sha256 of the module's (uncompressed) bytes, hex,
	// optionally prefixed "sha256:". Bytes that do not match are refused.
	// Required for every source but oci, whose reference's digest pins the
	// bytes already; when set there too, it is checked as well.
	// +optional
	// +kubebuilder:validation:Pattern=`^(sha256:)?[a-f0-9]{64}$`
	SHA256 string `json:"sha256,omitempty"`

	// File is an absolute path on a volume mounted into the operator.
	// +optional
	// +kubebuilder:validation:Pattern=`^/.*\.wasm$`
	File string `json:"file,omitempty"`

	// ConfigMap is a ConfigMap key (binaryData or data) holding the gzip'd
	// module. A ConfigMap holds at most 1 MiB; larger modules need file or
	// url.
	// +optional
	ConfigMap *KeyRef `json:"configMap,omitempty"`

	// Secret is a Secret key holding the gzip'd module; at most 1 MiB.
	// +optional
	Secret *KeyRef `json:"secret,omitempty"`

	// URL is an http or https URL serving the module (raw or gzip'd).
	// +optional
	// +kubebuilder:validation:Pattern=`^https?://.+`
	URL string `json:"url,omitempty"`

	// OCI is a module in an OCI registry, in the wasm artifact layout
	// (`operator push` writes it; docs/sources.md).
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
}

// OCISource is a module in an OCI registry.
type OCISource struct {
	// Ref is oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST. The digest, of
	// the image manifest, is required and is what is fetched and verified;
	// a tag is for people to read and is never resolved. `operator push`
	// and `operator pull` print the digest.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^oci://[^/@]+/[^@]+@sha256:[a-f0-9]{64}$`
	Ref string `json:"ref"`

	// PullSecret names a Secret of type kubernetes.io/dockerconfigjson (as
	// `kubectl create secret docker-registry` writes it) holding the
	// registry's credentials; it is read at each fetch. Its namespace must
	// be one of the operator's --module-source-namespaces. Defaults to
	// anonymous access.
	// +optional
	PullSecret *SecretRef `json:"pullSecret,omitempty"`
}

// SecretRef names a Secret.
type SecretRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// KeyRef names a key of a ConfigMap or Secret.
type KeyRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key holds the module. Defaults to module.wasm.gz.
	// +optional
	// +kubebuilder:default=module.wasm.gz
	Key string `json:"key,omitempty"`
}

// GroupVersionKind names a Kubernetes kind.
type GroupVersionKind struct {
	// Group is "" for the core group.
	// +optional
	Group string `json:"group,omitempty"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
}

// Limits are per-module limits. The schema's maxima are absolute; the
// operator's ceilings (--max-fuel, default 5,000,000,000; --max-timeout,
// default 60s; --max-memory, default 1Gi = 16384 pages) clamp what is
// within them.
type Limits struct {
	// Fuel is the fuel budget of one reconcile call (deterministic; about
	// one unit per wasm instruction). At most 10^12, and clamped to the
	// operator's --max-fuel.
	// +optional
	// +kubebuilder:validation:Minimum=1000
	// +kubebuilder:validation:Maximum=1000000000000
	Fuel uint64 `json:"fuel,omitempty"`

	// Timeout is the wall-clock deadline of one reconcile call, a Go
	// duration such as "500ms", "2s" or "1m30s". At most 1h, and clamped
	// to the operator's --max-timeout.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="spec.limits.timeout must be at most 1h"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// MemoryPages caps the module's linear memory, in 64 KiB pages. At most
	// 65536 (4 GiB, the wasm32 maximum), and clamped to the operator's
	// --max-memory.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	MemoryPages uint32 `json:"memoryPages,omitempty"`

	// IdleTimeout is how long the module may serve no call before its code
	// is unloaded (the next event loads it back from the compilation
	// cache: about 150 ms for a 3 MB Go module), a Go duration such
	// as "10m". It overrides the operator's --idle-module-timeout for this
	// module: "8760h" keeps a module whose first event must not wait
	// loaded, a short one frees a rarely used module's memory sooner. At
	// least 1m: loading a Go module back costs about 200 reconciles' CPU,
	// so a shorter timeout would let a module's events make the operator
	// reload it again and again.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('8760h')",message="spec.limits.idleTimeout must be within 1m and 8760h"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// MaxConcurrentReconciles is how many objects of the module are
	// reconciled at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	MaxConcurrentReconciles int `json:"maxConcurrentReconciles,omitempty"`

	// Rate is the module's workqueue rate limit (a token bucket).
	// +optional
	Rate Rate `json:"rate,omitempty"`
}

// Rate is a token bucket.
type Rate struct {
	// QPS is the bucket's rate.
	// +optional
	// +kubebuilder:validation:Minimum=0.1
	QPS float64 `json:"qps,omitempty"`
	// Burst is the bucket's size.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Burst int `json:"burst,omitempty"`
}

// ReconcileModuleStatus is what the operator reports of a module.
type ReconcileModuleStatus struct {
	// ObservedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Digest is the digest of the version serving.
	// +optional
	Digest string `json:"digest,omitempty"`

	// LoadedAt is when the version serving was loaded.
	// +optional
	LoadedAt *metav1.Time `json:"loadedAt,omitempty"`

	// CompileSeconds is how long the last new bytes took to instrument,
	// compile and validate.
	// +optional
	CompileSeconds float64 `json:"compileSeconds,omitempty"`

	// LastError is the last load failure or reconcile error, with what to
	// do.
	// +optional
	LastError string `json:"lastError,omitempty"`

	// Stats are counters since the operator started serving this module.
	// +optional
	Stats *Stats `json:"stats,omitempty"`

	// Code is Loaded while the serving version's code is in memory, and
	// Unloaded once it has served no call for the operator's
	// --idle-module-timeout: it then keeps only its manifest and digest in
	// memory, and the next event loads it back from the compilation cache
	// (about 150 ms for a 3 MB Go module), which this field shows at the next status
	// refresh.
	// +optional
	// +kubebuilder:validation:Enum=Loaded;Unloaded
	Code string `json:"code,omitempty"`

	// EffectiveLimits are the limits the version serving runs under: the
	// spec's, the operator's flags and the defaults merged, held to the
	// operator's ceilings, and lowered where the manifest asks for less.
	// +optional
	EffectiveLimits *EffectiveLimits `json:"effectiveLimits,omitempty"`

	// Conditions are Ready (a version serves and is not paused), Loading
	// (new bytes are being fetched and compiled), LoadFailed (the last
	// spec could not be loaded) and LimitsClamped (True when a limit of
	// the version serving was over an operator ceiling and was lowered to
	// it; the message lists each).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Rollout is the state of spec.candidate: its comparisons with the
	// serving version, and its promotion.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// EffectiveLimits are the per-call limits a module runs under.
type EffectiveLimits struct {
	// Fuel is the fuel budget of one reconcile call.
	Fuel uint64 `json:"fuel"`
	// Timeout is the deadline of one reconcile call.
	// +kubebuilder:validation:Type=string
	Timeout metav1.Duration `json:"timeout"`
	// MemoryPages caps the module's linear memory, in 64 KiB pages.
	MemoryPages uint32 `json:"memoryPages"`
}

// Stats are a module's counters since the operator started serving it.
type Stats struct {
	Reconciles          int64   `json:"reconciles"`
	Errors              int64   `json:"errors"`
	MeanFuel            int64   `json:"meanFuel"`
	MeanDurationSeconds float64 `json:"meanDurationSeconds"`
}

// RolloutStatus is the state of a module's candidate.
type RolloutStatus struct {
	// Candidate is the candidate running in shadow, or that failed to
	// load.
	// +optional
	Candidate *CandidateStatus `json:"candidate,omitempty"`
	// Promoted is set once the candidate of spec generation
	// promoted.generation was promoted automatically: it serves in place of
	// spec.source until the spec changes. Move the candidate's source to
	// spec.source to keep it; remove spec.candidate to roll back to
	// spec.source (instant: the previous version stays compiled).
	// +optional
	Promoted *Promotion `json:"promoted,omitempty"`
}

// CandidateStatus counts a candidate's comparisons with the serving
// version since it started.
type CandidateStatus struct {
	// Digest is the candidate's sha256.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Agreements are calls it answered as the serving version did.
	Agreements int64 `json:"agreements"`
	// Differences are calls it answered otherwise.
	Differences int64 `json:"differences"`
	// CandidateErrors are calls where it failed (fuel, deadline, trap,
	// invalid response) and the serving version did not.
	CandidateErrors int64 `json:"candidateErrors"`
	// Skipped are calls not repeated on it: its queue was full.
	Skipped int64 `json:"skipped"`
	// FirstDifferences are the first differing calls, each naming the
	// object and the fields: "ns/name: status.replicas: 3 → 4".
	// +optional
	FirstDifferences []string `json:"firstDifferences,omitempty"`
	// Canary describes the share the candidate serves ("25% of objects",
	// "objects matching track=canary"); "" without a canary.
	// +optional
	Canary string `json:"canary,omitempty"`
	// ServedByCandidate are the calls of the canary's objects, served by
	// the candidate; ServedByServing the calls of the other objects,
	// served by spec.source. Both are 0 without a canary.
	// +optional
	ServedByCandidate int64 `json:"servedByCandidate,omitempty"`
	// +optional
	ServedByServing int64 `json:"servedByServing,omitempty"`
	// LastError is why the candidate does not run, when it failed to load.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// Promotion records an automatic promotion.
type Promotion struct {
	// Digest is the promoted candidate's.
	Digest string `json:"digest"`
	// PreviousDigest is the version it replaced, kept compiled for an
	// instant rollback.
	PreviousDigest string `json:"previousDigest"`
	// Generation is the spec generation it was promoted in.
	Generation int64 `json:"generation"`
	// Agreements are the agreeing calls that promoted it.
	Agreements int64 `json:"agreements"`
	// At is when.
	At metav1.Time `json:"at"`
}

// ReconcileModuleList is a list of ReconcileModules.
//
// +kubebuilder:object:root=true
type ReconcileModuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ReconcileModule `json:"items"`
}
