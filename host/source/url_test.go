package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var testWasm = append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte{0}, 100)...)

// countingServer serves testWasm at /m.wasm, redirects /old to /m.wasm,
// /loop/N to /loop/N+1, and /away to away; it counts requests.
func countingServer(t *testing.T, tls bool, away func(r *http.Request) string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch {
		case r.URL.Path == "/m.wasm":
			_, _ = w.Write(testWasm)
		case r.URL.Path == "/old":
			http.Redirect(w, r, "/m.wasm", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/loop/"):
			var n int
			fmt.Sscanf(r.URL.Path, "/loop/%d", &n)
			http.Redirect(w, r, fmt.Sprintf("/loop/%d", n+1), http.StatusFound)
		case r.URL.Path == "/away":
			http.Redirect(w, r, away(r), http.StatusFound)
		case r.URL.Path == "/secret-500":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "secret-body-text")
		default:
			http.NotFound(w, r)
		}
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv, &hits
}

// rawServer accepts connections on loopback and answers each with answer,
// written before reading anything when first, else once the request's
// headers have arrived; then it reads until the client closes, or closes
// at once when hangUp.
func rawServer(t *testing.T, answer string, first, hangUp bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(conn)
				if !first {
					for {
						line, err := br.ReadString('\n')
						if err != nil || line == "\r\n" {
							break
						}
					}
				}
				_, _ = io.WriteString(conn, answer)
				if !hangUp {
					_, _ = io.Copy(io.Discard, br)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// publicHooks resolve every host name to 93.184.215.14 (a public address)
// and connect every dial of an allowed address to addr instead, recording
// what was dialed: the policy sees public addresses without the internet.
func publicHooks(p URLPolicy, addr string, dialed *[]string) URLPolicy {
	p.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "nowhere.example.com" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		if host == "mixed.example.com" {
			return []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("93.184.215.14")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	p.dial = func(ctx context.Context, network, a string) (net.Conn, error) {
		*dialed = append(*dialed, a)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return p
}

// TestSourceURLPolicy fetches URLs under the policy: every refusal with its
// reason and what to do, nothing sent to a refused host, and the paths that
// are allowed.
func TestSourceURLPolicy(t *testing.T) {
	other, otherHits := countingServer(t, false, nil)
	srv, hits := countingServer(t, false, func(*http.Request) string { return other.URL + "/m.wasm" })
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	tlsSrv, _ := countingServer(t, true, func(r *http.Request) string { return "http://" + r.Host + "/m.wasm" }) // a downgrade
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	trusting := func(p URLPolicy) *http.Client { // the policy's transport, trusting the test server's certificate
		tr := NewTransport(p)
		tr.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		return &http.Client{Transport: tr}
	}
	private := URLPolicy{AllowPrivate: true}
	var dialed []string

	for _, tc := range []struct {
		name   string
		client *http.Client
		policy URLPolicy
		url    string
		reason RefusalReason // "" for a fetch that succeeds
		want   []string      // in the error
	}{
		// Addresses.
		{"loopback", nil, URLPolicy{}, srv.URL + "/m.wasm", RefusedAddress,
			[]string{"127.0.0.1 is a loopback address", "--module-url-allow-private"}},
		{"metadata", nil, URLPolicy{}, "http://169.254.169.254/latest/meta-data/", RefusedAddress,
			[]string{"169.254.169.254 is a link-local", "cloud metadata", "may never reach"}},
		{"metadata with allow-private", nil, private, "http://169.254.169.254/latest/meta-data/", RefusedAddress,
			[]string{"link-local", "may never reach"}},
		{"private 10.x", nil, URLPolicy{}, "http://10.1.2.3/m.wasm", RefusedAddress,
			[]string{"10.1.2.3 is a private (RFC 1918) address"}},
		{"ipv6 loopback", nil, URLPolicy{}, fmt.Sprintf("http://[::1]:%d/m.wasm", port), RefusedAddress,
			[]string{"::1 is a loopback address"}},
		{"ipv4-mapped loopback", nil, URLPolicy{}, fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/m.wasm", port), RefusedAddress,
			[]string{"loopback"}},
		{"unspecified", nil, private, fmt.Sprintf("http://0.0.0.0:%d/m.wasm", port), RefusedAddress,
			[]string{"unspecified", "may never reach"}},
		{"a name resolving to loopback", nil, URLPolicy{lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}}, fmt.Sprintf("http://internal.example.com:%d/m.wasm", port), RefusedAddress,
			[]string{`host "internal.example.com" resolves to 127.0.0.1, a loopback address`}},

		// Hosts.
		{"wildcard allows a subdomain", nil, publicHooks(URLPolicy{AllowedHosts: []string{"*.b.example.com"}}, srv.Listener.Addr().String(), &dialed),
			"http://mod.b.example.com/m.wasm", "", nil},
		{"wildcard allows a deeper subdomain", nil, publicHooks(URLPolicy{AllowedHosts: []string{"*.b.example.com"}}, srv.Listener.Addr().String(), &dialed),
			"http://x.mod.B.example.com./m.wasm", "", nil},
		{"wildcard does not allow the domain", nil, publicHooks(URLPolicy{AllowedHosts: []string{"*.b.example.com"}}, srv.Listener.Addr().String(), &dialed),
			"http://b.example.com/m.wasm", RefusedHost, []string{`host "b.example.com" is not allowed`, "--module-url-allowed-hosts"}},
		{"another host", nil, publicHooks(URLPolicy{AllowedHosts: []string{"*.b.example.com", "a.example.com"}}, srv.Listener.Addr().String(), &dialed),
			"http://evil.example.com/m.wasm", RefusedHost, []string{`add "evil.example.com"`}},
		{"an allowed host must still be public", nil, URLPolicy{AllowedHosts: []string{"127.0.0.1"}}, srv.URL + "/m.wasm", RefusedAddress,
			[]string{"loopback"}},
		{"an allowed IP with allow-private", nil, URLPolicy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivate: true}, srv.URL + "/m.wasm", "", nil},
		{"public host, no allowlist", nil, publicHooks(URLPolicy{}, srv.Listener.Addr().String(), &dialed),
			"http://modules.example.com/m.wasm", "", nil},
		{"a public and a private address: the public one is dialed", nil, publicHooks(URLPolicy{}, srv.Listener.Addr().String(), &dialed),
			"http://mixed.example.com/m.wasm", "", nil},

		// Redirects.
		{"redirect within the host", nil, private, srv.URL + "/old", "", nil},
		{"redirect to another host", nil, private, srv.URL + "/away", RefusedCrossHostRedirect,
			[]string{"refused a cross-host redirect from http://127.0.0.1:", "to " + other.URL, "final URL"}},
		{"redirect https to http", trusting(private), private, tlsSrv.URL + "/away", RefusedDowngrade,
			[]string{"from https to http", fmt.Sprintf("https://127.0.0.1:%d", tlsPort)}},
		{"too many redirects", nil, private, srv.URL + "/loop/0", RefusedTooManyRedirects,
			[]string{"more than 5 redirects"}},
		{"redirect cap of the policy", nil, URLPolicy{AllowPrivate: true, MaxRedirects: 1}, srv.URL + "/loop/0", RefusedTooManyRedirects,
			[]string{"more than 1 redirects"}},
		{"a caller's client gets the redirect rules", srv.Client(), URLPolicy{}, srv.URL + "/away", RefusedCrossHostRedirect, nil},

		// Other failures say what failed.
		{"http 500", nil, private, srv.URL + "/secret-500", "", []string{"the server answered HTTP 500 Internal Server Error"}},
		{"http 404", nil, private, srv.URL + "/missing", "", []string{"HTTP 404 Not Found", "path"}},
		{"dns", nil, publicHooks(URLPolicy{}, srv.Listener.Addr().String(), &dialed), "http://nowhere.example.com/m.wasm", "",
			[]string{`DNS: no such host "nowhere.example.com"`}},
		{"refused connection", nil, private, "http://" + closedAddr(t) + "/m.wasm", "", []string{"refused", "port"}},
		{"plain http on an https URL", trusting(private), private, "https://" + srv.Listener.Addr().String() + "/m.wasm", "",
			[]string{"answered plain http to https"}},
		{"not a URL", nil, URLPolicy{}, "ftp://example.com/m.wasm", RefusedBadURL, []string{"http or https URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeOther := hits.Load(), otherHits.Load()
			got, err := URL(tc.client, tc.url, 10*time.Second, Options{URL: tc.policy}).Fetch(context.Background())
			var refused *URLRefusedError
			switch {
			case tc.reason == "" && tc.want == nil:
				if err != nil {
					t.Fatalf("fetch: %v", err)
				}
				if !bytes.Equal(got, testWasm) {
					t.Fatalf("got %d bytes, want the module's %d", len(got), len(testWasm))
				}
				return
			case err == nil:
				t.Fatalf("fetch succeeded, want an error")
			case tc.reason != "" && (!errors.As(err, &refused) || refused.Reason != tc.reason):
				t.Fatalf("error %v (%T), want a URLRefusedError %s", err, err, tc.reason)
			case tc.reason == "" && errors.As(err, &refused):
				t.Fatalf("error %v, want a failure that is not a refusal", err)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q repeats what the server sent", err)
			}
			if tc.reason == RefusedAddress || tc.reason == RefusedHost {
				if n := hits.Load() - before; n != 0 {
					t.Errorf("the refused host got %d requests", n)
				}
			}
			if n := otherHits.Load() - beforeOther; n != 0 {
				t.Errorf("the host redirected to got %d requests", n)
			}
		})
	}
	for _, d := range dialed {
		if !strings.HasPrefix(d, "93.184.215.14:") {
			t.Errorf("dialed %s, want only the public address", d)
		}
	}
}

func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestSourceURLErrorsQuoteNothing fetches from servers that answer with
// something other than HTTP, or with a reason phrase and a body of their
// own: the error says what failed and repeats none of it.
func TestSourceURLErrorsQuoteNothing(t *testing.T) {
	const banner = "SSH-2.0-OpenSSH_9.6 secret-banner\r\n"
	for _, tc := range []struct {
		name, scheme, answer string
		first, hangUp        bool
		want                 string
	}{
		{"ssh banner after the request", "http", banner, false, false, "did not answer with HTTP"},
		{"ssh banner at once", "http", banner, true, false, "did not answer with HTTP"},
		{"ssh banner on https", "https", banner, true, false, "did not answer with TLS"},
		{"500 with a reason phrase and body", "http", "HTTP/1.1 500 secret-reason\r\nContent-Length: 16\r\nConnection: close\r\n\r\nsecret-body-text", false, false,
			"the server answered HTTP 500 Internal Server Error"},
		{"unknown status code", "http", "HTTP/1.1 599 secret-reason\r\nContent-Length: 0\r\n\r\n", false, false, "the server answered HTTP 599;"},
		{"malformed header", "http", "HTTP/1.1 200 OK\r\nsecret-header-without-colon\r\n\r\n", false, false, "did not answer with HTTP"},
		{"body cut short", "http", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n\x00asm secret", false, true, "did not answer with HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawServer(t, tc.answer, tc.first, tc.hangUp)
			_, err := URL(nil, tc.scheme+"://"+addr+"/m.wasm", 10*time.Second, Options{URL: URLPolicy{AllowPrivate: true}}).Fetch(context.Background())
			if err == nil {
				t.Fatal("fetch succeeded")
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want %q", msg, tc.want)
			}
			for _, leak := range []string{"secret", "SSH-2.0", "OpenSSH"} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q repeats what the server sent (%q)", msg, leak)
				}
			}
		})
	}
}

