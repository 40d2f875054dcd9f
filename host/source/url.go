package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// URLPolicy says what a URL source may reach. The zero value allows any host
// whose addresses are public, over http or https, and follows at most
// DefaultMaxRedirects redirects, each within the URL's scheme, host and
// port. docs/sources.md explains the policy.
//
// The host allowlist and the redirect rules are checked by the URL Fetcher,
// whatever its http.Client. The address rules are checked where the
// connection is made, on the address actually dialed (after DNS, for every
// redirect too), by the DialContext of NewTransport: a client with a
// Transport of its own does not check them.
type URLPolicy struct {
	// AllowedHosts are the hosts URL sources may fetch from: a host name
	// ("modules.example.com"), "*." and a domain for any name under it
	// ("*.example.com" matches a.example.com and a.b.example.com, not
	// example.com), or an IP address. A pattern has no port: any port of an
	// allowed host is allowed. Defaults to none: any host, as long as its
	// addresses are allowed.
	AllowedHosts []string
	// AllowPrivate lets URL sources reach addresses that are not public:
	// loopback, private (RFC 1918, fc00::/7), shared (100.64.0.0/10) and
	// the other reserved unicast ranges. Link-local addresses
	// (169.254.0.0/16, where cloud metadata services answer, and
	// fe80::/10), unspecified, multicast and broadcast addresses stay
	// refused. Defaults to false.
	AllowPrivate bool
	// MaxRedirects caps the redirects a fetch follows. Defaults to
	// DefaultMaxRedirects; negative follows none.
	MaxRedirects int

	// Hooks for tests: lookup resolves a host name, dial connects to an
	// address the policy has allowed. nil takes the system's.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DefaultMaxRedirects is how many redirects a URL source follows by default.
const DefaultMaxRedirects = 5

func (p URLPolicy) maxRedirects() int {
	switch {
	case p.MaxRedirects < 0:
		return 0
	case p.MaxRedirects == 0:
		return DefaultMaxRedirects
	}
	return p.MaxRedirects
}

// Validate checks AllowedHosts: each must be a host name, a "*.domain"
// pattern or an IP address.
func (p URLPolicy) Validate() error {
	for _, h := range p.AllowedHosts {
		if _, err := parseHostPattern(h); err != nil {
			return err
		}
	}
	return nil
}

// hostPattern is a parsed AllowedHosts entry.
type hostPattern struct {
	name   string     // an exact host name, lowercase, no trailing dot
	suffix string     // ".example.com" for "*.example.com"
	addr   netip.Addr // an IP address
}

func parseHostPattern(s string) (hostPattern, error) {
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return hostPattern{addr: a.Unmap().WithZone("")}, nil
	}
	bad := fmt.Errorf(`--module-url-allowed-hosts: %q is not a host name, a "*.domain" pattern or an IP address (no scheme, port or path)`, s)
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if !validHostName(rest) {
			return hostPattern{}, bad
		}
		return hostPattern{suffix: "." + rest}, nil
	}
	if !validHostName(h) {
		return hostPattern{}, bad
	}
	return hostPattern{name: h}, nil
}

