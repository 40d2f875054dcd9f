package clusterscoped_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/host/source"
	"github.com/wasmreconcile/wasmreconcile/internal/testregistry"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestReconcileModuleFromOCI runs ReconcileModules whose source is a real
// registry (the CNCF distribution registry on loopback, requiring a
// password) against the real API server: the schema refuses a reference
// without a digest; without a pull Secret the registry's refusal is
// FetchFailed saying to set one; with a kubernetes.io/dockerconfigjson
// Secret the module serves and reconciles; a digest the registry does not
// have is refused while the version serving keeps serving; a new digest
// rolls out; a sha256 given beside the digest must match; and with the
// registry gone, the blob cache still loads a version fetched before.
func TestReconcileModuleFromOCI(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg, err := testregistry.Start(testregistry.Options{Username: "puller", Password: "pull-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgFile, reg.DockerConfigJSON("puller", "pull-pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := source.DockerConfigFile(cfgFile)
	loopback := source.Options{URL: source.URLPolicy{AllowPrivate: true}}
	v1, v2 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")
	ref1, err := source.Push(ctx, "oci://"+reg.Host+"/modules/widget:v1", v1, "widget.wasm", creds, time.Minute, loopback)
	if err != nil {
		t.Fatal(err)
	}
	ref2, err := source.Push(ctx, "oci://"+reg.Host+"/modules/widget:v2", v2, "widget.wasm", creds, time.Minute, loopback)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.C.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "regcred"},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON("puller", "pull-pw")}}); err != nil {
		t.Fatal(err)
	}
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		Sources:          operator.SourceOptions{Namespaces: []string{e.NS}, URLAllowPrivate: true, CacheDir: t.TempDir()},
	})

	// Admission: a tag without a digest, and a non-oci source without a
	// sha256, are refused by the schema.
	for _, bad := range []struct {
		src  v1alpha1.Source
		want string
	}{
		{v1alpha1.Source{OCI: &v1alpha1.OCISource{Ref: "oci://" + reg.Host + "/modules/widget:v1"}}, "spec.source.oci.ref"},
		{v1alpha1.Source{File: "/m/widget.wasm"}, "only an oci source"},
		{v1alpha1.Source{OCI: &v1alpha1.OCISource{Ref: ref1.String()}, File: "/m/widget.wasm"}, "set exactly one of"},
	} {
		err := e.C.Create(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}, Spec: v1alpha1.ReconcileModuleSpec{Source: bad.src}})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("creating a ReconcileModule with source %+v: %v, want an admission error containing %q", bad.src, err, bad.want)
		}
	}

	// No credentials: the registry's 401, with what to do.
	optest.CreateModule(t, e.C, "widget", v1alpha1.Source{OCI: &v1alpha1.OCISource{Ref: ref1.String()}})
	rm := optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLoadFailed, metav1.ConditionTrue, modulecontroller.ReasonFetchFailed)
	if msg := rm.Status.LastError; !strings.Contains(msg, "HTTP 401") || !strings.Contains(msg, "spec.source.oci.pullSecret") {
		t.Errorf("status.lastError = %q, want the registry's 401 and the pull Secret to set", msg)
	}

	// With the pull Secret, v1 serves.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source.OCI.PullSecret = &v1alpha1.SecretRef{Namespace: e.NS, Name: "regcred"}
	})
	rm = optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	if rm.Status.Digest != supervisor.Digest(v1) {
		t.Errorf("status.digest = %s, want the module's %s", rm.Status.Digest, supervisor.Digest(v1))
	}
	if err := e.C.Create(ctx, optest.Widget(e.NS, "from-oci", 2)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "from-oci", "2 x grey")
	optest.WaitVersion(t, e.C, e.NS, []string{"from-oci"}, "1", time.Now())

	// A digest the registry does not have: refused, v1 keeps serving.
	missing := "oci://" + reg.Host + "/modules/widget@sha256:" + strings.Repeat("e", 64)
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.OCI.Ref = missing })
	rm = optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLoadFailed, metav1.ConditionTrue, modulecontroller.ReasonFetchFailed)
	if msg := rm.Status.LastError; !strings.Contains(msg, "no such repository or digest") {
		t.Errorf("status.lastError = %q, want the digest refused", msg)
	}
	if rm.Status.Digest != supervisor.Digest(v1) {
		t.Errorf("after a refused digest status.digest = %s, want v1's %s still serving", rm.Status.Digest, supervisor.Digest(v1))
	}

	// A sha256 beside the digest must match what the digest names.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source.OCI.Ref, spec.Source.SHA256 = ref2.String(), supervisor.Digest(v1)
	})
	optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLoadFailed, metav1.ConditionTrue, modulecontroller.ReasonDigestMismatch)

	// v2's digest rolls out.
	since := time.Now()
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.SHA256 = supervisor.Digest(v2) })
	optest.ModuleCondition(t, e.C, "widget", modulecontroller.ConditionLoadFailed, metav1.ConditionFalse, modulecontroller.ReasonLoaded)
	optest.WaitVersion(t, e.C, e.NS, []string{"from-oci"}, "2", since)

	// With the registry gone, v1 (fetched before) loads from the cache; a
	// digest never fetched fails naming the registry.
	reg.Close()
	since = time.Now()
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.OCI.Ref, spec.Source.SHA256 = ref1.String(), "" })
	// LoadFailed was False already: wait for the condition of this
	// generation.
	testenv.Eventually(t, 2*time.Minute, "LoadFailed=False of the spec naming v1 again", func() error {
		rm := &v1alpha1.ReconcileModule{}
		if err := e.C.Get(ctx, client.ObjectKey{Name: "widget"}, rm); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rm.Status.Conditions, modulecontroller.ConditionLoadFailed)
		if c == nil || c.ObservedGeneration != rm.Generation || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("generation %d, conditions %v, lastError %q", rm.Generation, rm.Status.Conditions, rm.Status.LastError)
		}
		return nil
	})
	optest.WaitVersion(t, e.C, e.NS, []string{"from-oci"}, "1", since)
}

