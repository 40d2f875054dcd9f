package operator_test

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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// createModule creates a ReconcileModule and deletes it when the test ends:
// ReconcileModules are cluster-scoped, so tests sharing a control plane
// must not leave theirs behind.
func createModule(t *testing.T, c client.Client, name string, src v1alpha1.Source) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ReconcileModuleSpec{Source: src}}
	if err := c.Create(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), rm); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ReconcileModule %s: %v", name, err)
		}
	})
	return rm
}

// moduleCondition waits until the ReconcileModule's condition typ has status
// and, if reason is not empty, reason; it returns the object.
func moduleCondition(t *testing.T, c client.Client, name, typ string, status metav1.ConditionStatus, reason string) *v1alpha1.ReconcileModule {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{}
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("ReconcileModule %s %s=%s (%s)", name, typ, status, reason), func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(rm.Status.Conditions, typ)
		if cond == nil || cond.Status != status || (reason != "" && cond.Reason != reason) {
			return fmt.Errorf("conditions %v", rm.Status.Conditions)
		}
		return nil
	})
	return rm
}

// setSpec changes a ReconcileModule's spec, retrying on conflicts.
func setSpec(t *testing.T, c client.Client, name string, mutate func(spec *v1alpha1.ReconcileModuleSpec)) {
	t.Helper()
	rm := &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: name}}
	testenv.Update(t, c, rm, func() { mutate(&rm.Spec) })
}

