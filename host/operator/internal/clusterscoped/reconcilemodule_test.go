package clusterscoped_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReconcileModuleLifecycle drives a module through ReconcileModule
// objects against the real API server: schema validation at admission, a
// ConfigMap source, a Secret source, a wrong digest (refused, old version
// serving, Warning Event), a file source with a new version, a URL
// rollback, pause and resume, new controller settings, status statistics,
// and deletion.
func TestReconcileModuleLifecycle(t *testing.T) {
	e := optest.NewEnv(t)
	mo := e.OperatorOptions()
	reg := prometheus.NewRegistry()
	op := optest.Start(t, e.Cfg, mo, operator.Options{
		ReconcileModules: true,
		Registerer:       reg,
		Sources:          operator.SourceOptions{Namespaces: []string{e.NS}, URLAllowPrivate: true},
		ModuleController: operator.ModuleControllerOptions{StatusInterval: time.Second},
	})
	ctx := context.Background()
	v1, v2 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")

	// Admission: the schema refuses two sources, a malformed digest and a
	// name that is not a module name.
	for _, bad := range []struct {
		name string
		src  v1alpha1.Source
		want string
	}{
		{"refused", v1alpha1.Source{SHA256: supervisor.Digest(v1)[7:], File: "/m/a.wasm", URL: "http://x/a.wasm"}, "set exactly one of"},
		{"refused", v1alpha1.Source{SHA256: "abc", File: "/m/a.wasm"}, "spec.source.sha256"},
		{"Not_A_Module", v1alpha1.Source{SHA256: supervisor.Digest(v1)[7:], File: "/m/a.wasm"}, "metadata.name must be a DNS label"},
	} {
		err := e.C.Create(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: bad.name}, Spec: v1alpha1.ReconcileModuleSpec{Source: bad.src}})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("creating ReconcileModule %s with source %+v: %v, want an admission error containing %q", bad.name, bad.src, err, bad.want)
		}
	}

	// A ConfigMap source.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "widget-module"},
		BinaryData: map[string][]byte{"module.wasm.gz": gz(t, v1)}}
	if err := e.C.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	optest.CreateModule(t, e.C, "widget", v1alpha1.Source{SHA256: supervisor.Digest(v1), ConfigMap: &v1alpha1.KeyRef{Namespace: e.NS, Name: "widget-module"}})
	rm := optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	if rm.Status.Digest != supervisor.Digest(v1) {
		t.Errorf("status.digest = %s, want %s", rm.Status.Digest, supervisor.Digest(v1))
	}
	if err := e.C.Create(ctx, optest.Widget(e.NS, "managed", 3)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "managed", "3 x grey")
	optest.WaitVersion(t, e.C, e.NS, []string{"managed"}, "1", time.Now())

	// A Secret source: first under a key that does not exist (FetchFailed,
	// saying how to create it), then the right one. (Raw bytes are accepted
	// too, but this 3.2 MB module is over the API server's request limit;
	// gzip'd it is 1 MB.)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "widget-secret"},
		Data: map[string][]byte{"module.wasm": gz(t, v1)}}
	if err := e.C.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v1), Secret: &v1alpha1.KeyRef{Namespace: e.NS, Name: "widget-secret"}}
	})
	rm = optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonFetchFailed)
	if msg := rm.Status.LastError; !strings.Contains(msg, `no key "module.wasm.gz"`) || !strings.Contains(msg, "kubectl create secret") {
		t.Errorf("status.lastError = %q, want the missing key and how to create it", msg)
	}
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.Secret.Key = "module.wasm" })
	optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionFalse, modulecontroller.ReasonLoaded)

	// A wrong digest: refused, v1 keeps serving.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.SHA256 = supervisor.Digest(v2) })
	rm = optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonDigestMismatch)
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "")
	if msg := rm.Status.LastError; !strings.Contains(msg, "update the pinned sha256") {
		t.Errorf("status.lastError = %q, want the digest mismatch with what to do", msg)
	}
	optest.WaitModuleEvent(t, e.C, rm.UID, modulecontroller.ReasonDigestMismatch)

	// A file source with v2: the Widget is reconciled by v2, no restart.
	file := filepath.Join(t.TempDir(), "widget.wasm")
	if err := os.WriteFile(file, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v2), File: file}
	})
	optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionFalse, "")
	optest.WaitVersion(t, e.C, e.NS, []string{"managed"}, "2", time.Now())

	// A URL source: roll back to v1.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(gz(t, v1)) }))
	defer srv.Close()
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v1), URL: srv.URL + "/widget.wasm.gz"}
	})
	optest.WaitVersion(t, e.C, e.NS, []string{"managed"}, "1", time.Now())

	// Paused: changes wait; resuming reconciles them.
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Paused = true })
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionFalse, modulecontroller.ReasonPaused)
	reconciles := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"})
	optest.UpdateWidgetSize(t, e.C, e.NS, "managed", 8)
	// A positive barrier: the operator's cache has the change, so the
	// controller has been handed it; a paused module must not act on it.
	testenv.Eventually(t, time.Minute, "the operator's cache to see size 8", func() error {
		cw := optest.Widget(e.NS, "managed", 0)
		if err := op.Manager().GetCache().Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
			return err
		}
		if size, _, _ := unstructured.NestedInt64(cw.Object, "spec", "size"); size != 8 {
			return fmt.Errorf("size %d", size)
		}
		return nil
	})
	w := optest.Widget(e.NS, "managed", 0)
	if err := e.C.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if s := optest.SummaryOf(w); s != "3 x grey" {
		t.Errorf("paused module reconciled: summary %q", s)
	}
	if got := optest.Gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"}); got != reconciles {
		t.Errorf("paused module called the guest: %v reconciles", got-reconciles)
	}
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Paused = false })
	optest.WaitSummary(t, e.C, e.NS, "managed", "8 x grey")

	// New controller settings (concurrency, rate) replace the controller;
	// the module keeps reconciling.
	restarted := optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "restarted"})
	optest.SetModuleSpec(t, e.C, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Limits = v1alpha1.Limits{MaxConcurrentReconciles: 2, Rate: v1alpha1.Rate{QPS: 5, Burst: 10}}
	})
	testenv.Eventually(t, time.Minute, "new controller settings to replace the controller", func() error {
		if optest.Gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "restarted"}) == restarted {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	optest.UpdateWidgetSize(t, e.C, e.NS, "managed", 9)
	optest.WaitSummary(t, e.C, e.NS, "managed", "9 x grey")

	// Statistics.
	testenv.Eventually(t, time.Minute, "status.stats to count reconciles", func() error {
		rm := optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "")
		if s := rm.Status.Stats; s == nil || s.Reconciles == 0 || s.MeanFuel == 0 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})

	// Deletion stops the module.
	if err := e.C.Delete(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the module to stop", func() error {
		if names := op.Names(); len(names) != 0 {
			return fmt.Errorf("modules still running: %v", names)
		}
		return nil
	})
}

