package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	clitypes "github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The wasm OCI artifact layout (CNCF TAG Runtime's "Wasm OCI Artifact
// layout", as used by wasm-pkg-tools, Kubewarden and Spin): an image
// manifest whose config has WasmConfigMediaType and whose one layer, of
// WasmLayerMediaType, is the module.
const (
	WasmConfigMediaType types.MediaType = "application/vnd.wasm.config.v0+json"
	WasmLayerMediaType  types.MediaType = "application/vnd.wasm.content.layer.v1+wasm"
	// legacyWasmLayerMediaType is the layer type of Istio's and Solo's
	// earlier "compat" layout; a module pushed that way is read too.
	legacyWasmLayerMediaType types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
)

// OCIScheme prefixes an OCI reference in a source: oci://REGISTRY/REPO@sha256:HEX.
const OCIScheme = "oci://"

// OCIRef is an OCI reference to a module: a repository, a tag for people
// to read, and the manifest digest that is what is pinned and fetched.
type OCIRef struct {
	// Repository is REGISTRY/PATH, as in "registry.example.com:5000/team/widget".
	Repository string
	// Tag is the tag given, or "". It is never resolved when a digest is
	// given: the digest alone says what is fetched.
	Tag string
	// Digest is the manifest's digest, "sha256:" and 64 hex digits, or ""
	// when only a tag was given.
	Digest string

	repo name.Repository
}

// String is the reference as oci://REPOSITORY[:TAG][@DIGEST].
func (r OCIRef) String() string {
	s := OCIScheme + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// Registry is the registry's host[:port].
func (r OCIRef) Registry() string { return r.repo.RegistryStr() }

// ParseOCIRef parses oci://REGISTRY/REPO[:TAG][@sha256:HEX] (the oci://
// prefix may be left out). The registry must be named: a reference without
// one does not silently mean Docker Hub. Only sha256 digests are accepted,
// lower-case hex.
func ParseOCIRef(s string) (OCIRef, error) {
	bad := func(why string) (OCIRef, error) {
		return OCIRef{}, fmt.Errorf("malformed OCI reference %q: %s; write oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST, for example oci://ghcr.io/acme/widget:v1@sha256:<64 hex digits>", s, why)
	}
	rest := strings.TrimPrefix(s, OCIScheme)
	var r OCIRef
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest, r.Digest = rest[:i], rest[i+1:]
		hexPart, ok := strings.CutPrefix(r.Digest, "sha256:")
		if !ok || len(hexPart) != 64 || strings.ToLower(hexPart) != hexPart {
			return bad("the digest must be sha256: and 64 lower-case hex digits")
		}
		if _, err := hex.DecodeString(hexPart); err != nil {
			return bad("the digest must be sha256: and 64 lower-case hex digits")
		}
	}
	slash := strings.Index(rest, "/")
	if slash <= 0 || !strings.ContainsAny(rest[:slash], ".:") && rest[:slash] != "localhost" {
		return bad("it names no registry (the part before the first '/' must be a host such as ghcr.io or localhost:5000)")
	}
	if i := strings.LastIndex(rest, ":"); i > slash {
		rest, r.Tag = rest[:i], rest[i+1:]
		// The distribution spec's tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
		// (go-containerregistry does not check the first character).
		if _, err := name.NewTag("registry.invalid/x:"+r.Tag, name.StrictValidation); err != nil || r.Tag == "" || r.Tag[0] == '.' || r.Tag[0] == '-' {
			return bad("the tag " + fmt.Sprintf("%q", r.Tag) + " is not valid")
		}
	}
	repo, err := name.NewRepository(rest, name.StrictValidation)
	if err != nil {
		return bad("the repository is not valid")
	}
	r.Repository, r.repo = rest, repo
	return r, nil
}

// OCI fetches a module from an OCI registry: ref (see ParseOCIRef) must
// carry a digest, and only the manifest of that digest is fetched, so a
// tag moved to other bytes changes nothing. The manifest must have the
// wasm artifact layout (one layer of WasmLayerMediaType); the layer's bytes
// are checked against the manifest's digest of them, and then, as for every
// source, against the module's sha256 by the caller.
//
// creds, when not nil, gives the registry credentials at each fetch
// (PullSecret, DockerConfigFile); nil is anonymous. The registry's host
// follows opts.URL like a URL source's: AllowedHosts names the registry,
// and the addresses dialed (the registry's, its token service's, a blob
// redirect's) must be public unless AllowPrivate. A loopback or private
// registry is spoken to over plain http when it has no TLS, as
// go-containerregistry does; any other over https only.
//
// With opts.BlobCache set, a manifest and a module fetched once are kept
// there by digest, checked again when read, and not fetched again: an
// operator restarting while the registry is down still loads them (see
// BlobCache for its bound).
// timeout bounds the whole fetch (DefaultURLTimeout when zero).
func OCI(ref string, creds Credentials, timeout time.Duration, opts Options) Fetcher {
	if timeout <= 0 {
		timeout = DefaultURLTimeout
	}
	return ociSource{ref: ref, creds: creds, timeout: timeout, opts: opts}
}

