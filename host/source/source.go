// Package source fetches module bytes. Every place a module can come from
// is a Fetcher: a file (File), a ConfigMap or Secret key (ConfigMap,
// Secret), an http(s) URL (URL), or bytes already in memory (Bytes); Dir
// watches a directory of files. A new kind of source (an OCI registry, say)
// is one more Fetcher.
//
// Every Fetcher caps what it reads (Options.MaxBytes) and accepts raw or
// gzip'd wasm, decompressed under the same cap. Pinning (sha256) is checked
// by the caller on what Fetch returns, in one place for every source.
//
// What a source may reach is a policy (docs/sources.md): URL sources follow
// a URLPolicy (allowed hosts, public addresses only unless AllowPrivate,
// checked on the address dialed; redirects within one scheme and host), and
// ConfigMap and Secret sources read only Options.Namespaces. A refusal is a
// *URLRefusedError or a *NamespaceRefusedError; no error quotes what a
// server sent.
package source

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Fetcher returns one module's bytes from one place.
type Fetcher interface {
	// Fetch returns the module's uncompressed bytes. Its errors say what to
	// do about them.
	Fetch(ctx context.Context) ([]byte, error)
	// String describes the source for messages: "file /m/widget.wasm",
	// "ConfigMap ns/name key module.wasm.gz", a URL.
	String() string
}

// Options cap what a Fetcher reads. Zero fields take the stated defaults.
type Options struct {
	// MaxBytes caps a module's size, compressed and uncompressed.
	// Defaults to DefaultMaxBytes.
	MaxBytes int64
	// URL is the policy of URL sources: which hosts, addresses and
	// redirects they may reach. Defaults to the zero URLPolicy: any host
	// with public addresses, redirects within the same scheme and host.
	URL URLPolicy
	// Namespaces are the namespaces ConfigMap and Secret sources may read;
	// "*" is any. A source naming another namespace fails with a
	// *NamespaceRefusedError before anything is read. Defaults to nil: any
	// namespace (the caller chose it). The operator always sets it
	// (--module-source-namespaces, by default its own namespace).
	Namespaces []string
	// BlobCache is where OCI sources keep the manifests and modules they
	// fetched, by digest (see OCI and NewBlobCache). Defaults to nil:
	// nothing is kept, every fetch goes to the registry.
	BlobCache *BlobCache
}

// DefaultMaxBytes is the default cap of a module's size: 64 MiB.
const DefaultMaxBytes = 64 << 20

func (o Options) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return o.MaxBytes
}

// File reads a module from a file.
func File(path string, opts Options) Fetcher { return file{path, opts} }

type file struct {
	path string
	opts Options
}

func (f file) String() string { return "file " + f.path }

func (f file) Fetch(context.Context) ([]byte, error) {
	r, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("%w; check the path, or mount the volume holding it into the operator", err)
	}
	defer r.Close()
	return decode(r, f.opts.maxBytes())
}

// ConfigMap reads a module from key of a ConfigMap, in binaryData or data;
// key defaults to DefaultKey. r should read live (a manager's APIReader), so
// that the operator needs no cluster-wide cache of ConfigMaps.
func ConfigMap(r client.Reader, namespace, name, key string, opts Options) Fetcher {
	return keyRef{r: r, secret: false, namespace: namespace, name: name, key: orDefault(key), opts: opts}
}

// Secret reads a module from key of a Secret; key defaults to DefaultKey.
func Secret(r client.Reader, namespace, name, key string, opts Options) Fetcher {
	return keyRef{r: r, secret: true, namespace: namespace, name: name, key: orDefault(key), opts: opts}
}

// DefaultKey is the key of a ConfigMap or Secret source when none is given.
const DefaultKey = "module.wasm.gz"

func orDefault(key string) string {
	if key == "" {
		return DefaultKey
	}
	return key
}

type keyRef struct {
	r                    client.Reader
	secret               bool
	namespace, name, key string
	opts                 Options
}

func (k keyRef) what() string {
	if k.secret {
		return "Secret"
	}
	return "ConfigMap"
}

