package faultproxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// HTTPProxy is an HTTP reverse proxy in front of the API server. It
// authenticates to the API server with the given config (client-go's own
// transport) and serves plain HTTP, so that rules can answer chosen requests
// with Kubernetes errors instead of forwarding them.
type HTTPProxy struct {
	srv *httptest.Server

	mu    sync.Mutex
	rules []*Rule
	log   []string // requests seen, for debugging tests
}

// Requests returns the requests the proxy has seen, as "METHOD URL [answer]".
func (p *HTTPProxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

// Rule answers matching requests with an error, Times times (0: forever).
// A rule with Rewrite instead forwards the request and rewrites the API
// server's JSON answer (for example, to empty a list): a lie that looks real.
type Rule struct {
	Match   func(*http.Request) bool
	Code    int
	Reason  metav1.StatusReason
	Rewrite func(body map[string]any)
	Times   int
	hits    atomic.Int64
}

// Hits is how many requests the rule answered.
func (r *Rule) Hits() int { return int(r.hits.Load()) }

// StartHTTP starts a proxy to the API server of cfg. Config returns the
// config that clients use to go through it.
func StartHTTP(cfg *rest.Config) (*HTTPProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	p := &HTTPProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // stream watches
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rule := p.match(r)
		p.mu.Lock()
		entry := time.Now().Format("15:04:05.000") + " " + r.Method + " " + r.URL.String()
		if rule != nil && rule.Rewrite != nil {
			entry += " [rewritten]"
		} else if rule != nil {
			entry += " [injected " + string(rule.Reason) + "]"
		}
		p.log = append(p.log, entry)
		p.mu.Unlock()
		if rule != nil && rule.Rewrite != nil {
			rewrite(w, r, transport, target, rule.Rewrite)
			return
		}
		if rule != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rule.Code)
			_ = json.NewEncoder(w).Encode(&metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Code: int32(rule.Code), Reason: rule.Reason,
				Message: "injected by faultproxy: " + string(rule.Reason),
			})
			return
		}
		rp.ServeHTTP(w, r)
	}))
	return p, nil
}

// rewrite forwards r, decodes the JSON answer, applies fn and sends it on.
func rewrite(w http.ResponseWriter, r *http.Request, transport http.RoundTripper, target *url.URL, fn func(map[string]any)) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = target.Scheme, target.Host, target.Host
	out.Header.Set("Accept", "application/json")
	out.Header.Del("Accept-Encoding")
	resp, err := transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		http.Error(w, "faultproxy: decoding the answer to rewrite: "+err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode == http.StatusOK {
		fn(body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_ = json.NewEncoder(w).Encode(body)
}

// CutConnections closes every client connection (watches end with EOF);
// the proxy keeps serving new ones.
func (p *HTTPProxy) CutConnections() { p.srv.CloseClientConnections() }

// Config is a client config that goes through the proxy.
func (p *HTTPProxy) Config() *rest.Config {
	return &rest.Config{Host: p.srv.URL}
}

// Add installs a rule; rules are tried in order.
func (p *HTTPProxy) Add(r *Rule) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
	return r
}

func (p *HTTPProxy) match(req *http.Request) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if (r.Times == 0 || r.hits.Load() < int64(r.Times)) && r.Match(req) {
			r.hits.Add(1)
			return r
		}
	}
	return nil
}

// Close stops the proxy. It cuts open connections first: a client's watch
// is a request that would otherwise keep Close waiting for minutes.
func (p *HTTPProxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}
