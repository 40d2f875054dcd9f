package operator_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/wasmreconcile/wasmreconcile/host/internal/faultproxy"
	"github.com/wasmreconcile/wasmreconcile/host/internal/testenv"
	"github.com/wasmreconcile/wasmreconcile/host/operator"
)

// startBehindProxy starts a control plane with the example CRDs and a fault
// proxy in front of it. It returns the direct config (for the test's own
// client) and a config that goes through the proxy (for the operator).
func startBehindProxy(t *testing.T) (direct, viaProxy *rest.Config, proxy *faultproxy.Proxy) {
	t.Helper()
	env, cfg, err := testenv.Start("examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	if proxy, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	viaProxy = rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + proxy.Addr
	return cfg, viaProxy, proxy
}

// startOperator runs an operator until the test ends.
func startOperator(t testing.TB, cfg *rest.Config, opts operator.Options) *operator.Operator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	op, err := operator.New(ctx, cfg, opts)
	if err != nil || len(op.LoadErrors()) > 0 {
		cancel()
		t.Fatalf("operator.New: %v %v", err, op.LoadErrors())
	}
	done := make(chan error, 1)
	go func() { done <- op.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return op
}

// widget returns a Widget in the default namespace.
func widget(name string, size int64) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("examples.wasmreconcile.io/v1alpha1")
	w.SetKind("Widget")
	w.SetNamespace("default")
	w.SetName(name)
	_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
	return w
}

// summaryPoll is how often waitSummary polls; measurements lower it.
var summaryPoll = 100 * time.Millisecond

// waitSummary waits until the named Widget's status.summary is want. The
// deadline is generous because CI runs every package under -race at once on
// two cores; it bounds a hang, it is not a latency goal.
func waitSummary(t testing.TB, c client.Client, name, want string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for {
		w := widget(name, 0)
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), w); err == nil {
			if s, _, _ := unstructured.NestedString(w.Object, "status", "summary"); s == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached summary %q in %s", name, want, time.Since(start).Round(time.Second))
		}
		time.Sleep(summaryPoll)
	}
}
