package operator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// recordsEndpoint serves the flight recorder on the metrics server to a
// client the API server authenticates (a bearer token: TokenReview) and
// authorizes twice: for GET on the endpoint's non-resource URL, as
// controller-runtime's metrics filter does, and then for get on the kind
// of each record's object in that object's namespace (SubjectAccessReview),
// so that the endpoint's role alone reads nothing: a record holds its
// object, its children and what the guest read. Until the host exists, or
// with the recorder disabled, it answers 404.
//
// It is controller-runtime's filter with the authenticated user kept for
// the second check (the filter does not pass it on); both checks use
// k8s.io/apiserver's delegating authenticator and authorizer, with their
// caches.
type recordsEndpoint struct {
	authn authenticator.Request
	authz authorizer.Authorizer

	mu    sync.Mutex
	inner http.Handler
}

type userKey struct{}

func newRecordsEndpoint(cfg *rest.Config) (*recordsEndpoint, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("flight recorder endpoint: %w", err)
	}
	authnClient, err := authenticationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("flight recorder endpoint: %w", err)
	}
	authzClient, err := authorizationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("flight recorder endpoint: %w", err)
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserver.AnonymousAuthConfig{Enabled: false}, CacheTTL: time.Minute,
		TokenAccessReviewClient: authnClient, TokenAccessReviewTimeout: 10 * time.Second, WebhookRetryBackoff: backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("flight recorder endpoint: %w", err)
	}
	// Denials are cached briefly: a role granted is used within 10 s.
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient, AllowCacheTTL: time.Minute, DenyCacheTTL: 10 * time.Second, WebhookRetryBackoff: backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("flight recorder endpoint: %w", err)
	}
	return &recordsEndpoint{authn: authn, authz: authz}, nil
}

func (e *recordsEndpoint) set(h http.Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inner = h
}

func (e *recordsEndpoint) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := ctrl.Log.WithName("flightrecorder")
	res, ok, err := e.authn.AuthenticateRequest(req)
	if err != nil {
		log.Error(err, "authentication failed")
		http.Error(w, "Authentication failed", http.StatusInternalServerError)
		return
	}
	if !ok {
		http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
		return
	}
	decision, reason, err := e.authz.Authorize(req.Context(), authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path})
	if err != nil {
		log.Error(err, "authorization failed", "user", res.User.GetName())
		http.Error(w, "Authorization failed", http.StatusInternalServerError)
		return
	}
	if decision != authorizer.DecisionAllow {
		log.V(4).Info("authorization denied", "user", res.User.GetName(), "reason", reason)
		http.Error(w, fmt.Sprintf("Authorization denied for user %s: it needs get on the non-resource URL %s", res.User.GetName(), req.URL.Path), http.StatusForbidden)
		return
	}
	e.mu.Lock()
	inner := e.inner
	e.mu.Unlock()
	if inner == nil {
		http.Error(w, "the flight recorder is disabled (--no-flight-recorder)", http.StatusNotFound)
		return
	}
	inner.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), userKey{}, res.User)))
}

// mayRead answers whether the authenticated client of a request may get
// the objects of a kind in a namespace: a SubjectAccessReview, cached.
func (e *recordsEndpoint) mayRead(mapper meta.RESTMapper) func(*http.Request, schema.GroupVersionKind, string) (bool, error) {
	return func(req *http.Request, gvk schema.GroupVersionKind, namespace string) (bool, error) {
		u, ok := req.Context().Value(userKey{}).(user.Info)
		if !ok {
			return false, nil
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, fmt.Errorf("the resource of %s: %w", gvk, err)
		}
		decision, _, err := e.authz.Authorize(req.Context(), authorizer.AttributesRecord{User: u, Verb: "get", ResourceRequest: true,
			APIGroup: gvk.Group, APIVersion: gvk.Version, Resource: m.Resource.Resource, Namespace: namespace})
		if err != nil {
			return false, err
		}
		return decision == authorizer.DecisionAllow, nil
	}
}