type ociSource struct {
	ref     string
	creds   Credentials
	timeout time.Duration
	opts    Options
}

func (o ociSource) String() string { return o.ref }

// MissingDigestError is an OCI reference without a digest where one is
// required.
type MissingDigestError struct{ Ref string }

func (e *MissingDigestError) Error() string {
	return fmt.Sprintf("%s names no digest: a module is pinned by its manifest digest, not a tag, which can move; "+
		"`operator pull %s` prints the digest, then write %s@sha256:DIGEST", e.Ref, e.Ref, e.Ref)
}

func (o ociSource) Fetch(ctx context.Context) ([]byte, error) {
	ref, err := ParseOCIRef(o.ref)
	if err != nil {
		return nil, err
	}
	if ref.Digest == "" {
		return nil, &MissingDigestError{Ref: o.ref}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r, err := newOCIRemote(ctx, ref, o.creds, o.opts)
	if err != nil {
		return nil, err
	}
	cache := o.opts.BlobCache
	man, ok := cache.get(ref.Digest)
	if !ok {
		if man, err = r.manifest(ctx, ref.Digest); err != nil {
			return nil, err
		}
		cache.put(ref.Digest, man)
	}
	layer, err := wasmLayer(man, o.opts.maxBytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	b, ok := cache.get(layer.Digest.String())
	if !ok {
		if b, err = r.blob(ctx, layer, o.opts.maxBytes()); err != nil {
			return nil, err
		}
		cache.put(layer.Digest.String(), b)
	}
	return decode(bytes.NewReader(b), o.opts.maxBytes())
}

// wasmLayer returns the one wasm layer of a manifest, refusing anything
// that is not the wasm artifact layout or is larger than max.
func wasmLayer(raw []byte, max int64) (v1.Descriptor, error) {
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return v1.Descriptor{}, errors.New("the manifest is not JSON")
	}
	switch m.MediaType {
	case types.OCIImageIndex, types.DockerManifestList:
		return v1.Descriptor{}, errors.New("is an image index, not a module's manifest; name the digest of the wasm manifest it lists")
	case "", types.OCIManifestSchema1, types.DockerManifestSchema2:
	default:
		return v1.Descriptor{}, fmt.Errorf("is a %s, not an image manifest", m.MediaType)
	}
	var found []v1.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == WasmLayerMediaType || l.MediaType == legacyWasmLayerMediaType {
			found = append(found, l)
		}
	}
	if len(found) != 1 || len(m.Layers) != 1 {
		return v1.Descriptor{}, fmt.Errorf("is not a wasm module: it must have exactly one layer, of media type %s, and has %d layers (%d of them wasm); push the module with `operator push`", WasmLayerMediaType, len(m.Layers), len(found))
	}
	l := found[0]
	if l.Digest.Algorithm != "sha256" {
		return v1.Descriptor{}, fmt.Errorf("its layer digest is %s; only sha256 is accepted", l.Digest.Algorithm)
	}
	if l.Size < 0 || l.Size > max {
		return v1.Descriptor{}, fmt.Errorf("its module is %d bytes, larger than %d bytes (--max-module-bytes)", l.Size, max)
	}
	return l, nil
}

// ociRemote speaks to one repository under the source policy.
type ociRemote struct {
	ref  OCIRef
	opts []remote.Option
}

func newOCIRemote(ctx context.Context, ref OCIRef, creds Credentials, opts Options) (*ociRemote, error) {
	host := ref.repo.Registry.RegistryStr()
	hostname := host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		hostname = h
	}
	if !opts.URL.hostAllowed(strings.Trim(hostname, "[]")) {
		return nil, &URLRefusedError{Reason: RefusedHost, Host: strings.ToLower(hostname)}
	}
	keys := authn.Keychain(anonymous{})
	if creds != nil {
		k, err := creds.keychain(ctx)
		if err != nil {
			return nil, err
		}
		keys = k
	}
	return &ociRemote{ref: ref, opts: []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(limitManifests{next: NewTransport(opts.URL), max: MaxManifestBytes}),
		remote.WithAuthFromKeychain(keys),
		remote.WithUserAgent("wasmreconcile"),
	}}, nil
}

