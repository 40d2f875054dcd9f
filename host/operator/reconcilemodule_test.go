package operator_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/internal/supervisor"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

func reconcileModule(name string, source map[string]any) *unstructured.Unstructured {
	rm := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"source": source}}}
	rm.SetGroupVersionKind(modulecontroller.GVK)
	rm.SetName(name)
	return rm
}

// moduleCondition waits until the ReconcileModule's condition typ has status
// and, if reason is not empty, reason; it returns the object.
func moduleCondition(t *testing.T, c client.Client, name, typ, status, reason string) *unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last []any
	for {
		rm := reconcileModule(name, nil)
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err == nil {
			last, _, _ = unstructured.NestedSlice(rm.Object, "status", "conditions")
			for _, x := range last {
				m, _ := x.(map[string]any)
				if m["type"] == typ && m["status"] == status && (reason == "" || m["reason"] == reason) {
					return rm
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReconcileModule %s never had %s=%s (%s); conditions: %v", name, typ, status, reason, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func setSpec(t *testing.T, c client.Client, name string, mutate func(spec map[string]any)) {
	t.Helper()
	for i := 0; ; i++ {
		rm := reconcileModule(name, nil)
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, rm); err != nil {
			t.Fatal(err)
		}
		spec, _, _ := unstructured.NestedMap(rm.Object, "spec")
		mutate(spec)
		_ = unstructured.SetNestedMap(rm.Object, spec, "spec")
		err := c.Update(context.Background(), rm)
		if err == nil {
			return
		}
		if i > 20 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
// ConfigMap source, a wrong digest (refused, old version serving, Warning
// Event), a file source with a new version, a URL rollback, pause and
// resume, status statistics, and deletion.
func TestReconcileModuleLifecycle(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds", "config/crd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	op := startOperator(t, cfg, operator.Options{
		ReconcileModules: true, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
		ModuleController: modulecontroller.Options{StatusInterval: time.Second},
	})
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := testwasm.BuildVersion(t, "./widget", "1"), testwasm.BuildVersion(t, "./widget", "2")

	// Admission: the schema refuses two sources and a malformed digest.
	for _, bad := range []struct {
		source map[string]any
		want   string
	}{
		{map[string]any{"sha256": supervisor.Digest(v1)[7:], "file": "/m/a.wasm", "url": "http://x/a.wasm"}, "set exactly one of"},
		{map[string]any{"sha256": "abc", "file": "/m/a.wasm"}, "spec.source.sha256"},
	} {
		err := c.Create(ctx, reconcileModule("refused", bad.source))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("creating a ReconcileModule with source %v: %v, want an admission error containing %q", bad.source, err, bad.want)
		}
	}

	// A ConfigMap source.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "widget-module"},
		BinaryData: map[string][]byte{"module.wasm.gz": gz(t, v1)}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, reconcileModule("widget", map[string]any{
		"sha256": supervisor.Digest(v1), "configMap": map[string]any{"namespace": "default", "name": "widget-module"},
	})); err != nil {
		t.Fatal(err)
	}
	rm := moduleCondition(t, c, "widget", "Ready", "True", "Loaded")
	if d, _, _ := unstructured.NestedString(rm.Object, "status", "digest"); d != supervisor.Digest(v1) {
		t.Errorf("status.digest = %s, want %s", d, supervisor.Digest(v1))
	}
	if err := c.Create(ctx, widget("managed", 3)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "managed", "3 x grey")
	waitVersion(t, c, []string{"managed"}, "1", time.Now())

	// A Secret source: first under a key that does not exist (FetchFailed,
	// saying how to create it), then the right one. (Raw bytes are accepted
	// too, but this 3.2 MB module is over the API server's request limit;
	// gzip'd it is 1 MB.)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "widget-secret"},
		Data: map[string][]byte{"module.wasm": gz(t, v1)}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	setSpec(t, c, "widget", func(spec map[string]any) {
		spec["source"] = map[string]any{"sha256": supervisor.Digest(v1), "secret": map[string]any{"namespace": "default", "name": "widget-secret"}}
	})
	rm = moduleCondition(t, c, "widget", "LoadFailed", "True", modulecontroller.ReasonFetchFailed)
	if msg, _, _ := unstructured.NestedString(rm.Object, "status", "lastError"); !strings.Contains(msg, `no key "module.wasm.gz"`) || !strings.Contains(msg, "kubectl create secret") {
		t.Errorf("status.lastError = %q, want the missing key and how to create it", msg)
	}
	setSpec(t, c, "widget", func(spec map[string]any) {
		_ = unstructured.SetNestedField(spec, "module.wasm", "source", "secret", "key")
	})
	moduleCondition(t, c, "widget", "LoadFailed", "False", modulecontroller.ReasonLoaded)

	// A wrong digest: refused, v1 keeps serving.
	setSpec(t, c, "widget", func(spec map[string]any) {
		_ = unstructured.SetNestedField(spec, supervisor.Digest(v2), "source", "sha256")
	})
	rm = moduleCondition(t, c, "widget", "LoadFailed", "True", modulecontroller.ReasonDigestMismatch)
	moduleCondition(t, c, "widget", "Ready", "True", "")
	if msg, _, _ := unstructured.NestedString(rm.Object, "status", "lastError"); !strings.Contains(msg, "update the pinned sha256") {
		t.Errorf("status.lastError = %q, want the digest mismatch with what to do", msg)
	}
	var events corev1.EventList
	if err := c.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	// events.k8s.io Events are readable as core Events too.
	found := false
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "ReconcileModule" && e.Reason == modulecontroller.ReasonDigestMismatch {
			found = true
		}
	}
	if !found {
		t.Error("no DigestMismatch Event on the ReconcileModule")
	}

	// A file source with v2: the Widget is reconciled by v2, no restart.
	dir := t.TempDir()
	file := filepath.Join(dir, "widget.wasm")
	if err := os.WriteFile(file, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	setSpec(t, c, "widget", func(spec map[string]any) {
		spec["source"] = map[string]any{"sha256": supervisor.Digest(v2), "file": file}
	})
	moduleCondition(t, c, "widget", "LoadFailed", "False", "")
	waitVersion(t, c, []string{"managed"}, "2", time.Now())

	// A URL source: roll back to v1.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(gz(t, v1)) }))
	defer srv.Close()
	setSpec(t, c, "widget", func(spec map[string]any) {
		spec["source"] = map[string]any{"sha256": supervisor.Digest(v1), "url": srv.URL + "/widget.wasm.gz"}
	})
	waitVersion(t, c, []string{"managed"}, "1", time.Now())

	// Paused: changes wait; resuming reconciles them.
	setSpec(t, c, "widget", func(spec map[string]any) { spec["paused"] = true })
	moduleCondition(t, c, "widget", "Ready", "False", modulecontroller.ReasonPaused)
	updateWidgetSize(t, c, "managed", 8)
	time.Sleep(2 * time.Second)
	w := widget("managed", 0)
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s != "3 x grey" {
		t.Errorf("paused module reconciled: summary %q", s)
	}
	setSpec(t, c, "widget", func(spec map[string]any) { spec["paused"] = false })
	waitSummary(t, c, "managed", "8 x grey")

	// New controller settings (concurrency, rate) replace the controller;
	// the module keeps reconciling.
	restarted := reloads("restarted")
	setSpec(t, c, "widget", func(spec map[string]any) {
		spec["limits"] = map[string]any{"maxConcurrentReconciles": int64(2), "rate": map[string]any{"qps": 5.0, "burst": int64(10)}}
	})
	for deadline := time.Now().Add(time.Minute); reloads("restarted") == restarted; {
		if time.Now().After(deadline) {
			t.Fatal("new controller settings did not replace the controller")
		}
		time.Sleep(20 * time.Millisecond)
	}
	updateWidgetSize(t, c, "managed", 9)
	waitSummary(t, c, "managed", "9 x grey")

	// Statistics.
	deadline := time.Now().Add(time.Minute)
	for {
		rm = moduleCondition(t, c, "widget", "Ready", "True", "")
		n, _, _ := unstructured.NestedInt64(rm.Object, "status", "stats", "reconciles")
		fuel, _, _ := unstructured.NestedInt64(rm.Object, "status", "stats", "meanFuel")
		if n > 0 && fuel > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.stats never counted reconciles: %v", rm.Object["status"])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Deletion stops the module.
	if err := c.Delete(ctx, reconcileModule("widget", nil)); err != nil {
		t.Fatal(err)
	}
	for len(op.Supervisor().Names()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("module still running after its ReconcileModule was deleted: %v", op.Supervisor().Names())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitModuleEvent waits for an Event with reason on ReconcileModule name.
func waitModuleEvent(t *testing.T, c client.Client, name, reason string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var events corev1.EventList
		if err := c.List(context.Background(), &events); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "ReconcileModule" && e.InvolvedObject.Name == name && e.Reason == reason {
				return e.Message
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event on ReconcileModule %s", reason, name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestModuleObjectEvents checks the Events the operator records on a
// module's own object: CacheStale when its kind sees no event or list for
// StaleAfter (and Fresh when events return), and SyncFailed when its kind's
// cache cannot sync (here: a module for a kind whose CRD is not installed).
func TestModuleObjectEvents(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds", "config/crd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	startOperator(t, cfg, operator.Options{
		ReconcileModules: true, MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
		ModuleController: modulecontroller.Options{StatusInterval: 200 * time.Millisecond, SyncTimeout: time.Second, StaleAfter: 2 * time.Second},
	})
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	widgetFile, gadgetFile := testwasm.BuildFile(t, "./widget"), testwasm.BuildFile(t, "./internal/testguests/misbehave")
	for name, file := range map[string]string{"widget": widgetFile, "misbehave": gadgetFile} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, reconcileModule(name, map[string]any{"sha256": supervisor.Digest(b), "file": file})); err != nil {
			t.Fatal(err)
		}
	}
	// The Gadget CRD is not installed: the misbehave module cannot sync.
	msg := waitModuleEvent(t, c, "misbehave", modulecontroller.ReasonSyncFailed)
	if !strings.Contains(msg, "Gadget") || !strings.Contains(msg, "CRD") {
		t.Errorf("SyncFailed message %q should name the kind and what to check", msg)
	}
	// Widgets: one event, then quiet for longer than StaleAfter.
	if err := c.Create(ctx, widget("quiet", 1)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "quiet", "1 x grey")
	waitModuleEvent(t, c, "widget", modulecontroller.ReasonCacheStale)
	updateWidgetSize(t, c, "quiet", 2)
	waitModuleEvent(t, c, "widget", "Fresh")
}

// TestModuleNameConflict runs widget from --module, with a second file of
// the same module (refused at start), and then declares a ReconcileModule
// of the same name: it is refused with LoadFailed, and the first file's
// module keeps serving.
func TestModuleNameConflict(t *testing.T) {
	env, cfg, err := testenv.Start("examples/crds", "config/crd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	file := testwasm.BuildFile(t, "./widget")
	copied := filepath.Join(t.TempDir(), "copy.wasm") // the same module under another path
	b0, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b0, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op, err := operator.New(ctx, cfg, operator.Options{
		Modules: []string{file, copied}, ReconcileModules: true,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipControllerNameValidation: true,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var conflict *supervisor.NameConflictError
	if errs := op.LoadErrors(); len(errs) != 1 || !errors.As(errs[0], &conflict) || !strings.Contains(errs[0].Error(), "already runs from a file "+file) {
		t.Errorf("a second file of module widget: load errors %v, want one NameConflictError naming the first file", errs)
	}
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), reconcileModule("widget", map[string]any{"sha256": supervisor.Digest(b), "file": file})); err != nil {
		t.Fatal(err)
	}
	rm := moduleCondition(t, c, "widget", "LoadFailed", "True", modulecontroller.ReasonNameConflict)
	if msg, _, _ := unstructured.NestedString(rm.Object, "status", "lastError"); !strings.Contains(msg, "already runs from a file") {
		t.Errorf("status.lastError = %q, want the name conflict", msg)
	}
	if err := c.Create(context.Background(), widget("still-served", 4)); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, c, "still-served", "4 x grey")
}
