package authz

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	eventsclient "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/wasmreconcile/wasmreconcile/host/internal/statusapply"
)

// Identities makes the Identity of each ServiceAccount modules run as.
// Identities of one account are shared: one client, one Event clientset
// and one cache of answers for every module that names it.
type Identities struct {
	config     *rest.Config
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	authorizer *Authorizer

	mu       sync.Mutex
	accounts map[string]*Identity
}

// NewIdentities returns the Identities of ServiceAccounts impersonated with
// cfg, the operator's config. scheme and mapper are the manager's; the
// reviews, unless opts.Review is set, are made with cfg and httpClient
// (nil: one of cfg's own). Every identity's client shares one client-side
// rate limit of cfg's QPS and Burst (unless cfg has a RateLimiter, which
// they share), so that modules with accounts cannot together exceed it.
func NewIdentities(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, mapper meta.RESTMapper, opts Options) (*Identities, error) {
	if cfg == nil || scheme == nil || mapper == nil {
		return nil, fmt.Errorf("authz: a config, a scheme and a RESTMapper are required")
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps = rest.DefaultQPS
		}
		if burst == 0 {
			burst = rest.DefaultBurst
		}
		if qps > 0 {
			cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
		}
	}
	if opts.Review == nil {
		if httpClient == nil {
			var err error
			if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
				return nil, err
			}
		}
		c, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
		if err != nil {
			return nil, err
		}
		opts.Review = Reviewer(c)
	}
	a, err := New(opts)
	if err != nil {
		return nil, err
	}
	return &Identities{config: cfg, scheme: scheme, mapper: mapper, authorizer: a, accounts: map[string]*Identity{}}, nil
}

// Reviewer answers reviews with c: a SubjectAccessReview for a user, a
// SelfSubjectAccessReview for the operator itself (empty User).
func Reviewer(c authorizationclient.AuthorizationV1Interface) func(context.Context, Attributes) (Decision, error) {
	return func(ctx context.Context, a Attributes) (Decision, error) {
		ra := &authorizationv1.ResourceAttributes{Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Name: a.Name}
		var st authorizationv1.SubjectAccessReviewStatus
		if a.User == "" {
			r, err := c.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: ra}}, metav1.CreateOptions{})
			if err != nil {
				return Decision{}, fmt.Errorf("SelfSubjectAccessReview: %w", err)
			}
			st = r.Status
		} else {
			r, err := c.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: a.User, Groups: a.Groups, ResourceAttributes: ra}}, metav1.CreateOptions{})
			if err != nil {
				return Decision{}, fmt.Errorf("SubjectAccessReview: %w", err)
			}
			st = r.Status
		}
		if st.EvaluationError != "" && !st.Allowed {
			return Decision{Reason: strings.TrimSpace(st.Reason + " " + st.EvaluationError)}, nil
		}
		return Decision{Allowed: st.Allowed && !st.Denied, Reason: st.Reason}, nil
	}
}

// Authorizer is the cache of answers shared by every identity.
func (ids *Identities) Authorizer() *Authorizer { return ids.authorizer }

// Get returns the identity of account, "namespace/name".
func (ids *Identities) Get(account string) (*Identity, error) {
	ns, name, err := ParseServiceAccount(account)
	if err != nil {
		return nil, err
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if id, ok := ids.accounts[account]; ok {
		return id, nil
	}
	id := &Identity{ids: ids, Account: account, Namespace: ns, Name: name, User: UserName(ns, name), Groups: Groups(ns)}
	// The API server adds the account's groups to an impersonated
	// ServiceAccount's user name (Groups, and system:authenticated), so
	// the operator needs `impersonate` on that serviceaccount only; naming
	// the groups would also take `impersonate` on groups.
	cfg := rest.CopyConfig(ids.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.User}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("ServiceAccount %s: %w", account, err)
	}
	if id.writer, err = client.New(cfg, client.Options{Scheme: ids.scheme, Mapper: ids.mapper, HTTPClient: httpClient}); err != nil {
		return nil, fmt.Errorf("ServiceAccount %s: %w", account, err)
	}
	id.statuses = statusapply.New(cfg, httpClient, ids.mapper)
	if id.events, err = eventsclient.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, fmt.Errorf("ServiceAccount %s: %w", account, err)
	}
	ids.accounts[account] = id
	return id, nil
}

// Identity is one ServiceAccount that modules run as.
type Identity struct {
	ids *Identities
	// Account is "namespace/name".
	Account         string
	Namespace, Name string
	// User and Groups are what the API server authenticates the account
	// as, and what its reviews ask about.
	User   string
	Groups []string

	writer   client.Client
	statuses *statusapply.Applier
	events   eventsclient.EventsV1Interface
}