// TestModuleObjectEvents checks the Events the operator records on a
// module's own object: CacheStale when its kind sees no event or list for
// StaleAfter (and Fresh when events return), and SyncFailed when its kind's
// cache cannot sync (here: the conformance module, whose Probe kind has no
// CRD in this cluster).
func TestModuleObjectEvents(t *testing.T) {
	e := optest.NewEnv(t)
	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		ModuleController: operator.ModuleControllerOptions{StatusInterval: 200 * time.Millisecond},
		Health:           operator.HealthOptions{Interval: 200 * time.Millisecond, SyncTimeout: time.Second, StaleAfter: 2 * time.Second},
	})
	ctx := context.Background()
	uids := map[string]types.UID{}
	for name, pkg := range map[string]string{"widget": "./widget", "tck": "./internal/tck"} {
		b := testwasm.Build(t, pkg)
		file := filepath.Join(t.TempDir(), name+".wasm")
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		uids[name] = optest.CreateModule(t, e.C, name, v1alpha1.Source{SHA256: supervisor.Digest(b), File: file}).UID
	}
	msg := optest.WaitModuleEvent(t, e.C, uids["tck"], modulecontroller.ReasonSyncFailed)
	if !strings.Contains(msg, "Probe") || !strings.Contains(msg, "CRD") {
		t.Errorf("SyncFailed message %q should name the kind and what to check", msg)
	}
	// Widgets: one event, then quiet for longer than StaleAfter.
	if err := e.C.Create(ctx, optest.Widget(e.NS, "quiet", 1)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "quiet", "1 x grey")
	optest.WaitModuleEvent(t, e.C, uids["widget"], modulecontroller.ReasonCacheStale)
	optest.UpdateWidgetSize(t, e.C, e.NS, "quiet", 2)
	optest.WaitModuleEvent(t, e.C, uids["widget"], "Fresh")
}