// validHostName reports whether h is a DNS name: dot-separated labels of
// letters, digits, '-' and '_', none empty.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether host (a URL's Hostname) is in AllowedHosts.
func (p URLPolicy) hostAllowed(host string) bool {
	if len(p.AllowedHosts) == 0 {
		return true
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	a, err := netip.ParseAddr(h)
	isAddr := err == nil
	for _, s := range p.AllowedHosts {
		pat, err := parseHostPattern(s)
		switch {
		case err != nil:
		case pat.addr.IsValid():
			if isAddr && a.Unmap().WithZone("") == pat.addr {
				return true
			}
		case isAddr:
		case pat.suffix != "":
			if strings.HasSuffix(h, pat.suffix) {
				return true
			}
		case h == pat.name:
			return true
		}
	}
	return false
}

// CheckRedirect is an http.Client's CheckRedirect for the policy: it
// follows at most MaxRedirects redirects, each to the first request's
// scheme, host and port, and never from https to http.
func (p URLPolicy) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) == 0 {
		return nil
	}
	first := via[0].URL
	from, to := origin(first), origin(req.URL)
	if len(via) > p.maxRedirects() {
		return &URLRefusedError{Reason: RefusedTooManyRedirects, Max: p.maxRedirects(), From: from, To: to}
	}
	if first.Scheme == "https" && req.URL.Scheme != "https" {
		return &URLRefusedError{Reason: RefusedDowngrade, From: from, To: to}
	}
	if from != to {
		return &URLRefusedError{Reason: RefusedCrossHostRedirect, From: from, To: to}
	}
	return nil
}

// origin is a URL's scheme://host:port, lowercase, with the scheme's
// default port made explicit.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), port)
}

// NewTransport returns an http.Transport that dials only addresses the
// policy allows. It resolves a host name itself, checks every address, and
// dials one of those it allowed, by address, so that the address checked
// is the address connected to (DNS cannot answer differently in between);
// the dialer checks it once more as it connects. It uses no proxy, not even
// one from the environment: through a proxy, the address dialed would be
// the proxy's, and the policy could not see where the request goes.
func NewTransport(p URLPolicy) *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: p.dialContext,
		// A connection serves one request: an idle connection the server
		// writes to would have net/http log those bytes ("Unsolicited
		// response"). Modules are fetched rarely; nothing is lost.
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// NewHTTPClient returns a client that enforces the whole policy: a
// Transport of NewTransport and the policy's CheckRedirect.
func NewHTTPClient(p URLPolicy) *http.Client {
	return &http.Client{Transport: NewTransport(p), CheckRedirect: p.CheckRedirect}
}

func (p URLPolicy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		lookup := p.lookup
		if lookup == nil {
			lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		if addrs, err = lookup(ctx, host); err != nil {
			return nil, err
		}
	}
	dial := p.dial
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
		dial = d.DialContext
	}
	var refused, last error
	for _, a := range addrs {
		a = a.Unmap()
		if err := p.checkAddr(host, a); err != nil {
			if refused == nil {
				refused = err
			}
			continue
		}
		conn, err := dial(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return &writeFirstConn{Conn: conn, wrote: make(chan struct{}), closed: make(chan struct{})}, nil
		}
		last = err
	}
	if last != nil {
		return nil, last
	}
	if refused != nil {
		return nil, refused
	}
	return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
}

// writeFirstConn reads nothing before the client has written: bytes a
// server sends before the request (an SSH banner) would otherwise reach
// net/http while it expects no response, and it logs them.
type writeFirstConn struct {
	net.Conn
	wrote, closed         chan struct{}
	wroteOnce, closedOnce sync.Once
}

func (c *writeFirstConn) Write(b []byte) (int, error) {
	c.wroteOnce.Do(func() { close(c.wrote) })
	return c.Conn.Write(b)
}