// Writer writes as the account: live, with no cache (it is for writes).
func (id *Identity) Writer() client.Client { return id.writer }

// StatusApplier applies statuses as the account, as Writer would.
func (id *Identity) StatusApplier() *statusapply.Applier { return id.statuses }

// Authorize returns nil when the account may verb ("get" or "list") gvk
// in namespace ("" for cluster-scoped kinds and across all namespaces),
// and the operator may impersonate it; otherwise a *ForbiddenError, or the
// error of a review that could not be made. Answers are cached (Options).
// It is the reconciler's Options.Authorize.
func (id *Identity) Authorize(ctx context.Context, verb string, gvk schema.GroupVersionKind, namespace string) error {
	resource, _, err := id.resource(gvk)
	if err != nil {
		return err
	}
	return id.authorize(ctx, verb, gvk.Group, resource, namespace)
}

func (id *Identity) authorize(ctx context.Context, verb, group, resource, namespace string) error {
	d, err := id.ids.authorizer.Check(ctx, Attributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: id.Namespace, Name: id.Name})
	if err != nil {
		return fmt.Errorf("checking that the operator may impersonate ServiceAccount %s: %w", id.Account, err)
	}
	if !d.Allowed {
		return &ForbiddenError{Account: id.Account, Impersonate: true, Reason: d.Reason}
	}
	d, err = id.ids.authorizer.Check(ctx, Attributes{User: id.User, Groups: id.Groups, Verb: verb, Group: group, Resource: resource, Namespace: namespace})
	if err != nil {
		return fmt.Errorf("checking whether ServiceAccount %s may %s %s: %w", id.Account, verb, resource, err)
	}
	if !d.Allowed {
		return &ForbiddenError{Account: id.Account, Verb: verb, Group: group, Resource: resource, Namespace: namespace, Reason: d.Reason}
	}
	return nil
}

// resource maps gvk to its resource with the manager's RESTMapper.
func (id *Identity) resource(gvk schema.GroupVersionKind) (string, bool, error) {
	m, err := id.ids.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return "", false, fmt.Errorf("authorizing a read of %s for ServiceAccount %s: %w", gvk, id.Account, err)
	}
	return m.Resource.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// Reader returns c, which reads as the operator (from its informer cache),
// guarded so that module reads no object its account may not read:
//
//   - a Get asks Authorize for "get" in the object's namespace;
//   - a List in a namespace, or of a cluster-scoped kind, asks for "list";
//     a List of a namespaced kind across all namespaces is let through
//     (the host lists to requeue every object, and each is then read with
//     a Get; the guest's own reads are authorized by Authorize).
//
// A refused Get of the module's own kind (forGVK, the object being
// reconciled) also records a Warning Event "Forbidden" on the object with
// host, the operator's recorder, since the reconciler cannot name an
// object it may not read.
func (id *Identity) Reader(c client.Client, module string, forGVK schema.GroupVersionKind, host recorder.EventRecorder) client.Client {
	return &guarded{Client: c, id: id, module: module, forGVK: forGVK, host: host}
}

type guarded struct {
	client.Client
	id     *Identity
	module string
	forGVK schema.GroupVersionKind
	host   recorder.EventRecorder
}

func (g *guarded) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := g.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	if err := g.id.Authorize(ctx, "get", gvk, key.Namespace); err != nil {
		if gvk == g.forGVK && apierrors.IsForbidden(err) {
			// Name the object, as the operator sees it, in a Warning.
			seen := &unstructured.Unstructured{}
			seen.SetGroupVersionKind(gvk)
			if g.Client.Get(ctx, key, seen) == nil {
				g.host.Eventf(seen, nil, corev1.EventTypeWarning, ReasonForbidden, "Reconcile",
					"module[%s] does not reconcile this object: %v", g.module, err)
			}
		}
		return err
	}
	return g.Client.Get(ctx, key, obj, opts...)
}

func (g *guarded) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	gvk, err := g.GroupVersionKindFor(list)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	resource, namespaced, err := g.id.resource(gvk)
	if err != nil {
		return err
	}
	if lo.Namespace != "" || !namespaced {
		if err := g.id.authorize(ctx, "list", gvk.Group, resource, lo.Namespace); err != nil {
			return err
		}
	}
	return g.Client.List(ctx, list, opts...)
}