// TestModuleNameConflict runs widget from a file, with a second file of
// the same module (refused at start), and then declares a ReconcileModule
// of the same name: it is refused with LoadFailed, and the first file's
// module keeps serving.
func TestModuleNameConflict(t *testing.T) {
	e := optest.NewEnv(t)
	file := testwasm.BuildFile(t, "./widget")
	copied := filepath.Join(t.TempDir(), "copy.wasm") // the same module under another path
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o644); err != nil {
		t.Fatal(err)
	}
	op, err := optest.NewOperator(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:          []string{file, copied},
		ReconcileModules: true,
		Registerer:       prometheus.NewRegistry(),
		Engine:           operator.EngineOptions{CompilationCacheDir: optest.CompilationCache()},
	})
	if err != nil {
		t.Fatal(err)
	}
	var conflict *supervisor.NameConflictError
	if errs := op.LoadErrors(); len(errs) != 1 || !errors.As(errs[0], &conflict) || !strings.Contains(errs[0].Error(), "already runs from the file "+file) {
		t.Errorf("a second file of module widget: load errors %v, want one NameConflictError naming the first file", errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	optest.CreateModule(t, e.C, "widget", v1alpha1.Source{SHA256: supervisor.Digest(b), File: file})
	rm := optest.ModuleCondition(t, e.C, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonNameConflict)
	if msg := rm.Status.LastError; !strings.Contains(msg, "already runs from the file") {
		t.Errorf("status.lastError = %q, want the name conflict", msg)
	}
	if err := e.C.Create(context.Background(), optest.Widget(e.NS, "still-served", 4)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "still-served", "4 x grey")

	// Deleting the refused ReconcileModule leaves the file's module alone.
	deleteModule(t, e.C, "widget")
	if err := e.C.Create(context.Background(), optest.Widget(e.NS, "served-after", 5)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "served-after", "5 x grey")
}

// deleteModule deletes ReconcileModule name and waits until it is gone.
func deleteModule(t *testing.T, c client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Delete(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "ReconcileModule "+name+" gone", func() error {
		err := c.Get(ctx, client.ObjectKey{Name: name}, &v1alpha1.ReconcileModule{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (get: %v)", err)
	})
}

// TestFileModuleYields runs widget from a file with FileModulesYield (as
// operator dev does): a ReconcileModule of the same name takes it over and
// serves, a change of the file meanwhile does not take it back, and once
// the ReconcileModule is deleted the file's module serves again.
func TestFileModuleYields(t *testing.T) {
	e := optest.NewEnv(t)
	file := testwasm.BuildFile(t, "./widget")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	op, err := optest.NewOperator(t, e.Cfg, e.OperatorOptions(), operator.Options{
		Modules:          []string{file},
		ReconcileModules: true,
		FileModulesYield: true,
		Registerer:       prometheus.NewRegistry(),
		Engine:           operator.EngineOptions{CompilationCacheDir: optest.CompilationCache()},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := e.C.Create(ctx, optest.Widget(e.NS, "by-file", 1)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "by-file", "1 x grey")

	optest.CreateModule(t, e.C, "widget", v1alpha1.Source{SHA256: supervisor.Digest(b), File: file})
	optest.ModuleCondition(t, e.C, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	if err := e.C.Create(ctx, optest.Widget(e.NS, "by-object", 2)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "by-object", "2 x grey")

	// Deleted: the file's module serves again, alone.
	deleteModule(t, e.C, "widget")
	if err := e.C.Create(ctx, optest.Widget(e.NS, "by-file-again", 3)); err != nil {
		t.Fatal(err)
	}
	optest.WaitSummary(t, e.C, e.NS, "by-file-again", "3 x grey")
}