func (c *writeFirstConn) Read(b []byte) (int, error) {
	select {
	case <-c.wrote:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

func (c *writeFirstConn) Close() error {
	c.closedOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// control checks, as the socket connects, the address it connects to.
func (p URLPolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &URLRefusedError{Reason: RefusedAddress, Host: address, Class: "not an IP address"}
	}
	return p.checkAddr(ap.Addr().String(), ap.Addr())
}

// checkAddr refuses an address of host that the policy does not allow.
func (p URLPolicy) checkAddr(host string, a netip.Addr) error {
	class, never := addressClass(a)
	if class == "" || (p.AllowPrivate && !never) {
		return nil
	}
	return &URLRefusedError{Reason: RefusedAddress, Host: host, Addr: a.Unmap().WithZone(""), Class: class, Never: never}
}

// nonPublic are the ranges that are not public unicast, most specific
// first. never marks those AllowPrivate does not open.
var nonPublic = []struct {
	prefix netip.Prefix
	class  string
	never  bool
}{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified", true},
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" (0.0.0.0/8)`, true},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)", false},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT, 100.64.0.0/10)", false},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", false},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.169.254 is the cloud metadata service)", true},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)", false},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved (IETF protocol assignments)", false},
	{netip.MustParsePrefix("192.0.2.0/24"), "reserved (documentation)", false},
	{netip.MustParsePrefix("192.88.99.0/24"), "reserved (6to4 relay)", false},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)", false},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)", false},
	{netip.MustParsePrefix("198.51.100.0/24"), "reserved (documentation)", false},
	{netip.MustParsePrefix("203.0.113.0/24"), "reserved (documentation)", false},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", true},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast", true},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4)", false},

	{netip.MustParsePrefix("::/128"), "unspecified", true},
	{netip.MustParsePrefix("::1/128"), "loopback", false},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "reserved (local-use NAT64)", false},
	{netip.MustParsePrefix("100::/64"), "reserved (discard-only)", false},
	{netip.MustParsePrefix("2001::/23"), "reserved (IETF protocol assignments, Teredo)", false},
	{netip.MustParsePrefix("2001:db8::/32"), "reserved (documentation)", false},
	{netip.MustParsePrefix("3fff::/20"), "reserved (documentation)", false},
	{netip.MustParsePrefix("fc00::/7"), "private (unique local, fc00::/7)", false},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)", true},
	{netip.MustParsePrefix("fec0::/10"), "reserved (site-local)", false},
	{netip.MustParsePrefix("ff00::/8"), "multicast", true},
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// addressClass says what kind of non-public address a is ("loopback",
// "private (RFC 1918)", ...), or "" for a public one; never is set for the
// classes AllowPrivate does not open. IPv4 addresses mapped or embedded in
// IPv6 (::ffff:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by
// their IPv4 address.
func addressClass(a netip.Addr) (class string, never bool) {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "invalid", true
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64.Contains(a):
			a = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(a):
			a = netip.AddrFrom4([4]byte(b[2:6]))
		}
	}
	for _, r := range nonPublic {
		if r.prefix.Contains(a) {
			return r.class, r.never
		}
	}
	if a.Is6() && !global6.Contains(a) {
		return "reserved (outside 2000::/3)", false
	}
	return "", false
}

// RefusalReason says why the URL policy refused a fetch.
type RefusalReason string

// Reasons of a URLRefusedError.
const (
	RefusedBadURL            RefusalReason = "BadURL"            // not an http(s) URL with a host
	RefusedHost              RefusalReason = "HostNotAllowed"    // the host is not in AllowedHosts
	RefusedAddress           RefusalReason = "AddressNotAllowed" // the host's address is not public
	RefusedCrossHostRedirect RefusalReason = "CrossHostRedirect" // a redirect to another scheme, host or port
	RefusedDowngrade         RefusalReason = "Downgrade"         // a redirect from https to http
	RefusedTooManyRedirects  RefusalReason = "TooManyRedirects"  // more than MaxRedirects
)

// URLRefusedError is a fetch the URL policy refused. It is returned before
// anything is sent to the host refused.
type URLRefusedError struct {
	Reason RefusalReason
	// Host is the host refused (HostNotAllowed, AddressNotAllowed, BadURL).
	Host string
	// Addr and Class are the address refused and what it is ("loopback").
	// Never is set when --module-url-allow-private would not allow it
	// either.
	Addr  netip.Addr
	Class string
	Never bool
	// From and To are a redirect's origins, scheme://host:port (only the
	// origin of the server's Location: not its path or query).
	From, To string
	// Max is the redirect cap (TooManyRedirects).
	Max int
}

