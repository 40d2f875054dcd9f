package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	guest "github.com/wasmreconcile/wasmreconcile/guest-sdk"
	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// requests are a new WebApp (no child observed yet) and one whose children
// exist: the two reconciles that build both children.
func requests() map[string][]byte {
	obj := map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "WebApp",
		"metadata": map[string]any{"name": "shop", "namespace": "default", "generation": 1, "uid": "u-1"},
		"spec":     map[string]any{"image": "nginx:1.27", "port": 8080, "config": map[string]any{"LOG_LEVEL": "debug", "WORKERS": 4}},
	}
	children := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "shop-config", "namespace": "default"}},
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "shop", "namespace": "default"}},
	}
	out := map[string][]byte{}
	out["new"], _ = json.Marshal(guest.Request{Object: obj, Now: "2026-01-01T00:00:00Z"})
	out["ready"], _ = json.Marshal(guest.Request{Object: obj, Children: children, Now: "2026-01-01T00:00:00Z"})
	return out
}

// instance is one instantiated build of the module.
type instance struct {
	mod              api.Module
	alloc, reconcile api.Function
	ctx              context.Context
	tb               testing.TB
}

func instantiate(tb testing.TB, ctx context.Context, rt wazero.Runtime, wasm []byte, name string) *instance {
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize).WithName(name))
	if err != nil {
		tb.Fatal(err)
	}
	return &instance{mod: mod, alloc: mod.ExportedFunction(abi.ExportAlloc), reconcile: mod.ExportedFunction(abi.ExportReconcile), ctx: ctx, tb: tb}
}

// call runs one reconcile and returns a copy of the response.
func (in *instance) call(req []byte) []byte {
	res, err := in.alloc.Call(in.ctx, uint64(len(req)))
	if err != nil {
		in.tb.Fatal(err)
	}
	in.mod.Memory().Write(uint32(res[0]), req)
	if res, err = in.reconcile.Call(in.ctx, res[0], uint64(len(req))); err != nil {
		in.tb.Fatal(err)
	}
	p := abi.PackedBuffer(res[0])
	out, _ := in.mod.Memory().Read(p.Ptr(), p.Len())
	return bytes.Clone(out)
}

// BenchmarkGuestAgainstBaseline times this module's reconcile compiled to
// wasm, under wazero's compiler, on the requests above. With
// WEBAPP_BASELINE_WASM naming another build of it (the one before a change,
// say), it calls both builds in one process, interleaved call by call,
// checks that they answer the same bytes, and reports the ratio
// current/baseline. Issue 14 measured the typed children (package k8s)
// against the nested maps this way:
//
//	git show <before>:modules/webapp/main.go > /tmp/old/main.go   # in a module of its own
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o /tmp/baseline.wasm ...
//	WEBAPP_BASELINE_WASM=/tmp/baseline.wasm go test -run '^$' -bench GuestAgainstBaseline -benchtime 3000x ./webapp
func BenchmarkGuestAgainstBaseline(b *testing.B) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil).Export(abi.ImportLog).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) { s[0] = 0 }),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}).Export(abi.ImportCacheRead).
		Instantiate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cur := instantiate(b, ctx, rt, buildWasm(b), "current")
	var base *instance
	if path := os.Getenv("WEBAPP_BASELINE_WASM"); path != "" {
		wasm, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		base = instantiate(b, ctx, rt, wasm, "baseline")
	}
	reqs := requests()
	for _, name := range []string{"new", "ready"} {
		req := reqs[name]
		b.Run(name, func(b *testing.B) {
			if base != nil {
				if got, want := cur.call(req), base.call(req); !bytes.Equal(got, want) {
					b.Fatalf("the builds answer differently:\ncurrent  %s\nbaseline %s", got, want)
				}
			}
			var tc, tb time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				cur.call(req)
				mid := time.Now()
				if base != nil {
					base.call(req)
				}
				tc, tb = tc+mid.Sub(start), tb+time.Since(mid)
			}
			b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N)/1e3, "current-us")
			if base != nil {
				b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N)/1e3, "baseline-us")
				b.ReportMetric(float64(tc)/float64(tb), "current/baseline")
			}
		})
	}
}

// buildWasm builds this module for wasip1, as `make modules` does.
func buildWasm(b *testing.B) []byte {
	out := filepath.Join(b.TempDir(), "webapp.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the guest: %v\n%s", err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return wasm
}