func (k keyRef) String() string {
	return fmt.Sprintf("%s %s/%s key %s", k.what(), k.namespace, k.name, k.key)
}

func (k keyRef) Fetch(ctx context.Context) ([]byte, error) {
	if !namespaceAllowed(k.opts.Namespaces, k.namespace) {
		return nil, &NamespaceRefusedError{Kind: k.what(), Namespace: k.namespace, Allowed: k.opts.Namespaces}
	}
	var b []byte
	var ok bool
	if k.secret {
		var s corev1.Secret
		if err := k.r.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, &s); err != nil {
			return nil, err
		}
		b, ok = s.Data[k.key]
	} else {
		var cm corev1.ConfigMap
		if err := k.r.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, &cm); err != nil {
			return nil, err
		}
		if b, ok = cm.BinaryData[k.key]; !ok {
			var s string
			s, ok = cm.Data[k.key]
			b = []byte(s)
		}
	}
	if !ok {
		cmd := "configmap"
		if k.secret {
			cmd = "secret generic"
		}
		return nil, fmt.Errorf("no key %q; create it with `kubectl create %s %s --from-file=%s=module.wasm.gz`", k.key, cmd, k.name, k.key)
	}
	return decode(bytes.NewReader(b), k.opts.maxBytes())
}

// URL fetches a module over http(s), under opts.URL's policy (see
// URLPolicy) and timeout (DefaultURLTimeout when zero). With a nil client it
// uses NewHTTPClient(opts.URL), which enforces the whole policy. A client
// of the caller's keeps its Transport: the host allowlist and the redirect
// rules still apply, but the address rules only if that Transport is one of
// NewTransport's. Errors never quote what the server sent.
func URL(c *http.Client, url string, timeout time.Duration, opts Options) Fetcher {
	if timeout <= 0 {
		timeout = DefaultURLTimeout
	}
	return urlSource{c: c, url: url, timeout: timeout, opts: opts}
}

// DefaultURLTimeout bounds fetching a URL source when no timeout is given.
const DefaultURLTimeout = 30 * time.Second

func namespaceAllowed(allowed []string, ns string) bool {
	if allowed == nil {
		return true
	}
	for _, a := range allowed {
		if a == "*" || a == ns {
			return true
		}
	}
	return false
}

// NamespaceRefusedError is a ConfigMap or Secret source in a namespace the
// operator may not read module sources from. Nothing was read.
type NamespaceRefusedError struct {
	Kind      string // "ConfigMap" or "Secret"
	Namespace string
	Allowed   []string
}

func (e *NamespaceRefusedError) Error() string {
	from := "no namespace"
	switch len(e.Allowed) {
	case 0:
	case 1:
		from = fmt.Sprintf("namespace %q", e.Allowed[0])
	default:
		q := make([]string, len(e.Allowed))
		for i, a := range e.Allowed {
			q[i] = fmt.Sprintf("%q", a)
		}
		from = "namespaces " + strings.Join(q, ", ")
	}
	return fmt.Sprintf("source namespace %q is not allowed: the operator reads module ConfigMaps and Secrets only from %s; "+
		"move the %s there, or add %q to --module-source-namespaces", e.Namespace, from, e.Kind, e.Namespace)
}

// Bytes serves bytes already in memory, described as desc; for tests and
// for programs that build modules themselves.
func Bytes(desc string, b []byte) Fetcher { return inMemory{desc, b} }

type inMemory struct {
	desc string
	b    []byte
}

func (m inMemory) String() string                        { return m.desc }
func (m inMemory) Fetch(context.Context) ([]byte, error) { return m.b, nil }

// decode reads raw or gzip'd wasm from r, at most max bytes either way.
func decode(r io.Reader, max int64) ([]byte, error) {
	b, err := readCapped(r, max)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(b, []byte("\x00asm")) {
		return b, nil
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return nil, errors.New("neither wasm nor gzip'd wasm; store the .wasm file, or the output of `gzip -c module.wasm`")
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := readCapped(zr, max)
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return out, nil
}

func readCapped(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("module is larger than %d bytes (--max-module-bytes)", max)
	}
	return b, nil
}