func (e *URLRefusedError) Error() string {
	switch e.Reason {
	case RefusedBadURL:
		return "spec.source.url must be an http or https URL with a host"
	case RefusedHost:
		return fmt.Sprintf("host %q is not allowed: the operator fetches module URLs only from the hosts of --module-url-allowed-hosts; "+
			`serve the module from one of them, or add %q (or a pattern such as "*.example.com") to --module-url-allowed-hosts`, e.Host, e.Host)
	case RefusedAddress:
		what := fmt.Sprintf("host %q resolves to %s, %s address", e.Host, e.Addr, article(e.Class))
		if _, err := netip.ParseAddr(e.Host); err == nil {
			what = fmt.Sprintf("%s is %s address", e.Host, article(e.Class))
		}
		if !e.Addr.IsValid() {
			what = fmt.Sprintf("%q is %s", e.Host, e.Class)
		}
		if e.Never {
			return what + ", which module URLs may never reach; serve the module from another address"
		}
		return what + ", which module URLs may not reach; serve the module from a public address, " +
			"or start the operator with --module-url-allow-private to let it fetch from private networks"
	case RefusedCrossHostRedirect:
		return fmt.Sprintf("refused a cross-host redirect from %s to %s: module URLs follow redirects only within the same scheme, host and port; "+
			"set spec.source.url to the module's final URL", e.From, quoteHost(e.To))
	case RefusedDowngrade:
		return fmt.Sprintf("refused a redirect from https to http (from %s to %s): module URLs are never downgraded to plain http; "+
			"set spec.source.url to the module's final https URL", e.From, quoteHost(e.To))
	case RefusedTooManyRedirects:
		return fmt.Sprintf("refused to follow more than %d redirects (from %s); set spec.source.url to the module's final URL", e.Max, e.From)
	}
	return "refused by the module URL policy"
}

// article prefixes a class with "a" or "an".
func article(class string) string {
	if class != "" && strings.ContainsRune("aeiou", rune(class[0])) {
		return "an " + class
	}
	return "a " + class
}

// quoteHost prints an origin taken from a server's Location header: capped,
// and quoted if it holds anything but the characters of a URL's origin.
func quoteHost(s string) string {
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":/.-_[]", r)) {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// HTTPStatusError is an answer other than 200 OK. Only the numeric code is
// kept: the status line's reason phrase and the body are the server's, and
// are not repeated.
type HTTPStatusError struct {
	Code int
}

func (e *HTTPStatusError) Error() string {
	status := fmt.Sprintf("HTTP %d", e.Code)
	if t := http.StatusText(e.Code); t != "" {
		status += " " + t
	}
	hint := "check spec.source.url and the server"
	switch {
	case e.Code == http.StatusNotFound || e.Code == http.StatusGone:
		hint = "check spec.source.url's path"
	case e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden:
		hint = "the operator sends no credentials: serve the module without authentication, or use a ConfigMap or Secret source"
	case e.Code >= 300 && e.Code < 400:
		hint = "a redirect without a usable Location; set spec.source.url to the module's final URL"
	case e.Code >= 500:
		hint = "check the server (the fetch is retried)"
	}
	return "the server answered " + status + "; " + hint
}

// urlSource fetches a module over http(s) under a URLPolicy.
type urlSource struct {
	c       *http.Client // nil: NewHTTPClient(opts.URL) for each fetch
	url     string
	timeout time.Duration
	opts    Options
}

func (u urlSource) String() string {
	if p, err := url.Parse(u.url); err == nil {
		return p.Redacted()
	}
	return "a malformed URL"
}

func (u urlSource) Fetch(ctx context.Context) ([]byte, error) {
	p := u.opts.URL
	target, err := url.Parse(u.url)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Hostname() == "" {
		return nil, &URLRefusedError{Reason: RefusedBadURL}
	}
	if !p.hostAllowed(target.Hostname()) {
		return nil, &URLRefusedError{Reason: RefusedHost, Host: strings.ToLower(target.Hostname())}
	}
	c := u.c
	if c == nil {
		c = NewHTTPClient(p)
		defer c.CloseIdleConnections()
	} else {
		// The caller's client, with the policy's redirect rules before its
		// own.
		cc := *c
		own := c.CheckRedirect
		cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			if err := p.CheckRedirect(req, via); err != nil {
				return err
			}
			if own != nil {
				return own(req, via)
			}
			return nil
		}
		c = &cc
	}
	ctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, &URLRefusedError{Reason: RefusedBadURL}
	}
	host := target.Host
	resp, err := c.Do(req)
	if err != nil {
		return nil, describe(ctx, err, host, u.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPStatusError{Code: resp.StatusCode}
	}
	max := u.opts.maxBytes()
	if resp.ContentLength > max {
		return nil, fmt.Errorf("module is larger than %d bytes (--max-module-bytes): the server announces %d", max, resp.ContentLength)
	}
	return decode(describingReader{resp.Body, ctx, host, u.timeout}, max)
}

