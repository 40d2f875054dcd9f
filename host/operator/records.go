package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
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
// It asks the API server itself (RATIONALE.md, "Why does the flight
// recorder's endpoint send its own TokenReviews and SubjectAccessReviews?"),
// with the caching of k8s.io/apiserver's delegating authenticator and
// authorizer as controller-runtime's filter configures them: a token's
// review for a minute, an allowed access for a minute, a denied one for
// 10 s; errors are not cached.
type recordsEndpoint struct {
	tokens    authenticationv1.TokenReviewInterface
	access    authorizationv1.SubjectAccessReviewInterface
	reviewed  *cache.LRUExpireCache // sha256 of a token -> *reviewedUser, nil when refused
	decisions *cache.LRUExpireCache // a SubjectAccessReview's spec, as JSON -> bool

	mu    sync.Mutex
	inner http.Handler
}

// reviewedUser is who a TokenReview said a token belongs to.
type reviewedUser struct {
	name, uid string
	groups    []string
	extra     map[string]authzv1.ExtraValue
}

type userKey struct{}

// Cache lifetimes and sizes of the endpoint's reviews.
const (
	reviewTTL       = time.Minute      // a token's review, either way
	allowTTL        = time.Minute      // an allowed access
	denyTTL         = 10 * time.Second // a denied access: a role granted is used within 10 s
	reviewCacheSize = 1024             // tokens and decisions kept, each
	reviewTimeout   = 10 * time.Second // one review, retries included
)

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
	return &recordsEndpoint{tokens: authnClient.TokenReviews(), access: authzClient.SubjectAccessReviews(),
		reviewed: cache.NewLRUExpireCache(reviewCacheSize), decisions: cache.NewLRUExpireCache(reviewCacheSize)}, nil
}

// reviewBackoff retries a review that failed (not one that answered no), as
// the delegating authenticator's webhook backoff does.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// authenticate returns who the bearer token of req belongs to, nil when
// there is none or the API server refuses it.
func (e *recordsEndpoint) authenticate(req *http.Request) (*reviewedUser, error) {
	token, ok := bearerToken(req.Header.Get("Authorization"))
	if !ok {
		return nil, nil
	}
	key := tokenKey(token)
	if u, ok := e.reviewed.Get(key); ok {
		return u.(*reviewedUser), nil
	}
	ctx, cancel := context.WithTimeout(req.Context(), reviewTimeout)
	defer cancel()
	var res *authnv1.TokenReview
	err := retry.OnError(reviewBackoff, func(error) bool { return ctx.Err() == nil }, func() (err error) {
		res, err = e.tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var u *reviewedUser
	if st := res.Status; st.Authenticated && st.Error == "" {
		u = &reviewedUser{name: st.User.Username, uid: st.User.UID, groups: st.User.Groups, extra: map[string]authzv1.ExtraValue{}}
		for k, v := range st.User.Extra {
			u.extra[k] = authzv1.ExtraValue(v)
		}
	}
	e.reviewed.Add(key, u, reviewTTL)
	return u, nil
}

// tokenKey is what a token's review is cached under: its sha256, so that
// the cache holds no token.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// bearerToken returns the token of an Authorization header "Bearer
// <token>" (the scheme in any case), as the API server reads it.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// allowed asks the API server whether u may do what spec says (its user
// fields are set here): a SubjectAccessReview, cached.
func (e *recordsEndpoint) allowed(ctx context.Context, u *reviewedUser, spec authzv1.SubjectAccessReviewSpec) (bool, string, error) {
	spec.User, spec.UID, spec.Groups, spec.Extra = u.name, u.uid, u.groups, u.extra
	keyJSON, err := json.Marshal(spec)
	if err != nil {
		return false, "", err
	}
	key := string(keyJSON)
	if ok, cached := e.decisions.Get(key); cached {
		return ok.(bool), "cached", nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	var res *authzv1.SubjectAccessReview
	err = retry.OnError(reviewBackoff, func(error) bool { return ctx.Err() == nil }, func() (err error) {
		res, err = e.access.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	ok := res.Status.Allowed && !res.Status.Denied
	ttl := denyTTL
	if ok {
		ttl = allowTTL
	}
	e.decisions.Add(key, ok, ttl)
	return ok, res.Status.Reason, nil
}

func (e *recordsEndpoint) set(h http.Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inner = h
}

func (e *recordsEndpoint) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := ctrl.Log.WithName("flightrecorder")
	u, err := e.authenticate(req)
	if err != nil {
		log.Error(err, "authentication failed")
		http.Error(w, "Authentication failed", http.StatusInternalServerError)
		return
	}
	if u == nil {
		http.Error(w, "Unauthorized: send a bearer token the API server accepts", http.StatusUnauthorized)
		return
	}
	ok, reason, err := e.allowed(req.Context(), u, authzv1.SubjectAccessReviewSpec{
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: req.URL.Path, Verb: strings.ToLower(req.Method)}})
	if err != nil {
		log.Error(err, "authorization failed", "user", u.name)
		http.Error(w, "Authorization failed", http.StatusInternalServerError)
		return
	}
	if !ok {
		log.V(4).Info("authorization denied", "user", u.name, "reason", reason)
		http.Error(w, fmt.Sprintf("Authorization denied for user %s: it needs get on the non-resource URL %s", u.name, req.URL.Path), http.StatusForbidden)
		return
	}
	e.mu.Lock()
	inner := e.inner
	e.mu.Unlock()
	if inner == nil {
		http.Error(w, "the flight recorder is disabled (--no-flight-recorder)", http.StatusNotFound)
		return
	}
	inner.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), userKey{}, u)))
}

// mayRead answers whether the authenticated client of a request may get
// the objects of a kind in a namespace: a SubjectAccessReview, cached.
func (e *recordsEndpoint) mayRead(mapper meta.RESTMapper) func(*http.Request, schema.GroupVersionKind, string) (bool, error) {
	return func(req *http.Request, gvk schema.GroupVersionKind, namespace string) (bool, error) {
		u, ok := req.Context().Value(userKey{}).(*reviewedUser)
		if !ok {
			return false, nil
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, fmt.Errorf("the resource of %s: %w", gvk, err)
		}
		ok, _, err = e.allowed(req.Context(), u, authzv1.SubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: "get", Group: gvk.Group, Version: gvk.Version, Resource: m.Resource.Resource, Namespace: namespace}})
		return ok, err
	}
}