type anonymous struct{}

func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }

// manifest fetches the manifest of digest, which go-containerregistry
// checks against the digest.
func (r *ociRemote) manifest(ctx context.Context, digest string) ([]byte, error) {
	d := r.ref.repo.Digest(digest)
	desc, err := remote.Get(d, r.opts...)
	if err != nil {
		return nil, r.describe(ctx, err, "manifest "+digest)
	}
	return desc.Manifest, nil
}

// blob fetches the layer l, checked against its digest and size.
func (r *ociRemote) blob(ctx context.Context, l v1.Descriptor, max int64) ([]byte, error) {
	layer, err := remote.Layer(r.ref.repo.Digest(l.Digest.String()), r.opts...)
	if err != nil {
		return nil, r.describe(ctx, err, "module layer "+l.Digest.String())
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, r.describe(ctx, err, "module layer "+l.Digest.String())
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, r.describe(ctx, err, "module layer "+l.Digest.String())
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("module is larger than %d bytes (--max-module-bytes)", max)
	}
	if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != l.Digest.String() {
		return nil, fmt.Errorf("%s: the module layer's bytes do not match its digest %s; the registry served other content", r.ref, l.Digest)
	}
	return b, nil
}

// OCIError is a registry's refusal of a fetch or push, with what to do.
type OCIError struct {
	Ref  string
	What string // "manifest sha256:…", "module layer sha256:…", "push"
	// Status is the registry's HTTP status (0 when it never answered).
	Status int
	// Codes are the registry's error codes ("MANIFEST_UNKNOWN",
	// "UNAUTHORIZED"); never its free-text messages.
	Codes []string
}

func (e *OCIError) Error() string {
	var do string
	switch {
	case e.Status == http.StatusUnauthorized:
		do = "the registry wants credentials, or refused the ones given; set spec.source.oci.pullSecret to a kubernetes.io/dockerconfigjson Secret for it (`kubectl create secret docker-registry`), or --module-registry-config for --module"
	case e.Status == http.StatusForbidden:
		do = "the credentials given may not read this repository; grant them pull access"
	case e.Status == http.StatusNotFound || hasCode(e.Codes, "MANIFEST_UNKNOWN", "BLOB_UNKNOWN", "NAME_UNKNOWN"):
		do = "the registry has no such repository or digest; check the reference (`operator push` prints the digest it pushed)"
	case e.Status == http.StatusTooManyRequests:
		do = "the registry is rate-limiting; the operator retries with backoff"
	case e.Status >= 500:
		do = "the registry failed; the operator retries with backoff"
	default:
		do = "check the reference and the registry"
	}
	status := ""
	if e.Status != 0 {
		status = fmt.Sprintf(" with HTTP %d", e.Status)
	}
	codes := ""
	if len(e.Codes) > 0 {
		codes = " (" + strings.Join(e.Codes, ", ") + ")"
	}
	return fmt.Sprintf("%s: the registry refused the %s%s%s; %s", e.Ref, e.What, status, codes, do)
}

func hasCode(codes []string, want ...string) bool {
	for _, c := range codes {
		for _, w := range want {
			if c == w {
				return true
			}
		}
	}
	return false
}

// describe turns a go-containerregistry error into an *OCIError, or a
// network error into describe's: neither quotes the registry's text.
func (r *ociRemote) describe(ctx context.Context, err error, what string) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		e := &OCIError{Ref: r.ref.String(), What: what, Status: terr.StatusCode}
		for _, d := range terr.Errors {
			e.Codes = append(e.Codes, string(d.Code))
		}
		return e
	}
	var refused *URLRefusedError
	if errors.As(err, &refused) {
		return refused
	}
	var big *ManifestTooLargeError
	if errors.As(err, &big) || strings.Contains(err.Error(), manifestTooLarge) {
		return &ManifestTooLargeError{Ref: r.ref.String(), Max: MaxManifestBytes}
	}
	if m := realmRefused.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s: the registry sends clients to its token service at %s, a private or link-local address, which the operator never reaches (it may be a cloud metadata service); the registry at %s itself was not at fault: use a registry whose token service has a public address",
			r.ref, m[1], r.ref.Registry())
	}
	if strings.Contains(err.Error(), "does not match requested digest") || strings.Contains(err.Error(), "error verifying") {
		return fmt.Errorf("%s: the registry served a %s whose bytes do not match the digest; refused", r.ref, what)
	}
	host := r.ref.Registry()
	d := describe(ctx, err, host, 0)
	if errors.Is(d, context.DeadlineExceeded) {
		return fmt.Errorf("%s: fetching the %s timed out (%w); check that %s answers, or raise --module-fetch-timeout", r.ref, what, context.DeadlineExceeded, host)
	}
	return fmt.Errorf("%s: fetching the %s: %w", r.ref, what, d)
}

