package clusterscoped_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasmreconcile/wasmreconcile/api/v1alpha1"
	"github.com/wasmreconcile/wasmreconcile/host/internal/modulecontroller"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
)

// TestReconcileModuleSourceRefused runs an operator whose source policy
// allows private addresses and the loopback host of one server, and only
// the test's namespace for ConfigMaps and Secrets, against the real API
// server. A url source on the allowed server that redirects to another
// loopback server (another port) is refused, and the other server gets no
// request; a secret source in a namespace not allowed is refused, and not
// read: it exists, and a read would have failed differently. Both report
// LoadFailed=True with reason SourceRefused, and a lastError that says what
// to do.
func TestReconcileModuleSourceRefused(t *testing.T) {
	e := optest.NewEnv(t)
	ctx := context.Background()
	var elsewhereHits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhereHits.Add(1)
		_, _ = w.Write([]byte("\x00asm\x01\x00\x00\x00"))
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/m.wasm", http.StatusFound)
	}))
	defer redirecting.Close()

	other := testenv.Namespace(t, e.C) // a namespace the operator may not read sources from
	if err := e.C.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "module"},
		Data: map[string][]byte{"module.wasm.gz": []byte("not a module")}}); err != nil {
		t.Fatal(err)
	}

	optest.Start(t, e.Cfg, e.OperatorOptions(), operator.Options{
		ReconcileModules: true,
		Sources:          operator.SourceOptions{URLAllowPrivate: true, URLAllowedHosts: []string{"127.0.0.1"}, Namespaces: []string{e.NS}},
	})
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

	optest.CreateModule(t, e.C, "source-redirect", v1alpha1.Source{SHA256: digest, URL: redirecting.URL + "/m.wasm"})
	rm := optest.ModuleCondition(t, e.C, "source-redirect", modulecontroller.ConditionLoadFailed, metav1.ConditionTrue, modulecontroller.ReasonSourceRefused)
	if msg := rm.Status.LastError; !strings.Contains(msg, "refused a cross-host redirect from "+redirecting.URL+" to "+elsewhere.URL) ||
		!strings.Contains(msg, "final URL") {
		t.Errorf("status.lastError = %q, want the cross-host redirect refused and what to do", msg)
	}
	if c := meta.FindStatusCondition(rm.Status.Conditions, modulecontroller.ConditionLoadFailed); !strings.Contains(c.Message, "cross-host redirect") {
		t.Errorf("LoadFailed message %q, want the cross-host redirect", c.Message)
	}
	if n := elsewhereHits.Load(); n != 0 {
		t.Errorf("the server redirected to got %d requests", n)
	}

	optest.CreateModule(t, e.C, "source-namespace", v1alpha1.Source{SHA256: digest, Secret: &v1alpha1.KeyRef{Namespace: other, Name: "module"}})
	rm = optest.ModuleCondition(t, e.C, "source-namespace", modulecontroller.ConditionLoadFailed, metav1.ConditionTrue, modulecontroller.ReasonSourceRefused)
	for _, want := range []string{`source namespace "` + other + `" is not allowed`, `only from namespace "` + e.NS + `"`, "--module-source-namespaces"} {
		if !strings.Contains(rm.Status.LastError, want) {
			t.Errorf("status.lastError = %q, want %q", rm.Status.LastError, want)
		}
	}
	if strings.Contains(rm.Status.LastError, "neither wasm") {
		t.Errorf("status.lastError = %q: the Secret was read", rm.Status.LastError)
	}
}
