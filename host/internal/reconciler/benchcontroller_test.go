package reconciler_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/packed"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/host/policy"
	"github.com/wasmreconcile/wasmreconcile/host/protocol"
)

// benchController starts a manager caching namespaces of cfg's cluster,
// with a controller of module (the claim guest) under pol, for the
// benchmarks that measure one reconcile on the real API server's cache.
// cached reads through the manager's cache. stop stops the manager and
// waits for it; call it before closing module.
func benchController(b *testing.B, cfg *rest.Config, module *engine.Module, pol policy.Policy, namespaces ...string) (rec *reconciler.Reconciler, cached client.Client, stop func()) {
	b.Helper()
	caches := map[string]cache.Config{}
	for _, ns := range namespaces {
		caches[ns] = cache.Config{}
	}
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip},
		Cache:      cache.Options{DefaultNamespaces: caches, DefaultTransform: packed.Transform(cache.TransformStripManagedFields())},
		Client:     client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		b.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	rec, err = reconciler.New(reconciler.Options{
		Slot: versionslot.NewSlot(versionslot.New(module)), Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("bench/claim"), Metrics: m, Scopes: protocol.MapperScopes(mgr.GetRESTMapper()),
		Policy: pol,
	})
	if err != nil {
		b.Fatal(err)
	}
	c, err := rec.NewController(mgr, reconciler.ControllerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := mgr.Add(c); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return rec, mgr.GetClient(), func() { cancel(); <-done }
}