// describingReader replaces the errors of reading a response body by
// describe's.
type describingReader struct {
	r       io.Reader
	ctx     context.Context
	host    string
	timeout time.Duration
}

func (d describingReader) Read(b []byte) (int, error) {
	n, err := d.r.Read(b)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("reading the module: %w", describe(d.ctx, err, d.host, d.timeout))
	}
	return n, err
}

// describe turns an error of fetching from host into one that says what
// failed and what to do, without any text the server sent: Go's own errors
// quote it (a status line that is not HTTP, a certificate's names), so they
// are never repeated.
func describe(ctx context.Context, err error, host string, timeout time.Duration) error {
	var (
		refused  *URLRefusedError
		dnsErr   *net.DNSError
		netErr   net.Error
		record   tls.RecordHeaderError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &refused):
		return refused
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timed out after %s (%w); check that %s answers, or raise --module-fetch-timeout", timeout, context.DeadlineExceeded, host)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("fetching from %s: %w", host, context.Canceled)
	case errors.As(err, &dnsErr):
		switch {
		case dnsErr.IsNotFound:
			return fmt.Errorf("DNS: no such host %q; check spec.source.url's host", dnsErr.Name)
		case dnsErr.IsTimeout:
			return fmt.Errorf("DNS: looking up %q timed out; check the cluster's DNS", dnsErr.Name)
		}
		return fmt.Errorf("DNS: looking up %q failed; check the cluster's DNS and spec.source.url's host", dnsErr.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("connection to %s refused; check spec.source.url's port, and that the server runs", host)
	case errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%s reset the connection before answering; check that the URL's port serves http(s)", host)
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%s is unreachable from the operator", host)
	case errors.As(err, &record):
		return fmt.Errorf("%s did not answer with TLS; check spec.source.url's scheme (https) and port", host)
	case errors.As(err, &unknown):
		return fmt.Errorf("TLS: the certificate of %s is signed by an authority the operator does not trust", host)
	case errors.As(err, &hostname):
		return fmt.Errorf("TLS: the certificate of %s is not valid for that host name", host)
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return fmt.Errorf("TLS: the certificate of %s has expired or is not valid yet", host)
		}
		return fmt.Errorf("TLS: the certificate of %s is invalid", host)
	case errors.As(err, &verify):
		return fmt.Errorf("TLS: the certificate of %s could not be verified", host)
	case errors.As(err, &alert):
		return fmt.Errorf("TLS: the handshake with %s failed (%s)", host, alert.Error())
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("timed out talking to %s; check that it answers, or raise --module-fetch-timeout", host)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s did not answer with HTTP (it closed the connection before a whole HTTP answer); check that spec.source.url's scheme and port serve the module", host)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s answered plain http to https; check spec.source.url's scheme and port", host)
	}
	return fmt.Errorf("%s did not answer with HTTP (its answer was not a valid HTTP response); check that spec.source.url's scheme and port serve the module", host)
}
