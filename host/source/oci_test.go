package source

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/internal/testregistry"
)

// The OCI tests run against real registries (testregistry): one anonymous,
// one that requires a password.
var (
	anonReg, authReg *testregistry.Registry
)

const regUser, regPassword = "ci", "s3cret-pw"

func TestMain(m *testing.M) {
	var err error
	if anonReg, err = testregistry.Start(testregistry.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "start registry:", err)
		os.Exit(1)
	}
	if authReg, err = testregistry.Start(testregistry.Options{Username: regUser, Password: regPassword}); err != nil {
		anonReg.Close()
		fmt.Fprintln(os.Stderr, "start registry:", err)
		os.Exit(1)
	}
	code := m.Run()
	anonReg.Close()
	authReg.Close()
	os.Exit(code)
}

// loopback is the policy that lets a test reach its loopback registry.
var loopback = Options{URL: URLPolicy{AllowPrivate: true}}

// fakeWasm is a module's bytes for the registry: a wasm header and a
// payload that tells modules apart.
func fakeWasm(payload string) []byte { return append([]byte("\x00asm\x01\x00\x00\x00"), payload...) }

func writeConfig(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOCIPushResolveFetch(t *testing.T) {
	ctx := context.Background()
	mod := fakeWasm("push-resolve-fetch")
	ref := "oci://" + anonReg.Host + "/team/widget:v1"
	pushed, err := Push(ctx, ref, mod, "widget.wasm", nil, 0, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pushed.Digest, "sha256:") || pushed.Tag != "v1" {
		t.Fatalf("pushed %+v", pushed)
	}
	// The same module pushes to the same digest.
	again, err := Push(ctx, "oci://"+anonReg.Host+"/team/widget:v1-again", mod, "widget.wasm", nil, 0, loopback)
	if err != nil || again.Digest != pushed.Digest {
		t.Fatalf("second push: %v, digest %s want %s", err, again.Digest, pushed.Digest)
	}
	resolved, err := Resolve(ctx, ref, nil, 0, loopback)
	if err != nil || resolved.Digest != pushed.Digest {
		t.Fatalf("resolve: %v, %s want %s", err, resolved.Digest, pushed.Digest)
	}
	got, err := OCI(pushed.String(), nil, 0, loopback).Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(mod) {
		t.Fatalf("fetched %q, want %q", got, mod)
	}

	// The manifest has the wasm artifact layout.
	wr, _ := name.ParseReference(anonReg.Host + "/team/widget@" + pushed.Digest)
	desc, err := remote.Get(wr)
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != WasmConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != WasmLayerMediaType ||
		m.Layers[0].Annotations["org.opencontainers.image.title"] != "widget.wasm" {
		t.Fatalf("manifest %s", desc.Manifest)
	}

	// A tag moved to other bytes changes nothing for a digest reference.
	if _, err := Push(ctx, ref, fakeWasm("other"), "", nil, 0, loopback); err != nil {
		t.Fatal(err)
	}
	got, err = OCI(pushed.String(), nil, 0, loopback).Fetch(ctx)
	if err != nil || string(got) != string(mod) {
		t.Fatalf("after the tag moved: %v, %q", err, got)
	}
}

func TestOCIRefusals(t *testing.T) {
	ctx := context.Background()
	pushed, err := Push(ctx, "oci://"+anonReg.Host+"/refusals/mod:v1", fakeWasm("refusals"), "", nil, 0, loopback)
	if err != nil {
		t.Fatal(err)
	}
	repo := "oci://" + anonReg.Host + "/refusals/mod"

	t.Run("tag only", func(t *testing.T) {
		_, err := OCI(repo+":v1", nil, 0, loopback).Fetch(ctx)
		var md *MissingDigestError
		if !errors.As(err, &md) || !strings.Contains(err.Error(), "operator pull") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wrong digest", func(t *testing.T) {
		wrong := "sha256:" + strings.Repeat("ab", 32)
		_, err := OCI(repo+"@"+wrong, nil, 0, loopback).Fetch(ctx)
		var oe *OCIError
		if !errors.As(err, &oe) || oe.Status != http.StatusNotFound || !strings.Contains(err.Error(), "no such repository or digest") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("digest of another repository", func(t *testing.T) {
		_, err := OCI("oci://"+anonReg.Host+"/elsewhere/mod@"+pushed.Digest, nil, 0, loopback).Fetch(ctx)
		var oe *OCIError
		if !errors.As(err, &oe) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not a wasm artifact", func(t *testing.T) {
		// An ordinary image manifest with a tar layer.
		layer := static.NewLayer([]byte("not wasm"), types.OCILayer)
		cfg := static.NewLayer([]byte(`{}`), types.OCIConfigJSON)
		r, _ := name.ParseReference(anonReg.Host + "/refusals/image:v1")
		for _, l := range []v1.Layer{cfg, layer} {
			if err := remote.WriteLayer(r.Context(), l); err != nil {
				t.Fatal(err)
			}
		}
		ld, _ := layer.Digest()
		cd, _ := cfg.Digest()
		raw, _ := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
			Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: 2, Digest: cd},
			Layers: []v1.Descriptor{{MediaType: types.OCILayer, Size: 8, Digest: ld}}})
		if err := remote.Put(r, rawManifest(raw)); err != nil {
			t.Fatal(err)
		}
		res, err := Resolve(ctx, "oci://"+r.String(), nil, 0, loopback)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OCI(res.String(), nil, 0, loopback).Fetch(ctx)
		if err == nil || !strings.Contains(err.Error(), "is not a wasm module") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("larger than the cap", func(t *testing.T) {
		o := loopback
		o.MaxBytes = 10
		_, err := OCI(pushed.String(), nil, 0, o).Fetch(ctx)
		if err == nil || !strings.Contains(err.Error(), "larger than 10 bytes") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("loopback without AllowPrivate", func(t *testing.T) {
		_, err := OCI(pushed.String(), nil, 0, Options{}).Fetch(ctx)
		var re *URLRefusedError
		if !errors.As(err, &re) || re.Reason != RefusedAddress {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("host not allowed", func(t *testing.T) {
		o := Options{URL: URLPolicy{AllowPrivate: true, AllowedHosts: []string{"registry.example.com"}}}
		_, err := OCI(pushed.String(), nil, 0, o).Fetch(ctx)
		var re *URLRefusedError
		if !errors.As(err, &re) || re.Reason != RefusedHost {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("push of something else than wasm", func(t *testing.T) {
		_, err := Push(ctx, repo+":bad", []byte("#!/bin/sh"), "", nil, 0, loopback)
		if err == nil || !strings.Contains(err.Error(), "not a wasm module") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestParseOCIRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("0a", 32)
	for _, c := range []struct {
		in                string
		repo, tag, digest string
		wantErr           string
	}{
		{in: "oci://ghcr.io/acme/widget:v1@" + d, repo: "ghcr.io/acme/widget", tag: "v1", digest: d},
		{in: "localhost:5000/widget@" + d, repo: "localhost:5000/widget", digest: d},
		{in: "oci://127.0.0.1:5000/a/b/c", repo: "127.0.0.1:5000/a/b/c"},
		{in: "oci://widget:v1@" + d, wantErr: "names no registry"},
		{in: "oci://acme/widget@" + d, wantErr: "names no registry"},
		{in: "oci://ghcr.io/acme/widget@sha256:ABC", wantErr: "64 lower-case hex"},
		{in: "oci://ghcr.io/acme/widget@sha512:" + strings.Repeat("0", 128), wantErr: "64 lower-case hex"},
		{in: "oci://ghcr.io/acme/widget@sha256:" + strings.Repeat("0A", 32), wantErr: "64 lower-case hex"},
		{in: "oci://ghcr.io/Acme/widget", wantErr: "repository is not valid"},
		{in: "oci://ghcr.io/acme/widget:-bad", wantErr: "tag"},
		{in: "oci://ghcr.io/", wantErr: "repository is not valid"},
	} {
		r, err := ParseOCIRef(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || r.Repository != c.repo || r.Tag != c.tag || r.Digest != c.digest {
			t.Errorf("%s: %+v %v", c.in, r, err)
		}
	}
}

func TestOCIAuthenticated(t *testing.T) {
	ctx := context.Background()
	ref := "oci://" + authReg.Host + "/private/widget:v1"
	mod := fakeWasm("authenticated")

	_, err := Push(ctx, ref, mod, "", nil, 0, loopback)
	var oe *OCIError
	if !errors.As(err, &oe) || oe.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), "wants credentials") {
		t.Fatalf("anonymous push: %v", err)
	}
	good := DockerConfigFile(writeConfig(t, authReg.DockerConfigJSON(regUser, regPassword)))
	pushed, err := Push(ctx, ref, mod, "", good, 0, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OCI(pushed.String(), nil, 0, loopback).Fetch(ctx); !errors.As(err, &oe) || oe.Status != http.StatusUnauthorized {
		t.Fatalf("anonymous fetch: %v", err)
	}
	bad := DockerConfigFile(writeConfig(t, authReg.DockerConfigJSON(regUser, "wrong")))
	if _, err := OCI(pushed.String(), bad, 0, loopback).Fetch(ctx); !errors.As(err, &oe) || oe.Status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %v", err)
	}
	if got, err := OCI(pushed.String(), good, 0, loopback).Fetch(ctx); err != nil || string(got) != string(mod) {
		t.Fatalf("config file: %v", err)
	}

	// A pull Secret, as an imagePullSecret.
	secret := func(ns, n string, typ corev1.SecretType, data []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}, Type: typ,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: data}}
	}
	// A config naming a credential helper: it must never run.
	withHelper, _ := json.Marshal(map[string]any{
		"auths":       json.RawMessage(strings.TrimSuffix(strings.TrimPrefix(string(authReg.DockerConfigJSON(regUser, regPassword)), `{"auths":`), "}")),
		"credsStore":  "wasmreconcile-test-must-not-run",
		"credHelpers": map[string]string{authReg.Host: "wasmreconcile-test-must-not-run"},
	})
	c := fake.NewClientBuilder().WithObjects(
		secret("ops", "pull", corev1.SecretTypeDockerConfigJson, authReg.DockerConfigJSON(regUser, regPassword)),
		secret("ops", "helper", corev1.SecretTypeDockerConfigJson, withHelper),
		secret("ops", "opaque", corev1.SecretTypeOpaque, authReg.DockerConfigJSON(regUser, regPassword)),
		secret("ops", "garbage", corev1.SecretTypeDockerConfigJson, []byte("{not json")),
		secret("other", "pull", corev1.SecretTypeDockerConfigJson, authReg.DockerConfigJSON(regUser, regPassword)),
	).Build()
	opts := loopback
	opts.Namespaces = []string{"ops"}
	for _, n := range []string{"pull", "helper"} {
		if got, err := OCI(pushed.String(), PullSecret(c, "ops", n, opts), 0, opts).Fetch(ctx); err != nil || string(got) != string(mod) {
			t.Fatalf("pull Secret %s: %v", n, err)
		}
	}
	if _, err := OCI(pushed.String(), PullSecret(c, "ops", "opaque", opts), 0, opts).Fetch(ctx); err == nil || !strings.Contains(err.Error(), "kubectl create secret docker-registry") {
		t.Fatalf("opaque Secret: %v", err)
	}
	if _, err := OCI(pushed.String(), PullSecret(c, "ops", "garbage", opts), 0, opts).Fetch(ctx); err == nil || !strings.Contains(err.Error(), "is not a Docker config") {
		t.Fatalf("garbage Secret: %v", err)
	}
	var nr *NamespaceRefusedError
	if _, err := OCI(pushed.String(), PullSecret(c, "other", "pull", opts), 0, opts).Fetch(ctx); !errors.As(err, &nr) {
		t.Fatalf("Secret in another namespace: %v", err)
	}
}

func TestOCIBlobCache(t *testing.T) {
	ctx := context.Background()
	reg, err := testregistry.Start(testregistry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	mod := fakeWasm("cached")
	pushed, err := Push(ctx, "oci://"+reg.Host+"/cache/widget:v1", mod, "", nil, 0, loopback)
	if err != nil {
		t.Fatal(err)
	}
	opts := loopback
	if opts.BlobCache, err = NewBlobCache(t.TempDir(), BlobCacheOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := OCI(pushed.String(), nil, 0, opts).Fetch(ctx); err != nil || string(got) != string(mod) {
		t.Fatalf("first fetch: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(opts.BlobCache.Dir(), "sha256", "*"))
	if len(files) != 2 {
		t.Fatalf("cache holds %v, want the manifest and the module", files)
	}
	// A corrupted file is dropped and fetched again.
	layerFile := ""
	for _, f := range files {
		if b, _ := os.ReadFile(f); string(b) == string(mod) {
			layerFile = f
		}
	}
	if err := os.WriteFile(layerFile, []byte("\x00asm tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := OCI(pushed.String(), nil, 0, opts).Fetch(ctx); err != nil || string(got) != string(mod) {
		t.Fatalf("fetch over a corrupted cache: %v %q", err, got)
	}
	// With the registry gone, the cache serves.
	reg.Close()
	if got, err := OCI(pushed.String(), nil, 0, opts).Fetch(ctx); err != nil || string(got) != string(mod) {
		t.Fatalf("fetch with the registry gone: %v", err)
	}
	// Without the cache, it fails, naming the registry.
	_, err = OCI(pushed.String(), nil, 0, loopback).Fetch(ctx)
	if err == nil || !strings.Contains(err.Error(), reg.Host) {
		t.Fatalf("uncached fetch with the registry gone: %v", err)
	}
}

// TestBoundedBlobCache: past its bound the cache removes the least
// recently used modules, never those in use, and a module it removed is
// fetched again; when what is in use cannot be known it removes nothing.
func TestBoundedBlobCache(t *testing.T) {
	ctx := context.Background()
	reg, err := testregistry.Start(testregistry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	// Five versions of 100 KiB each (incompressible, so each layer is its
	// size), under a bound of 350 KiB: the cache holds three.
	var refs []string
	for i := range 5 {
		mod := append(fakeWasm(fmt.Sprintf("v%d", i)), randomBytes(t, 100<<10)...)
		pushed, err := Push(ctx, fmt.Sprintf("oci://%s/bound/widget:v%d", reg.Host, i), mod, "", nil, 0, loopback)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, pushed.String())
	}
	var mu sync.Mutex
	inUse := []string{refs[0]}
	var inUseErr error
	var prunes []BlobCachePrune
	dir := t.TempDir()
	cache, err := NewBlobCache(dir, BlobCacheOptions{MaxBytes: 350 << 10,
		InUse:  func() ([]string, error) { mu.Lock(); defer mu.Unlock(); return inUse, inUseErr },
		Pruned: func(p BlobCachePrune) { mu.Lock(); defer mu.Unlock(); prunes = append(prunes, p) }})
	if err != nil {
		t.Fatal(err)
	}
	opts := loopback
	opts.BlobCache = cache
	// Fetch each in turn; age the files so that each fetched earlier is
	// used earlier and out of the two minutes' grace.
	age := func(hours int) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "sha256", "*"))
		for _, f := range files {
			info, _ := os.Stat(f)
			when := info.ModTime().Add(-time.Duration(hours) * time.Hour)
			if err := os.Chtimes(f, when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range refs {
		if _, err := OCI(r, nil, 0, opts).Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cache.Prune(); err != nil {
			t.Fatal(err)
		}
		age(1)
	}
	cached := func(ref string) bool {
		p, _ := ParseOCIRef(ref)
		_, err := os.Stat(cache.path(p.Digest))
		return err == nil
	}
	// The first is in use and stays, though used least recently; the
	// second and third went; the last two fit beside it.
	for i, want := range []bool{true, false, false, true, true} {
		if got := cached(refs[i]); got != want {
			t.Errorf("v%d's manifest cached: %v, want %v", i, got, want)
		}
	}
	if total := dirSize(t, dir); total > 350<<10 {
		t.Errorf("the cache holds %d bytes, over its bound of %d", total, 350<<10)
	}
	// A read is a use: v3, read after v4, outlives it when v1 comes back.
	if _, err := OCI(refs[3], nil, 0, opts).Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	age(1)
	if _, err := OCI(refs[1], nil, 0, opts).Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cache.Prune(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false, true, false} {
		if got := cached(refs[i]); got != want {
			t.Errorf("after reading v3 and fetching v1 again, v%d's manifest cached: %v, want %v", i, got, want)
		}
	}
	mu.Lock()
	removed := 0
	for _, p := range prunes {
		removed += p.Removed
	}
	mu.Unlock()
	if removed != 6 { // three manifests, three modules
		t.Errorf("prunes removed %d files, want 6", removed)
	}
	// With the registry gone, the module in use still loads.
	reg.Close()
	if _, err := OCI(refs[0], nil, 0, opts).Fetch(ctx); err != nil {
		t.Errorf("the module in use, registry gone: %v", err)
	}
	if _, err := OCI(refs[4], nil, 0, opts).Fetch(ctx); err == nil {
		t.Error("a removed module was served with the registry gone")
	}
	// When what is in use is unknown, nothing is removed, whatever the size.
	mu.Lock()
	inUse, inUseErr = nil, errors.New("the ReconcileModules are not listed yet")
	mu.Unlock()
	age(1)
	before := dirSize(t, dir)
	cache2, err := NewBlobCache(dir, BlobCacheOptions{MaxBytes: 1,
		InUse: func() ([]string, error) { return nil, errors.New("the ReconcileModules are not listed yet") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache2.Prune(); err == nil || !strings.Contains(err.Error(), "not listed yet") {
		t.Errorf("prune with InUse failing: %v, want its error", err)
	}
	if after := dirSize(t, dir); after != before {
		t.Errorf("prune with InUse failing went from %d to %d bytes", before, after)
	}
}

func TestNewBlobCacheRefuses(t *testing.T) {
	if _, err := NewBlobCache("", BlobCacheOptions{}); err == nil {
		t.Error("no directory: accepted")
	}
	if _, err := NewBlobCache(t.TempDir(), BlobCacheOptions{MaxBytes: -1}); err == nil || !strings.Contains(err.Error(), "0 for none") {
		t.Errorf("a negative bound: %v", err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// dirSize is what the files under dir add up to.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	n, err := dirquota.Size(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
