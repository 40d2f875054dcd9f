// Package guestbench is what the language benchmarks of the widget's logic
// share (modules/widget-c/native, modules/widget-rust/native): the 2.4 KB
// Widget request of the Go benchmarks, and a guest instantiated under
// wazero's compiler, unmetered, with the host's imports stubbed, called as
// the host calls it (wr_alloc, a copy of the request, wr_reconcile).
package guestbench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// Request is the 2.4 KB Widget request of the Go benchmarks: a Widget of
// size 3, blue, at generation 3, padded with annotations.
func Request() []byte {
	ann := map[string]any{}
	obj := map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "bench", "namespace": "default", "generation": 3,
			"labels": map[string]any{"app": "bench"}, "annotations": ann},
		"spec": map[string]any{"size": 3, "color": "blue"},
	}
	enc := func() []byte {
		b, _ := json.Marshal(map[string]any{"object": obj, "now": "2026-01-01T00:00:00Z"})
		return b
	}
	req := enc()
	for i := 0; len(req) < 2400; i++ {
		ann[fmt.Sprintf("example.com/note-%02d", i)] = strings.Repeat("v", 40)
		req = enc()
	}
	return req
}

// Guest is one instance of a guest module.
type Guest struct {
	ctx              context.Context
	rt               wazero.Runtime
	mod              api.Module
	alloc, reconcile api.Function
}

// NewGuest instantiates wasm (a WASI reactor exporting the ABI) with WASI
// and the host's functions stubbed: log does nothing, cache_read answers
// CacheUnavailable.
func NewGuest(ctx context.Context, wasm []byte) (*Guest, error) {
	rt := wazero.NewRuntime(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).Export(abi.ImportLog).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) { s[0] = 4 << 32 }),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}).Export(abi.ImportCacheRead).
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize).WithName(""))
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &Guest{ctx: ctx, rt: rt, mod: mod, alloc: mod.ExportedFunction(abi.ExportAlloc), reconcile: mod.ExportedFunction(abi.ExportReconcile)}, nil
}

// Call runs one reconcile of req and returns the response, which stays
// valid until the next call.
func (g *Guest) Call(req []byte) ([]byte, error) {
	res, err := g.alloc.Call(g.ctx, uint64(len(req)))
	if err != nil {
		return nil, err
	}
	if !g.mod.Memory().Write(uint32(res[0]), req) {
		return nil, fmt.Errorf("wr_alloc returned %d, outside memory", res[0])
	}
	if res, err = g.reconcile.Call(g.ctx, res[0], uint64(len(req))); err != nil {
		return nil, err
	}
	out, ok := g.mod.Memory().Read(uint32(res[0]>>32), uint32(res[0]))
	if !ok {
		return nil, fmt.Errorf("the response %#x is outside memory", res[0])
	}
	return out, nil
}

// Close closes the guest's runtime.
func (g *Guest) Close() error { return g.rt.Close(g.ctx) }

// Interleave runs native and then guest, b.N times each, alternating call
// by call, reports native-us, guest-us and guest/native, and logs the ratio
// against goal with "met" or "missed". what names the guest ("C",
// "Rust"); req is the request, for the log.
func Interleave(b *testing.B, what string, goal float64, req []byte, native, guest func()) {
	var inNative, inGuest time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		native()
		mid := time.Now()
		guest()
		end := time.Now()
		inNative, inGuest = inNative+mid.Sub(start), inGuest+end.Sub(mid)
	}
	ratio := float64(inGuest) / float64(inNative)
	b.ReportMetric(float64(inNative.Nanoseconds())/float64(b.N)/1e3, "native-us")
	b.ReportMetric(float64(inGuest.Nanoseconds())/float64(b.N)/1e3, "guest-us")
	b.ReportMetric(ratio, "guest/native")
	verdict := "met"
	if ratio > goal {
		verdict = "missed"
	}
	if b.N == 1 {
		// The benchmark framework's first, one-call run: one call is noise,
		// not a measurement, so it states no verdict.
		b.Logf("%s guest/native %.2fx over one call: not a measurement (request %d bytes)", what, ratio, len(req))
		return
	}
	b.Logf("%s guest/native %.2fx against a goal of <=%gx: %s (request %d bytes)", what, ratio, goal, verdict, len(req))
}
