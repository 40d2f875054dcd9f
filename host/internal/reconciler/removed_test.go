package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/internal/reconciler"
	"github.com/wasmreconcile/wasmreconcile/host/internal/versionslot"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// nopRecorder drops Events.
type nopRecorder struct{}

func (nopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}
func (nopRecorder) AnnotatedEventf(runtime.Object, runtime.Object, map[string]string, string, string, string, string, ...any) {
}

// guestCalls is the number of guest calls the metrics observed.
func guestCalls(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range families {
		if f.GetName() == "wasmreconcile_guest_duration_seconds" {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestRemovedOrRetiredModuleReturnsAtOnce reconciles through a slot that
// was closed (the module was removed) and through one whose current
// version was retired without a swap: each reconcile returns at once,
// without calling the guest, and asks for no requeue, so that a removed
// module's backlog drains instead of spinning. (Reading and writing objects
// is not exercised: the client is never reached.)
func TestRemovedOrRetiredModuleReturnsAtOnce(t *testing.T) {
	ctx := context.Background()
	wasm := testwasm.Build(t, "./widget")
	for _, c := range []struct {
		name string
		stop func(*versionslot.Slot, *versionslot.Version) error
	}{
		{"removed", func(s *versionslot.Slot, _ *versionslot.Version) error { s.Close(); return nil }},
		{"retired", func(_ *versionslot.Slot, v *versionslot.Version) error { return v.Retire(ctx) }},
		{"removed and retired", func(s *versionslot.Slot, v *versionslot.Version) error { s.Close(); return v.Retire(ctx) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := eng.Load(ctx, "widget", wasm, engine.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			reg := prometheus.NewRegistry()
			met, err := metrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			v := versionslot.New(m)
			slot := versionslot.NewSlot(v)
			rec, err := reconciler.New(reconciler.Options{
				Slot: slot, Client: fake.NewClientBuilder().Build(), Recorder: nopRecorder{}, Metrics: met,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.stop(slot, v); err != nil {
				t.Fatal(err)
			}
			// A backlog of 300 objects, reconciled one after another as a
			// worker would; the bound only turns a hang into a failure.
			done := make(chan error, 1)
			go func() {
				for i := 0; i < 300; i++ {
					res, err := rec.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "w"}})
					if err != nil || res != (ctrl.Result{}) {
						t.Errorf("Reconcile = %+v, %v; want no requeue and no error", res, err)
						break
					}
				}
				done <- nil
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("reconciles of a stopped module did not return")
			}
			if n := guestCalls(t, reg); n != 0 {
				t.Errorf("%d guest calls, want none", n)
			}
		})
	}
}