// waitModuleEvent waits for an Event with reason on the ReconcileModule of
// uid and returns its message.
func waitModuleEvent(t *testing.T, c client.Client, uid types.UID, reason string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 2*time.Minute, "a "+reason+" Event", func() error {
		var events corev1.EventList
		if err := c.List(context.Background(), &events); err != nil {
			return err
		}
		for _, e := range events.Items { // events.k8s.io Events are readable as core Events too
			if e.InvolvedObject.UID == uid && e.Reason == reason {
				msg = e.Message
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	return msg
}

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
	e := newEnv(t)
	mo := e.operatorOptions()
	reg := prometheus.NewRegistry()
	op := start(t, e.cfg, mo, operator.Options{
		ReconcileModules: true,
		Registerer:       reg,
		Sources:          operator.SourceOptions{Namespaces: []string{e.ns}, URLAllowPrivate: true},
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
		err := e.c.Create(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: bad.name}, Spec: v1alpha1.ReconcileModuleSpec{Source: bad.src}})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("creating ReconcileModule %s with source %+v: %v, want an admission error containing %q", bad.name, bad.src, err, bad.want)
		}
	}

	// A ConfigMap source.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "widget-module"},
		BinaryData: map[string][]byte{"module.wasm.gz": gz(t, v1)}}
	if err := e.c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	createModule(t, e.c, "widget", v1alpha1.Source{SHA256: supervisor.Digest(v1), ConfigMap: &v1alpha1.KeyRef{Namespace: e.ns, Name: "widget-module"}})
	rm := moduleCondition(t, e.c, "widget", "Ready", metav1.ConditionTrue, "Loaded")
	if rm.Status.Digest != supervisor.Digest(v1) {
		t.Errorf("status.digest = %s, want %s", rm.Status.Digest, supervisor.Digest(v1))
	}
	if err := e.c.Create(ctx, widget(e.ns, "managed", 3)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, e.c, e.ns, "managed", "3 x grey")
	waitVersion(t, e.c, e.ns, []string{"managed"}, "1", time.Now())

	// A Secret source: first under a key that does not exist (FetchFailed,
	// saying how to create it), then the right one. (Raw bytes are accepted
	// too, but this 3.2 MB module is over the API server's request limit;
	// gzip'd it is 1 MB.)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "widget-secret"},
		Data: map[string][]byte{"module.wasm": gz(t, v1)}}
	if err := e.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v1), Secret: &v1alpha1.KeyRef{Namespace: e.ns, Name: "widget-secret"}}
	})
	rm = moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonFetchFailed)
	if msg := rm.Status.LastError; !strings.Contains(msg, `no key "module.wasm.gz"`) || !strings.Contains(msg, "kubectl create secret") {
		t.Errorf("status.lastError = %q, want the missing key and how to create it", msg)
	}
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.Secret.Key = "module.wasm" })
	moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionFalse, modulecontroller.ReasonLoaded)

	// A wrong digest: refused, v1 keeps serving.
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Source.SHA256 = supervisor.Digest(v2) })
	rm = moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonDigestMismatch)
	moduleCondition(t, e.c, "widget", "Ready", metav1.ConditionTrue, "")
	if msg := rm.Status.LastError; !strings.Contains(msg, "update the pinned sha256") {
		t.Errorf("status.lastError = %q, want the digest mismatch with what to do", msg)
	}
	waitModuleEvent(t, e.c, rm.UID, modulecontroller.ReasonDigestMismatch)

	// A file source with v2: the Widget is reconciled by v2, no restart.
	file := filepath.Join(t.TempDir(), "widget.wasm")
	if err := os.WriteFile(file, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v2), File: file}
	})
	moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionFalse, "")
	waitVersion(t, e.c, e.ns, []string{"managed"}, "2", time.Now())

	// A URL source: roll back to v1.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(gz(t, v1)) }))
	defer srv.Close()
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Source = v1alpha1.Source{SHA256: supervisor.Digest(v1), URL: srv.URL + "/widget.wasm.gz"}
	})
	waitVersion(t, e.c, e.ns, []string{"managed"}, "1", time.Now())

	// Paused: changes wait; resuming reconciles them.
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Paused = true })
	moduleCondition(t, e.c, "widget", "Ready", metav1.ConditionFalse, modulecontroller.ReasonPaused)
	reconciles := gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"})
	updateWidgetSize(t, e.c, e.ns, "managed", 8)
	// A positive barrier: the operator's cache has the change, so the
	// controller has been handed it; a paused module must not act on it.
	testenv.Eventually(t, time.Minute, "the operator's cache to see size 8", func() error {
		cw := widget(e.ns, "managed", 0)
		if err := op.Manager().GetCache().Get(ctx, client.ObjectKeyFromObject(cw), cw); err != nil {
			return err
		}
		if size, _, _ := unstructuredInt(cw.Object, "spec", "size"); size != 8 {
			return fmt.Errorf("size %d", size)
		}
		return nil
	})
	w := widget(e.ns, "managed", 0)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if s := summaryOf(w); s != "3 x grey" {
		t.Errorf("paused module reconciled: summary %q", s)
	}
	if got := gather(t, reg, "wasmreconcile_reconcile_total", map[string]string{"module": "widget"}); got != reconciles {
		t.Errorf("paused module called the guest: %v reconciles", got-reconciles)
	}
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) { spec.Paused = false })
	waitSummary(t, e.c, e.ns, "managed", "8 x grey")

	// New controller settings (concurrency, rate) replace the controller;
	// the module keeps reconciling.
	restarted := gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "restarted"})
	setSpec(t, e.c, "widget", func(spec *v1alpha1.ReconcileModuleSpec) {
		spec.Limits = v1alpha1.Limits{MaxConcurrentReconciles: 2, Rate: v1alpha1.Rate{QPS: 5, Burst: 10}}
	})
	testenv.Eventually(t, time.Minute, "new controller settings to replace the controller", func() error {
		if gather(t, reg, "wasmreconcile_module_reloads_total", map[string]string{"module": "widget", "result": "restarted"}) == restarted {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	updateWidgetSize(t, e.c, e.ns, "managed", 9)
	waitSummary(t, e.c, e.ns, "managed", "9 x grey")

	// Statistics.
	testenv.Eventually(t, time.Minute, "status.stats to count reconciles", func() error {
		rm := moduleCondition(t, e.c, "widget", "Ready", metav1.ConditionTrue, "")
		if s := rm.Status.Stats; s == nil || s.Reconciles == 0 || s.MeanFuel == 0 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})

	// Deletion stops the module.
	if err := e.c.Delete(ctx, &v1alpha1.ReconcileModule{ObjectMeta: metav1.ObjectMeta{Name: "widget"}}); err != nil {
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
	e := newEnv(t)
	start(t, e.cfg, e.operatorOptions(), operator.Options{
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
		uids[name] = createModule(t, e.c, name, v1alpha1.Source{SHA256: supervisor.Digest(b), File: file}).UID
	}
	msg := waitModuleEvent(t, e.c, uids["tck"], modulecontroller.ReasonSyncFailed)
	if !strings.Contains(msg, "Probe") || !strings.Contains(msg, "CRD") {
		t.Errorf("SyncFailed message %q should name the kind and what to check", msg)
	}
	// Widgets: one event, then quiet for longer than StaleAfter.
	if err := e.c.Create(ctx, widget(e.ns, "quiet", 1)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, e.c, e.ns, "quiet", "1 x grey")
	waitModuleEvent(t, e.c, uids["widget"], modulecontroller.ReasonCacheStale)
	updateWidgetSize(t, e.c, e.ns, "quiet", 2)
	waitModuleEvent(t, e.c, uids["widget"], "Fresh")
}

// TestModuleNameConflict runs widget from a file, with a second file of
// the same module (refused at start), and then declares a ReconcileModule
// of the same name: it is refused with LoadFailed, and the first file's
// module keeps serving.
func TestModuleNameConflict(t *testing.T) {
	e := newEnv(t)
	file := testwasm.BuildFile(t, "./widget")
	copied := filepath.Join(t.TempDir(), "copy.wasm") // the same module under another path
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o644); err != nil {
		t.Fatal(err)
	}
	op, err := newOperator(t, e.cfg, e.operatorOptions(), operator.Options{
		Modules:          []string{file, copied},
		ReconcileModules: true,
		Registerer:       prometheus.NewRegistry(),
		Engine:           operator.EngineOptions{CompilationCacheDir: compilationCache},
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
	createModule(t, e.c, "widget", v1alpha1.Source{SHA256: supervisor.Digest(b), File: file})
	rm := moduleCondition(t, e.c, "widget", "LoadFailed", metav1.ConditionTrue, modulecontroller.ReasonNameConflict)
	if msg := rm.Status.LastError; !strings.Contains(msg, "already runs from the file") {
		t.Errorf("status.lastError = %q, want the name conflict", msg)
	}
	if err := e.c.Create(context.Background(), widget(e.ns, "still-served", 4)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, e.c, e.ns, "still-served", "4 x grey")
}
