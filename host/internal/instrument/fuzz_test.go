package instrument_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// FuzzInstrument checks, for any bytes that wazero accepts as a module, that
// the instrumented module also validates and behaves the same: instantiation
// succeeds or fails alike, and every exported function without parameters
// returns the same results or fails alike.
//
// The seed corpus (every 7th module of the spec suite, plus the engine's test
// guests) runs in `go test`; `make fuzz` explores further.
func FuzzInstrument(f *testing.F) {
	root := testwasm.SpecRoot(f)
	for _, dir := range []string{"v1", "v2"} {
		matches, _ := filepath.Glob(filepath.Join(root, dir, "testdata", "*.wasm"))
		sort.Strings(matches)
		for i, path := range matches {
			if i%7 != 0 {
				continue
			}
			if b, err := os.ReadFile(path); err == nil {
				f.Add(b)
			}
		}
	}
	guests, _ := filepath.Glob(filepath.Join("..", "..", "engine", "testdata", "*.wasm"))
	for _, path := range guests {
		if b, err := os.ReadFile(path); err == nil {
			f.Add(b)
		}
	}

	ctx := context.Background()
	f.Fuzz(func(t *testing.T, wasm []byte) {
		plain := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(256))
		defer plain.Close(ctx)
		if _, err := plain.CompileModule(ctx, wasm); err != nil {
			return // not a module wazero accepts: nothing to compare
		}
		out, err := instrument.Instrument(wasm)
		if err != nil {
			var unsupported *instrument.UnsupportedError
			if errors.As(err, &unsupported) {
				return
			}
			t.Fatalf("Instrument refused a module wazero accepts: %v", err)
		}
		metered := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(256))
		defer metered.Close(ctx)
		if err := meter.Instantiate(ctx, metered); err != nil {
			t.Fatal(err)
		}
		if _, err := metered.CompileModule(ctx, out); err != nil {
			t.Fatalf("instrumented module does not validate: %v", err)
		}

		budget := func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			return meter.WithMeter(c, &meter.Meter{Budget: 1 << 40}), cancel
		}
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer pcancel()
		pm, perr := plain.InstantiateWithConfig(pctx, wasm, wazero.NewModuleConfig())
		mctx, mcancel := budget()
		defer mcancel()
		mm, merr := metered.InstantiateWithConfig(mctx, out, wazero.NewModuleConfig())
		if pctx.Err() != nil || mctx.Err() != nil {
			return // a start function ran too long to compare
		}
		if (perr == nil) != (merr == nil) {
			t.Fatalf("instantiation differs: plain %v, instrumented %v", perr, merr)
		}
		if perr != nil {
			return
		}

		names := make([]string, 0)
		for name, def := range pm.ExportedFunctionDefinitions() {
			if len(def.ParamTypes()) == 0 {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		for _, name := range names {
			pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			pres, perr := pm.ExportedFunction(name).Call(pctx)
			timedOut := pctx.Err() != nil
			pcancel()
			mctx, mcancel := budget()
			fn := mm.ExportedFunction(name)
			meter.FromContext(mctx).Start(mm)
			mres, merr := fn.Call(mctx)
			timedOut = timedOut || mctx.Err() != nil
			mcancel()
			if timedOut {
				return // one side ran out of time: state may now differ
			}
			if (perr == nil) != (merr == nil) {
				t.Fatalf("%s: plain error %v, instrumented error %v", name, perr, merr)
			}
			if !sameResults(fn.Definition().ResultTypes(), pres, mres) {
				t.Fatalf("%s: plain %v, instrumented %v", name, pres, mres)
			}
		}
	})
}

// sameResults compares raw results, treating any two NaNs of a float type as
// equal (NaN payloads are not specified to be preserved).
func sameResults(types []api.ValueType, a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		if i < len(types) {
			switch types[i] {
			case api.ValueTypeF32:
				if math.IsNaN(float64(math.Float32frombits(uint32(a[i])))) && math.IsNaN(float64(math.Float32frombits(uint32(b[i])))) {
					continue
				}
			case api.ValueTypeF64:
				if math.IsNaN(math.Float64frombits(a[i])) && math.IsNaN(math.Float64frombits(b[i])) {
					continue
				}
			}
		}
		return false
	}
	return true
}
