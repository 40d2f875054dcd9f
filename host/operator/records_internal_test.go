package operator

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestBearerToken: the token of "Bearer <token>", the scheme in any case,
// as the API server reads it; anything else is no token.
func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc",
		"": "", "Bearer": "", "Bearer ": "", "Basic abc": "", "abc": "", "Bearerabc": "",
	} {
		got, ok := bearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("bearerToken(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
}

// reviewsEndpoint is a recordsEndpoint on a fake clientset where token
// "good" is user alice, any other is refused, and alice may do only what
// allow says; it counts the reviews made.
func reviewsEndpoint(t *testing.T, allow func(authzv1.SubjectAccessReviewSpec) bool) (e *recordsEndpoint, tokenReviews, accessReviews *int) {
	t.Helper()
	cs := fake.NewClientset()
	tokenReviews, accessReviews = new(int), new(int)
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*tokenReviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		if tr.Spec.Token == "broken" {
			return true, nil, errors.New("the API server is down")
		}
		if tr.Spec.Token == "good" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice", Groups: []string{"devs"}}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		*accessReviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		if sar.Spec.User != "alice" || len(sar.Spec.Groups) != 1 || sar.Spec.Groups[0] != "devs" {
			t.Errorf("SubjectAccessReview for %q %v, want alice of devs", sar.Spec.User, sar.Spec.Groups)
		}
		sar.Status.Allowed = allow(sar.Spec)
		return true, sar, nil
	})
	return &recordsEndpoint{tokens: cs.AuthenticationV1().TokenReviews(), access: cs.AuthorizationV1().SubjectAccessReviews(),
		reviewed: cache.NewLRUExpireCache(8), decisions: cache.NewLRUExpireCache(8)}, tokenReviews, accessReviews
}

// TestRecordsEndpointReviews: 401 without a token or with a refused one,
// 403 when the path is not allowed, the records when it is; a token and a
// decision are reviewed once and then answered from the cache; a review
// that fails is a 500 and is not cached.
func TestRecordsEndpointReviews(t *testing.T) {
	paths := map[string]bool{"/records": true}
	e, tokenReviews, accessReviews := reviewsEndpoint(t, func(s authzv1.SubjectAccessReviewSpec) bool {
		return s.NonResourceAttributes != nil && s.NonResourceAttributes.Verb == "get" && paths[s.NonResourceAttributes.Path]
	})
	e.set(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, _ := req.Context().Value(userKey{}).(*reviewedUser); u == nil || u.name != "alice" {
			t.Errorf("the records handler got user %v, want alice", u)
		}
		_, _ = w.Write([]byte("records"))
	}))
	get := func(path, header string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code
	}
	for _, c := range []struct {
		path, header string
		want         int
	}{
		{"/records", "", http.StatusUnauthorized},
		{"/records", "Bearer bad", http.StatusUnauthorized},
		{"/records", "Bearer bad", http.StatusUnauthorized},
		{"/other", "Bearer good", http.StatusForbidden},
		{"/other", "Bearer good", http.StatusForbidden},
		{"/records", "Bearer good", http.StatusOK},
		{"/records", "Bearer good", http.StatusOK},
	} {
		if got := get(c.path, c.header); got != c.want {
			t.Errorf("GET %s with %q: HTTP %d, want %d", c.path, c.header, got, c.want)
		}
	}
	if *tokenReviews != 2 || *accessReviews != 2 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want 2 and 2: each answer once, then from the cache", *tokenReviews, *accessReviews)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no retries: the review fails at once
	req := httptest.NewRequest(http.MethodGet, "/records", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer broken")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	if w.Code != http.StatusInternalServerError {
		t.Errorf("a failing TokenReview: HTTP %d, want 500", w.Code)
	}
	if _, cached := e.reviewed.Get(tokenKey("broken")); cached {
		t.Error("a failed TokenReview was cached")
	}
}

// TestMayReadAsksPerObject: the second check asks for get on the record's
// kind in its namespace, and answers what the API server said.
func TestMayReadAsksPerObject(t *testing.T) {
	e, _, accessReviews := reviewsEndpoint(t, func(s authzv1.SubjectAccessReviewSpec) bool {
		r := s.ResourceAttributes
		return r != nil && r.Verb == "get" && r.Resource == "configmaps" && r.Namespace == "team-a"
	})
	u := &reviewedUser{name: "alice", groups: []string{"devs"}}
	ask := func(ns string) bool {
		ok, _, err := e.allowed(context.Background(), u, authzv1.SubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: "get", Version: "v1", Resource: "configmaps", Namespace: ns}})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !ask("team-a") || ask("team-b") || !ask("team-a") || ask("team-b") {
		t.Error("want team-a allowed and team-b denied, twice each")
	}
	if *accessReviews != 2 {
		t.Errorf("%d SubjectAccessReviews, want 2", *accessReviews)
	}
}
