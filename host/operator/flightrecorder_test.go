package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/modtest"
	"github.com/wasmreconcile/wasmreconcile/host/offline"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestFlightRecorder records calls in a real cluster and replays them
// offline: a Widget whose spec the module refuses (a terminal
// ReconcileFailed) and a good one (the first success is always sampled)
// are recorded; the records are served
// on the metrics server only to a token the API server authenticates
// (401 without one) and authorizes (403 for an account without the
// non-resource URL); written as case files, they pass operator test's
// checks offline with exactly the fuel the recorder measured on a fresh
// instance.
func TestFlightRecorder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	wasm := testwasm.BuildFile(t, "./widget")
	mo := e.operatorOptions()
	mo.MetricsBindAddress = freeAddr(t)
	start(t, e.cfg, mo, operator.Options{Modules: []string{wasm}})

	bad := widget(e.ns, "too-big", 1)
	_ = unstructured.SetNestedField(bad.Object, int64(1_000_000), "spec", "size")
	for _, w := range []*unstructured.Unstructured{widget(e.ns, "fine", 2), bad} {
		if err := e.c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	// Accounts: one allowed to read the recorder, one not.
	cs, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	allowed, other := token("recorder"), token("nosy")
	role := "flightrecorder-reader-" + e.ns
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{operator.FlightRecorderPath}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: e.ns, Name: "recorder"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})

	get := func(tok string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mo.MetricsBindAddress+operator.FlightRecorderPath+"?module=widget", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	var got struct {
		Cases []modtest.Case `json:"cases"`
	}
	testenv.Eventually(t, 3*time.Minute, "a failure and a success recorded", func() error {
		code, body := get(allowed)
		if code != http.StatusOK {
			return fmt.Errorf("HTTP %d: %s", code, body)
		}
		if err := json.Unmarshal(body, &got); err != nil {
			return err
		}
		kinds := map[string]bool{}
		for _, c := range got.Cases {
			kinds[c.Recorded.Kind] = true
		}
		if !kinds["ReconcileFailed"] || !kinds["Success"] {
			return fmt.Errorf("recorded kinds %v", kinds)
		}
		return nil
	})
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without a token: HTTP %d, want 401", code)
	}
	if code, _ := get(other); code != http.StatusForbidden {
		t.Errorf("with the token of an account without the role: HTTP %d, want 403", code)
	}

	// Written as case files, they pass offline with the recorded fuel.
	dir := t.TempDir()
	for i, c := range got.Cases {
		r := c.Recorded
		if r.Fuel == 0 || r.ReplayFuel == 0 || len(r.ReplayDiffers) > 0 || c.Expect.Fuel != r.ReplayFuel || r.Digest == "" {
			t.Errorf("case %s: recorded %+v, expect.fuel %d", c.Name, r, c.Expect.Fuel)
		}
		if r.Kind == "ReconcileFailed" && (c.Expect.Error == nil || !strings.Contains(c.Expect.Error.MessageContains, "size")) {
			t.Errorf("case %s: expect.error %+v, want the guest's message", c.Name, c.Expect.Error)
		}
		b, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.yaml", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases, err := modtest.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	m, err := eng.Load(ctx, "widget", b, engine.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		o := offline.Run(ctx, m, c.Input, offline.Options{Fresh: true})
		if diff := c.Check(o); len(diff) > 0 {
			t.Errorf("recorded case %s does not replay: %q", c.Name, diff)
		}
		t.Logf("%s: production fuel %d, replay fuel %d (offline %d)", c.Name, c.Recorded.Fuel, c.Recorded.ReplayFuel, o.Fuel)
	}
}