// Credentials give registry credentials: PullSecret or DockerConfigFile.
type Credentials interface {
	keychain(ctx context.Context) (authn.Keychain, error)
	// String describes where they come from, for messages.
	String() string
}

// PullSecret reads registry credentials from a Secret of type
// kubernetes.io/dockerconfigjson, as a Pod's imagePullSecrets do, at each
// fetch: a rotated Secret is used at the next fetch. The Secret's
// namespace must be in opts.Namespaces. Credential helpers and stores named
// in it are ignored: a Secret never makes the operator run a program.
func PullSecret(r client.Reader, namespace, name string, opts Options) Credentials {
	return pullSecret{r: r, namespace: namespace, name: name, opts: opts}
}

type pullSecret struct {
	r               client.Reader
	namespace, name string
	opts            Options
}

func (p pullSecret) String() string { return fmt.Sprintf("pull Secret %s/%s", p.namespace, p.name) }

func (p pullSecret) keychain(ctx context.Context) (authn.Keychain, error) {
	if !namespaceAllowed(p.opts.Namespaces, p.namespace) {
		return nil, &NamespaceRefusedError{Kind: "Secret", Namespace: p.namespace, Allowed: p.opts.Namespaces}
	}
	var s corev1.Secret
	if err := p.r.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.name}, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if s.Type != corev1.SecretTypeDockerConfigJson {
		return nil, fmt.Errorf("%s is of type %q, not %s; create it with `kubectl create secret docker-registry %s --docker-server=REGISTRY --docker-username=USER --docker-password=PASSWORD`",
			p, s.Type, corev1.SecretTypeDockerConfigJson, p.name)
	}
	return dockerConfigKeychain(p.String(), s.Data[corev1.DockerConfigJsonKey])
}

// DockerConfigFile reads registry credentials from a Docker config file
// (~/.docker/config.json's format: {"auths": {REGISTRY: {"auth": …}}}) at
// each fetch. Credential helpers and stores named in it are ignored.
func DockerConfigFile(path string) Credentials { return dockerConfigFile(path) }

type dockerConfigFile string

func (f dockerConfigFile) String() string { return "registry config " + string(f) }

func (f dockerConfigFile) keychain(context.Context) (authn.Keychain, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, fmt.Errorf("%w; check --module-registry-config", err)
	}
	return dockerConfigKeychain(f.String(), b)
}

// dockerConfigKeychain parses a Docker config's auths with the Docker CLI's
// own parser.
func dockerConfigKeychain(what string, b []byte) (authn.Keychain, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s has no %s", what, corev1.DockerConfigJsonKey)
	}
	cf, err := config.LoadFromReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s is not a Docker config (%s): write it as {\"auths\": {\"REGISTRY\": {\"auth\": \"BASE64(USER:PASSWORD)\"}}}", what, corev1.DockerConfigJsonKey)
	}
	// Never run a credential helper a config names.
	cf.CredentialsStore, cf.CredentialHelpers = "", nil
	return configKeychain{cf: cf}, nil
}

type configKeychain struct{ cf *configfile.ConfigFile }

// Resolve looks the registry up as go-containerregistry's default
// keychain does (the repository, then the registry; Docker Hub under its
// legacy key), without its search of the filesystem.
func (k configKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	var empty clitypes.AuthConfig
	for _, key := range []string{target.String(), target.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		cfg, err := k.cf.GetAuthConfig(key)
		if err != nil {
			return nil, err
		}
		cfg.ServerAddress = ""
		if cfg != empty {
			return authn.FromConfig(authn.AuthConfig{
				Username: cfg.Username, Password: cfg.Password, Auth: cfg.Auth,
				IdentityToken: cfg.IdentityToken, RegistryToken: cfg.RegistryToken,
			}), nil
		}
	}
	return authn.Anonymous, nil
}