// TestSourceURLTimeoutAndSize: a server that does not answer times out
// with a message naming the flag; a module over the cap is refused from
// its Content-Length.
func TestSourceURLTimeoutAndSize(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Length", "5000")
		_, _ = w.Write(make([]byte, 5000))
	}))
	defer srv.Close()
	p := Options{URL: URLPolicy{AllowPrivate: true}, MaxBytes: 1000}
	_, err := URL(nil, srv.URL+"/slow", 50*time.Millisecond, p).Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "timed out after 50ms") || !strings.Contains(err.Error(), "--module-fetch-timeout") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow server: %v, want a timeout naming --module-fetch-timeout", err)
	}
	_, err = URL(nil, srv.URL+"/big", 0, p).Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), "larger than 1000 bytes") {
		t.Errorf("big module: %v, want the size cap", err)
	}
}

// TestSourceURLString: a URL's password is not repeated in messages.
func TestSourceURLString(t *testing.T) {
	if s := URL(nil, "https://user:hunter2@example.com/m.wasm", 0, Options{}).String(); strings.Contains(s, "hunter2") {
		t.Errorf("String() = %q shows the password", s)
	}
}

// TestSourceAddressClass classifies addresses, IPv4 embedded in IPv6
// included, and checks the dialer's Control hook refuses what the policy
// refuses.
func TestSourceAddressClass(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8": "", "93.184.215.14": "", "2606:4700:4700::1111": "",
		"127.0.0.1": "loopback", "127.9.9.9": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.0.0.1": "private", "172.16.5.4": "private", "192.168.1.1": "private", "fd00::1": "private", "fc00::1": "private",
		"169.254.169.254": "link-local", "fe80::1": "link-local", "fe80::1%eth0": "link-local",
		"0.0.0.0": "unspecified", "::": "unspecified", "224.0.0.1": "multicast", "ff02::1": "multicast",
		"255.255.255.255": "broadcast", "100.64.0.1": "shared", "192.0.2.1": "reserved", "240.0.0.1": "reserved",
		"64:ff9b::a00:1": "private", "64:ff9b::808:808": "", "2002:7f00:1::": "loopback", "2001:db8::1": "reserved",
		"::127.0.0.1": "reserved", "2001::1": "reserved",
	} {
		class, _ := addressClass(netip.MustParseAddr(addr))
		if (want == "") != (class == "") || !strings.Contains(class, want) {
			t.Errorf("addressClass(%s) = %q, want %q", addr, class, want)
		}
	}
	var p URLPolicy
	if err := p.control("tcp4", "127.0.0.1:80", nil); err == nil {
		t.Error("Control allowed 127.0.0.1")
	}
	if err := p.control("tcp6", "[fe80::1%eth0]:80", nil); err == nil {
		t.Error("Control allowed fe80::1")
	}
	if err := p.control("tcp4", "8.8.8.8:443", nil); err != nil {
		t.Errorf("Control refused 8.8.8.8: %v", err)
	}
	p.AllowPrivate = true
	if err := p.control("tcp4", "10.0.0.1:80", nil); err != nil {
		t.Errorf("Control with AllowPrivate refused 10.0.0.1: %v", err)
	}
	if err := p.control("tcp4", "169.254.169.254:80", nil); err == nil {
		t.Error("Control with AllowPrivate allowed the metadata address")
	}
}

