package operator

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
)

// TestShardAgentNamesTheCurrentGeneration: every request carries the
// generation of the claims at the time it is sent, the User-Agent made
// once per generation, and the caller's request is left as it was.
func TestShardAgentNamesTheCurrentGeneration(t *testing.T) {
	a := newShardAgent(&rest.Config{UserAgent: "op/1"}, "r-1")
	var gen atomic.Int64
	var seen string
	rt := a.wrap(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		seen = req.Header.Get("User-Agent")
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	send := func() string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "https://example.invalid/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", "caller")
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("User-Agent"); got != "caller" {
			t.Errorf("the caller's request was changed: User-Agent %q", got)
		}
		return seen
	}
	if got := send(); got != "op/1 shard=r-1 g=0" {
		t.Errorf("before any claims: %q", got)
	}
	f := gen.Load
	a.generation.Store(&f)
	for _, g := range []int64{3, 3, 4, 2} {
		gen.Store(g)
		want := "op/1 shard=r-1 g=" + strconv.FormatInt(g, 10)
		if got := send(); got != want {
			t.Errorf("at generation %d: %q, want %q", g, got, want)
		}
	}
}