// Resolve returns ref with its digest: its own when it has one (nothing is
// fetched), else the digest its tag names now in the registry.
func Resolve(ctx context.Context, ref string, creds Credentials, timeout time.Duration, opts Options) (OCIRef, error) {
	r, err := ParseOCIRef(ref)
	if err != nil || r.Digest != "" {
		return r, err
	}
	if timeout <= 0 {
		timeout = DefaultURLTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rem, err := newOCIRemote(ctx, r, creds, opts)
	if err != nil {
		return r, err
	}
	tag := r.Tag
	if tag == "" {
		tag = "latest"
	}
	desc, err := remote.Head(r.repo.Tag(tag), rem.opts...)
	if err != nil {
		return r, rem.describe(ctx, err, "tag "+tag)
	}
	r.Digest = desc.Digest.String()
	return r, nil
}

// Push uploads module to ref in the wasm artifact layout and returns ref
// with the manifest's digest. ref's tag, when it has one, is set to the
// manifest; a digest in ref must be the one pushed. title, when not "",
// is recorded as the layer's org.opencontainers.image.title. The same
// module and title always give the same digest.
func Push(ctx context.Context, ref string, module []byte, title string, creds Credentials, timeout time.Duration, opts Options) (OCIRef, error) {
	r, err := ParseOCIRef(ref)
	if err != nil {
		return r, err
	}
	if !bytes.HasPrefix(module, []byte("\x00asm")) {
		return r, errors.New("not a wasm module (no \\0asm header); push the .wasm file the build wrote")
	}
	if max := opts.maxBytes(); int64(len(module)) > max {
		return r, fmt.Errorf("module is larger than %d bytes (--max-module-bytes)", max)
	}
	if timeout <= 0 {
		timeout = DefaultURLTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rem, err := newOCIRemote(ctx, r, creds, opts)
	if err != nil {
		return r, err
	}
	layer := static.NewLayer(module, WasmLayerMediaType)
	layerDigest, _ := layer.Digest()
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "wasm",
		"os":           "wasip1",
		"layerDigests": []string{layerDigest.String()},
	})
	config := static.NewLayer(cfg, WasmConfigMediaType)
	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(r.repo, l, rem.opts...); err != nil {
			return r, rem.describe(ctx, err, "push")
		}
	}
	configDigest, _ := config.Digest()
	desc := v1.Descriptor{MediaType: WasmLayerMediaType, Size: int64(len(module)), Digest: layerDigest}
	if title != "" {
		desc.Annotations = map[string]string{"org.opencontainers.image.title": title}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: WasmConfigMediaType, Size: int64(len(cfg)), Digest: configDigest},
		Layers:        []v1.Descriptor{desc},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return r, err
	}
	sum := sha256.Sum256(raw)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if r.Digest != "" && r.Digest != digest {
		return r, fmt.Errorf("%s: the module's manifest digest is %s, not the one in the reference; leave the digest out of a push", r, digest)
	}
	var target name.Reference = r.repo.Digest(digest)
	if r.Tag != "" {
		target = r.repo.Tag(r.Tag)
	}
	if err := remote.Put(target, rawManifest(raw), rem.opts...); err != nil {
		return r, rem.describe(ctx, err, "push")
	}
	r.Digest = digest
	return r, nil
}

// rawManifest is a manifest to put as it is.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// MaxManifestBytes caps an OCI manifest: the distribution spec's limit a
// registry may refuse above (4 MiB). A module's manifest is a few hundred
// bytes.
const MaxManifestBytes = 4 << 20

// ManifestTooLargeError reports a manifest over MaxManifestBytes, refused
// before it is read.
type ManifestTooLargeError struct {
	Ref string
	Max int64
}

func (e *ManifestTooLargeError) Error() string {
	return fmt.Sprintf("%s: the registry's manifest is over %d bytes, the OCI distribution spec's limit; refused unread (a module's manifest is a few hundred bytes): check the reference", e.Ref, e.Max)
}

const manifestTooLarge = "manifest over the size limit"

// realmRefused matches go-containerregistry's refusal to ask a token
// service on a private address, and captures that address.
var realmRefused = regexp.MustCompile(`invalid realm in www-authenticate: realm host "([^"]+)"`)

// limitManifests refuses a manifest response larger than max: one whose
// Content-Length says so, before its body is read, and one that sends more
// than it said, at max bytes.
type limitManifests struct {
	next http.RoundTripper
	max  int64
}

func (l limitManifests) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/manifests/") {
		return resp, err
	}
	if resp.ContentLength > l.max {
		_ = resp.Body.Close()
		return nil, &ManifestTooLargeError{Ref: req.URL.Host + req.URL.Path, Max: l.max}
	}
	resp.Body = &cappedBody{rc: resp.Body, left: l.max}
	return resp, nil
}

// cappedBody fails a read past its limit.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errors.New(manifestTooLarge)
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, errors.New(manifestTooLarge)
	}
	return n, err
}

func (c *cappedBody) Close() error { return c.rc.Close() }
