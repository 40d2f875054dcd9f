package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/wasmreconcile/wasmreconcile/host/operator/internal/optest"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// TestFlightRecorder records calls in a real cluster and replays them
// offline: a Widget whose spec the module refuses (a terminal
// ReconcileFailed) and a good one (the first success is always sampled)
// are recorded; the records are served
// on the metrics server only to a token the API server authenticates
// (401 without one) and authorizes (403 for an account without the
// non-resource URL, and then for get on the recorded objects); written as
// case files, they pass operator test's
// checks offline with exactly the fuel the recorder measured on a fresh
// instance.
func TestFlightRecorder(t *testing.T) {
	t.Parallel() // isolated: a namespace and an operator of its own
	e := optest.NewEnv(t)
	ctx := context.Background()
	wasm := testwasm.BuildFile(t, "./widget")
	misbehave := testwasm.BuildFile(t, "./internal/testguests/misbehave")
	claim := claimFile(t, "") // owns ConfigMaps, answers spec.response
	mo := e.OperatorOptions()
	mo.MetricsBindAddress = optest.FreeAddr(t)
	// Every success is kept, so that the reading Gadget's call after its
	// ConfigMap reached the cache is (the first may come before).
	optest.Start(t, e.Cfg, mo, operator.Options{Modules: []string{wasm, misbehave, claim}, FlightRecorder: operator.FlightRecorderOptions{SampleEvery: 1, SampleInterval: -1}})

	// A guest that reads: its recorded case must carry what it read.
	if err := e.C.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "cfg", Labels: map[string]string{"app": "x"}},
		Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	reader := optest.Gadget(e.NS, "reader", "read")
	_ = unstructured.SetNestedField(reader.Object, "cfg", "spec", "configMap")
	_ = unstructured.SetNestedField(reader.Object, "app=x", "spec", "selector")
	if err := e.C.Create(ctx, reader); err != nil {
		t.Fatal(err)
	}

	// An answer offline checks pass and the API server refuses: a
	// ConfigMap data key with a space (a built-in value rule).
	refused := optest.Responder(e.NS, "refused", map[string]any{
		"status": map[string]any{"phase": "asked"},
		"children": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "refused-child"},
			"data": map[string]any{"bad key": "v"}}},
	})
	if err := e.C.Create(ctx, refused); err != nil {
		t.Fatal(err)
	}

	bad := optest.Widget(e.NS, "too-big", 1)
	_ = unstructured.SetNestedField(bad.Object, int64(1_000_000), "spec", "size")
	for _, w := range []*unstructured.Unstructured{optest.Widget(e.NS, "fine", 2), bad} {
		if err := e.C.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	// Accounts: one allowed to read the recorder, one not.
	cs, err := kubernetes.NewForConfig(e.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(e.NS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(e.NS).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	allowed, other := token("recorder"), token("nosy")
	role := "flightrecorder-reader-" + e.NS
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{operator.FlightRecorderPath}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: e.NS, Name: "recorder"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	// The records hold the recorded objects: the reader may get them.
	optest.GrantRole(t, e.C, e.NS, "recorder", "recorded-objects", optest.Rule("examples.wasmreconcile.io", []string{"widgets"}, "get"),
		optest.Rule("test.wasmreconcile.io", []string{"gadgets", "responders"}, "get"))

	getModule := func(tok, module string) (int, []byte) {
		return optest.FlightRecords(ctx, mo.MetricsBindAddress, tok, module)
	}
	get := func(tok string) (int, []byte) { return getModule(tok, "widget") }
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
	replays(t, wasm, got.Cases)

	// The reading guest's case holds the ConfigMap it read, and replays.
	var read struct {
		Cases []modtest.Case `json:"cases"`
	}
	var c modtest.Case
	touch := 0
	testenv.Eventually(t, 3*time.Minute, "the reading Gadget recorded with the ConfigMap it read", func() error {
		code, body := getModule(allowed, "misbehave")
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &read); err != nil {
				return err
			}
			for _, rc := range read.Cases {
				if rc.Expect.Status["found"] == true {
					c = rc
					return nil
				}
			}
		}
		// Not yet seen by the guest: another event calls it again (a guest
		// that reads is called on every event).
		touch++
		g := optest.Gadget(e.NS, "reader", "")
		testenv.Update(t, e.C, g, func() { g.SetAnnotations(map[string]string{"touch": fmt.Sprint(touch)}) })
		return fmt.Errorf("HTTP %d, %d cases, none with the ConfigMap found", code, len(read.Cases))
	})
	if len(c.Input.Related) != 1 || c.Input.Related[0]["kind"] != "ConfigMap" || c.Expect.Status["listed"] != float64(1) {
		t.Fatalf("the reading call's case: related %v, expected status %v", c.Input.Related, c.Expect.Status)
	}
	// Every read is logged with how it ended, for operator replay.
	if r := c.Recorded.Reads; len(r) != 3 || r[0].Op != "get" || r[0].Name != "cfg" || r[0].Status != "OK" || r[1].Op != "list" ||
		r[1].LabelSelector != "app=x" || r[2].Kind != "Secret" || r[2].Status != "Forbidden" {
		t.Errorf("the reading call's recorded reads: %+v", r)
	}
	replays(t, misbehave, []modtest.Case{c})

	// The call whose child the API server refused is kept as a failure,
	// with the API server's message; its case expects the answer itself.
	var refusedCase modtest.Case
	testenv.Eventually(t, 3*time.Minute, "the refused child recorded", func() error {
		code, body := getModule(allowed, "claim")
		if code != http.StatusOK {
			return fmt.Errorf("HTTP %d: %s", code, body)
		}
		var rec struct {
			Cases []modtest.Case `json:"cases"`
		}
		if err := json.Unmarshal(body, &rec); err != nil {
			return err
		}
		for _, rc := range rec.Cases {
			if len(rc.Recorded.Refused) > 0 {
				refusedCase = rc
				return nil
			}
		}
		return fmt.Errorf("%d cases, none with a refused child", len(rec.Cases))
	})
	f := refusedCase.Recorded.Refused[0]
	if f.Kind != "ConfigMap" || f.Name != "refused-child" || f.Reason != "Invalid" || !strings.Contains(f.Message, "bad key") ||
		!strings.HasPrefix(refusedCase.Name, "failure ") || !strings.Contains(refusedCase.Name, "ConfigMap refused-child refused (Invalid)") {
		t.Errorf("the refused child's case %q: refused %+v", refusedCase.Name, refusedCase.Recorded.Refused)
	}
	if refusedCase.Expect.Status["phase"] != "asked" || len(refusedCase.Expect.Children) != 1 {
		t.Errorf("the refused child's case expects %+v, want the answer", refusedCase.Expect)
	}
}

// replays writes cases as files, loads them back as operator test does,
// and checks that each passes offline on the module in wasm (exact fuel
// included).
func replays(t *testing.T, wasm string, got []modtest.Case) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for i, c := range got {
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
	// The operator's compiled code: replaying is what is tested, and
	// compiling the guests again in this -race process took half a minute.
	eng, err := engine.New(engine.Options{CompilationCacheDir: optest.CompilationCache()})
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
