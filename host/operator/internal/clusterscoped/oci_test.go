package clusterscoped_test

import (
	"context"
	"fmt"
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