// Reasons of the operator's Warning Events about a module's account.
const (
	// ReasonForbidden: the account may not read the object it would
	// reconcile.
	ReasonForbidden = "Forbidden"
	// ReasonEventForbidden: the API server refused a guest's Event on the
	// object because the account may not create Events.
	ReasonEventForbidden = "EventForbidden"
)

// Recorder returns the Event recorder of module: Events for which
// isHost(eventtype, reason) is true (the host's own Warnings) are
// recorded with host, the operator's recorder, so that a module whose
// account may not create Events still gets them; the others (the guest's)
// are posted as the account, as controller name. A guest Event the API
// server refuses as Forbidden is reported by a Warning Event
// (ReasonEventForbidden) with host. The recorder starts its broadcaster on its
// first Event; Stop ends it.
func (id *Identity) Recorder(module, name string, host recorder.EventRecorder, isHost func(eventtype, reason string) bool) *Recorder {
	return &Recorder{id: id, module: module, name: name, host: host, isHost: isHost}
}

// Recorder posts a module's Events; see Identity.Recorder.
type Recorder struct {
	id     *Identity
	module string
	name   string
	host   recorder.EventRecorder
	isHost func(eventtype, reason string) bool

	mu          sync.Mutex
	stopped     bool
	broadcaster events.EventBroadcaster
	rec         events.EventRecorderLogger
	cancel      context.CancelFunc
}

var _ recorder.EventRecorder = (*Recorder)(nil)

// recorder returns the account's recorder, starting the broadcaster on
// the first call; nil once stopped. r.mu is held.
func (r *Recorder) recorder() events.EventRecorderLogger {
	if r.rec == nil && !r.stopped {
		ctx, cancel := context.WithCancel(context.Background())
		ctx = log.IntoContext(ctx, log.Log.WithName("events").WithValues("module", r.module, "serviceAccount", r.id.Account))
		b := events.NewBroadcaster(&sink{EventSinkImpl: events.EventSinkImpl{Interface: r.id.events}, r: r})
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			cancel()
			b.Shutdown()
			return nil
		}
		r.broadcaster, r.cancel = b, cancel
		r.rec = b.NewRecorder(r.id.ids.scheme, r.name)
	}
	if r.stopped {
		return nil
	}
	return r.rec
}

// Eventf implements recorder.EventRecorder.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if r.isHost != nil && r.isHost(eventtype, reason) {
		r.host.Eventf(regarding, related, eventtype, reason, action, note, args...)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.recorder(); rec != nil {
		rec.Eventf(regarding, related, eventtype, reason, action, note, args...) // queues it: never blocks
	}
}

// AnnotatedEventf implements recorder.EventRecorder.
func (r *Recorder) AnnotatedEventf(regarding, related runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	if r.isHost != nil && r.isHost(eventtype, reason) {
		r.host.AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, note, args...)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.recorder().(events.AnnotatedEventRecorder); ok {
		a.AnnotatedEventf(regarding, related, annotations, eventtype, reason, action, note, args...)
	}
}

// Stop stops the broadcaster: Events queued are handed to the sink, whose
// requests are then canceled, and later Events are dropped. Stopping twice
// is harmless.
func (r *Recorder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	if r.broadcaster != nil {
		r.broadcaster.Shutdown()
		r.cancel()
	}
}

// sink reports the guest Events the API server refuses as Forbidden.
type sink struct {
	events.EventSinkImpl
	r *Recorder
}

func (s *sink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	out, err := s.EventSinkImpl.Create(ctx, e)
	s.refused(e, err)
	return out, err
}

func (s *sink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	out, err := s.EventSinkImpl.Update(ctx, e)
	s.refused(e, err)
	return out, err
}

func (s *sink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	out, err := s.EventSinkImpl.Patch(ctx, e, data)
	s.refused(e, err)
	return out, err
}

// refused records, as the operator, a Warning on the object of a guest
// Event the API server refused as Forbidden.
func (s *sink) refused(e *eventsv1.Event, err error) {
	if !apierrors.IsForbidden(err) {
		return
	}
	ref := e.Regarding
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(ref.APIVersion)
	obj.SetKind(ref.Kind)
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	obj.SetUID(ref.UID)
	obj.SetResourceVersion(ref.ResourceVersion)
	s.r.host.Eventf(obj, nil, corev1.EventTypeWarning, ReasonEventForbidden, "Reconcile",
		"module[%s]: the guest's Event %q was refused: ServiceAccount %s may not post it; grant it create and patch on events.events.k8s.io in namespace %q (%v)",
		s.r.module, e.Reason, s.r.id.Account, e.Namespace, err)
}