// TestSourceURLPolicyValidate accepts host names, "*.domain" patterns and
// IP addresses, and refuses anything else.
func TestSourceURLPolicyValidate(t *testing.T) {
	for _, ok := range []string{"a.example.com", "*.b.example.com", "Modules.Example.COM.", "10.0.0.1", "::1", "[::1]", "localhost"} {
		if err := (URLPolicy{AllowedHosts: []string{ok}}).Validate(); err != nil {
			t.Errorf("Validate(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*", "*example.com", "a.*.example.com", "https://a.example.com", "a.example.com:443", "a.example.com/path", "a..b"} {
		if err := (URLPolicy{AllowedHosts: []string{bad}}).Validate(); err == nil || !strings.Contains(err.Error(), "--module-url-allowed-hosts") {
			t.Errorf("Validate(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}

// countingReader is a client.Reader that counts its reads and finds
// nothing.
type countingReader struct{ gets atomic.Int32 }

func (r *countingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets.Add(1)
	switch o := obj.(type) {
	case *corev1.Secret:
		o.Data = map[string][]byte{DefaultKey: testWasm}
	case *corev1.ConfigMap:
		o.BinaryData = map[string][]byte{DefaultKey: testWasm}
	}
	return nil
}

func (r *countingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

// TestSourceNamespaces: a ConfigMap or Secret in a namespace that is not
// allowed is refused, naming the namespaces allowed and the flag, and is
// not read; "*" and nil allow any.
func TestSourceNamespaces(t *testing.T) {
	r := &countingReader{}
	for _, f := range []Fetcher{
		Secret(r, "other", "mod", "", Options{Namespaces: []string{"wasmreconcile-system"}}),
		ConfigMap(r, "other", "mod", "", Options{Namespaces: []string{"a", "b"}}),
		Secret(r, "other", "mod", "", Options{Namespaces: []string{}}),
	} {
		_, err := f.Fetch(context.Background())
		var refused *NamespaceRefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), `source namespace "other" is not allowed`) ||
			!strings.Contains(err.Error(), `add "other" to --module-source-namespaces`) {
			t.Errorf("%s: %v, want a NamespaceRefusedError saying what to do", f, err)
		}
	}
	if err := (&NamespaceRefusedError{Kind: "Secret", Namespace: "x", Allowed: []string{"wasmreconcile-system"}}).Error(); !strings.Contains(err, `only from namespace "wasmreconcile-system"`) {
		t.Errorf("message %q does not name the namespace allowed", err)
	}
	if n := r.gets.Load(); n != 0 {
		t.Fatalf("%d reads of a source refused", n)
	}
	for _, f := range []Fetcher{
		Secret(r, "other", "mod", "", Options{Namespaces: []string{"*"}}),
		ConfigMap(r, "other", "mod", "", Options{Namespaces: []string{"x", "other"}}),
		Secret(r, "other", "mod", "", Options{}),
	} {
		if _, err := f.Fetch(context.Background()); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if n := r.gets.Load(); n != 3 {
		t.Errorf("%d reads, want 3", n)
	}
}