// TestModuleCacheKeepsWhatReconcileModulesName bounds --module-cache-dir
// (Sources.CacheMaxBytes) under a stream of module versions against the
// real API server and a real registry: a directory left over over the
// bound is brought under it at start; the serving module's manifest and
// layer, though least recently used, stay because a ReconcileModule names
// them; the versions no ReconcileModule names any more go, oldest first,
// and the directory ends under its bound.
func TestModuleCacheKeepsWhatReconcileModulesName(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	reg, err := testregistry.Start(testregistry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	loopback := source.Options{URL: source.URLPolicy{AllowPrivate: true}}
	serving, err := source.Push(ctx, "oci://"+reg.Host+"/keep/widget:v1", testwasm.Build(t, "./widget"), "widget.wasm", nil, time.Minute, loopback)
	if err != nil {
		t.Fatal(err)
	}
	// Versions of another module: 1 MiB each and incompressible, so each
	// layer is that size. They fetch (and are cached) and then fail to
	// compile, which changes nothing for the cache.
	var churn []string
	for i := range 4 {
		junk := make([]byte, 1<<20)
		if _, err := rand.Read(junk); err != nil {
			t.Fatal(err)
		}
		ref, err := source.Push(ctx, fmt.Sprintf("oci://%s/churn/junk:v%d", reg.Host, i), append([]byte("\x00asm\x01\x00\x00\x00"), junk...), "junk.wasm", nil, time.Minute, loopback)
		if err != nil {
			t.Fatal(err)
		}
		churn = append(churn, ref.String())
	}
	dir := t.TempDir()
	// Learn the serving module's layer size from a cache of our own.
	probe, err := source.NewBlobCache(t.TempDir(), source.BlobCacheOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probeOpts := loopback
	probeOpts.BlobCache = probe
	if _, err := source.OCI(serving.String(), nil, 0, probeOpts).Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	servingBytes := dirSize(t, probe.Dir())
	// Room for the serving module and two and a half junk versions.
	bound := servingBytes + 5<<19
	// A directory left over from a run with a larger bound: checked at
	// start, before anything is fetched.
	var leftover []string
	for i := range 6 {
		p := filepath.Join(dir, "sha256", fmt.Sprintf("%064x", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-2 * time.Hour)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
		leftover = append(leftover, p)
	}
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		Sources:          operator.SourceOptions{Namespaces: []string{e.NS}, URLAllowPrivate: true, CacheDir: dir, CacheMaxBytes: bound},
	})
	testenv.Eventually(t, time.Minute, "the leftover directory brought under its bound at start", func() error {
		if n := dirSize(t, dir); n > bound {
			return fmt.Errorf("%d bytes, bound %d", n, bound)
		}
		return nil
	})
	for _, p := range leftover { // what stays of it would only blur what follows
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	optest.CreateModule(t, e.C, "widget", v1alpha1.Source{OCI: &v1alpha1.OCISource{Ref: serving.String()}})
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")

	// Every file used an hour ago (past the two minutes' grace), each
	// version before the next, the serving module's first of all.
	age := func() {
		t.Helper()
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			when := info.ModTime().Add(-time.Hour)
			return os.Chtimes(p, when, when)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	age()
	for i, ref := range churn {
		if i == 0 {
			optest.CreateModule(t, e.C, "churn", v1alpha1.Source{OCI: &v1alpha1.OCISource{Ref: ref}})
		} else {
			optest.SetModuleSpec(t, e.C, "churn", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.OCI.Ref = ref })
		}
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("churn v%d fetched and refused", i), func() error {
			rm := &v1alpha1.ReconcileModule{}
			if err := e.C.Get(ctx, client.ObjectKey{Name: "churn"}, rm); err != nil {
				return err
			}
			c := meta.FindStatusCondition(rm.Status.Conditions, modulecontroller.ConditionLoadFailed)
			if c == nil || c.ObservedGeneration != rm.Generation || c.Status != metav1.ConditionTrue || c.Reason == modulecontroller.ReasonFetchFailed {
				return fmt.Errorf("generation %d, conditions %v, lastError %q", rm.Generation, rm.Status.Conditions, rm.Status.LastError)
			}
			return nil
		})
		age()
	}
	cached := func(ref string) bool {
		r, err := source.ParseOCIRef(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(filepath.Join(dir, "sha256", strings.TrimPrefix(r.Digest, "sha256:")))
		return err == nil
	}
	// The last write's check runs in the background: wait for its result.
	testenv.Eventually(t, time.Minute, "the module cache under its bound, the old churn versions gone", func() error {
		if n := dirSize(t, dir); n > bound {
			return fmt.Errorf("%d bytes, bound %d", n, bound)
		}
		if cached(churn[0]) || cached(churn[1]) {
			return fmt.Errorf("churn v0 cached %v, v1 %v: want both gone", cached(churn[0]), cached(churn[1]))
		}
		return nil
	})
	if !cached(serving.String()) || !cached(churn[3]) {
		t.Errorf("serving module cached %v, churn v3 (named now) %v: want both kept", cached(serving.String()), cached(churn[3]))
	}
	// The serving module's layer stayed too: with the registry gone it
	// still fetches from the cache alone.
	reg.Close()
	keepOpts := loopback
	if keepOpts.BlobCache, err = source.NewBlobCache(dir, source.BlobCacheOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := source.OCI(serving.String(), nil, 0, keepOpts).Fetch(ctx); err != nil {
		t.Errorf("the serving module from the bounded cache, registry gone: %v", err)
	}
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
