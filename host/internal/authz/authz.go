// Package authz gives a module the identity of a ServiceAccount.
//
// An Identity is one ServiceAccount: a client that writes as it (the
// operator impersonates the account), Event recorders that post as it, and
// Authorize, which answers whether it may read a kind in a namespace. The
// answers come from SubjectAccessReviews that the operator makes (it needs
// `create subjectaccessreviews`), cached per (identity, verb, group,
// resource, namespace) for Options.AllowedTTL when allowed and
// Options.DeniedTTL when denied, so that a reconcile's reads cost no API
// call in the steady state. See docs/security.md.
package authz

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of Options.
const (
	DefaultAllowedTTL = time.Minute
	DefaultDeniedTTL  = 10 * time.Second
)

// Options configure an Authorizer. Zero fields take the stated defaults.
type Options struct {
	// Review answers one access review. Required for New; NewIdentities
	// defaults it to SubjectAccessReviews (SelfSubjectAccessReviews for
	// the operator itself) made with the operator's config.
	Review func(ctx context.Context, a Attributes) (Decision, error)
	// AllowedTTL is how long an allowed answer is reused. A right revoked
	// takes up to this long to be refused. Defaults to 1 minute.
	AllowedTTL time.Duration
	// DeniedTTL is how long a denied answer is reused. A right granted
	// takes up to this long to be used. Defaults to 10 seconds.
	DeniedTTL time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.AllowedTTL <= 0 {
		o.AllowedTTL = DefaultAllowedTTL
	}
	if o.DeniedTTL <= 0 {
		o.DeniedTTL = DefaultDeniedTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Attributes are what one access review asks: may User (with Groups) do
// Verb on Resource of Group in Namespace ("" for cluster-scoped resources
// and across all namespaces), named Name ("" for any)? An empty User asks
// about the operator itself.
type Attributes struct {
	User      string
	Groups    []string
	Verb      string
	Group     string
	Resource  string
	Namespace string
	Name      string
}

// Decision is a review's answer.
type Decision struct {
	Allowed bool
	// Reason is the authorizer's explanation, often empty when denied.
	Reason string
}

// Authorizer answers access reviews from a cache.
type Authorizer struct {
	opts Options

	mu      sync.Mutex
	entries map[cacheKey]*entry
	sweepAt int // the cache size at which expired entries are swept
}

type cacheKey struct {
	user, groups, verb, group, resource, namespace, name string
}

// entry is one answer, or one review in flight (done open).
type entry struct {
	done     chan struct{}
	decision Decision
	err      error
	expires  time.Time
}

// New returns an Authorizer. opts.Review is required.
func New(opts Options) (*Authorizer, error) {
	if opts.Review == nil {
		return nil, fmt.Errorf("authz: Options.Review is required")
	}
	return &Authorizer{opts: opts.withDefaults(), entries: map[cacheKey]*entry{}, sweepAt: 1024}, nil
}

// Check answers a, from the cache when an answer is still fresh. Concurrent
// checks of the same attributes share one review. An error (the review
// could not be made) is not cached.
func (a *Authorizer) Check(ctx context.Context, attrs Attributes) (Decision, error) {
	key := cacheKey{attrs.User, strings.Join(attrs.Groups, ","), attrs.Verb, attrs.Group, attrs.Resource, attrs.Namespace, attrs.Name}
	a.mu.Lock()
	e, ok := a.entries[key]
	if ok {
		select {
		case <-e.done:
			if a.opts.Now().Before(e.expires) {
				a.mu.Unlock()
				return e.decision, nil
			}
			ok = false // expired: review again
		default: // in flight: wait for it below
		}
	}
	if !ok {
		e = &entry{done: make(chan struct{})}
		a.entries[key] = e
		a.sweep()
		a.mu.Unlock()
		d, err := a.opts.Review(ctx, attrs)
		a.mu.Lock()
		e.decision, e.err = d, err
		ttl := a.opts.DeniedTTL
		if d.Allowed {
			ttl = a.opts.AllowedTTL
		}
		e.expires = a.opts.Now().Add(ttl)
		if err != nil && a.entries[key] == e {
			delete(a.entries, key)
		}
		close(e.done)
		a.mu.Unlock()
		return d, err
	}
	a.mu.Unlock()
	select {
	case <-e.done:
		return e.decision, e.err
	case <-ctx.Done():
		return Decision{}, ctx.Err()
	}
}

// sweep drops expired answers once the cache has doubled since the last
// sweep, so that it holds about what is in use. a.mu is held.
func (a *Authorizer) sweep() {
	if len(a.entries) < a.sweepAt {
		return
	}
	now := a.opts.Now()
	for k, e := range a.entries {
		select {
		case <-e.done:
			if !now.Before(e.expires) {
				delete(a.entries, k)
			}
		default:
		}
	}
	a.sweepAt = max(1024, 2*len(a.entries))
}

// Len is the number of answers cached or in flight.
func (a *Authorizer) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

// ParseServiceAccount parses "namespace/name".
func ParseServiceAccount(s string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(s, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("ServiceAccount %q: want NAMESPACE/NAME", s)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", fmt.Errorf("ServiceAccount %q: namespace: %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("ServiceAccount %q: name: %s", s, strings.Join(errs, "; "))
	}
	return namespace, name, nil
}

// UserName is the user name of a ServiceAccount:
// system:serviceaccount:<namespace>:<name>.
func UserName(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Groups are the groups of every ServiceAccount of namespace, as the API
// server authenticates its tokens: system:serviceaccounts,
// system:serviceaccounts:<namespace> and system:authenticated.
func Groups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// ForbiddenError is a read an identity may not make, or an identity the
// operator may not impersonate. apierrors.IsForbidden reports true for it.
type ForbiddenError struct {
	// Account is the ServiceAccount, "namespace/name".
	Account string
	// Impersonate is true when the operator may not impersonate Account;
	// the other fields are then empty.
	Impersonate bool
	Verb        string
	Group       string
	Resource    string
	Namespace   string
	Reason      string // the authorizer's, if any
}

func (e *ForbiddenError) Error() string {
	if e.Impersonate {
		msg := fmt.Sprintf("the operator may not impersonate ServiceAccount %s: grant its own account `impersonate` on that serviceaccount (docs/security.md)", e.Account)
		if e.Reason != "" {
			msg += " (" + e.Reason + ")"
		}
		return msg
	}
	resource := e.Resource
	if e.Group != "" {
		resource += "." + e.Group
	}
	where := fmt.Sprintf("in namespace %q", e.Namespace)
	if e.Namespace == "" {
		where = "cluster-wide"
	}
	msg := fmt.Sprintf("ServiceAccount %s may not %s %s %s; grant it with a Role or ClusterRole bound to the account (docs/security.md)", e.Account, e.Verb, resource, where)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

// Status makes apierrors.IsForbidden and apierrors.ReasonForError see a
// Forbidden error.
func (e *ForbiddenError) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: e.Error()}
}
