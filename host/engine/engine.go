package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmreconcile/wasmreconcile/guest-sdk/abi"
)

// Options configure an Engine. The zero value is ready to use.
type Options struct {
	// CompilationCacheDir, when set, persists compiled machine code in that
	// directory so that a restart, or a second load of the same bytes, skips
	// compilation. Defaults to "": an in-memory cache shared by the Engine's
	// modules.
	CompilationCacheDir string
}

// Engine compiles and loads guest modules. It is safe for concurrent use.
type Engine struct {
	cache wazero.CompilationCache
}

// New returns an Engine configured by opts.
func New(opts Options) (*Engine, error) {
	var cache wazero.CompilationCache
	if opts.CompilationCacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CompilationCacheDir)
		if err != nil {
			return nil, fmt.Errorf("engine: compilation cache %q: %w; fix the directory or leave it unset", opts.CompilationCacheDir, err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	return &Engine{cache: cache}, nil
}

// Close releases the compilation cache. Modules loaded from the Engine must be
// closed first.
func (e *Engine) Close(ctx context.Context) error { return e.cache.Close(ctx) }

// Load validates and compiles wasm, instantiates it once to read its
// manifest, and returns a Module ready to reconcile. source names the bytes in
// errors until the manifest is known, e.g. a file path.
//
// Load returns an *InvalidModuleError when the bytes are not a usable
// wasmreconcile module: not wasm, an unknown ABI version, a missing export, an
// unknown import, a trap during _initialize, or an invalid manifest. It never
// panics on bad input.
func (e *Engine) Load(ctx context.Context, source string, wasm []byte, limits Limits) (*Module, error) {
	l, err := limits.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("module[%s]: %w", source, err)
	}
	sum := sha256.Sum256(wasm)
	m := &Module{
		name:   source,
		digest: "sha256:" + hex.EncodeToString(sum[:]),
		limits: l,
		size:   len(wasm),
	}
	invalid := func(reason string, err error) error {
		return &InvalidModuleError{Module: source, Reason: reason, Err: err}
	}

	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithMemoryLimitPages(l.MemoryLimitPages).
		WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	ok := false
	defer func() {
		if !ok {
			_ = rt.Close(ctx)
		}
	}()

	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		if strings.Contains(err.Error(), "over limit of") { // wazero checks the memory minimum at compile time
			return nil, invalid(fmt.Sprintf("module's minimum memory is over limits.memoryLimitPages (%d pages); raise the limit", l.MemoryLimitPages), err)
		}
		return nil, invalid("not a valid WebAssembly module", err)
	}
	if err := checkShape(compiled, l); err != nil {
		return nil, invalid(err.Error(), nil)
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("module[%s]: instantiating WASI: %w", source, err)
	}
	if err := instantiateHostModule(ctx, rt); err != nil {
		return nil, fmt.Errorf("module[%s]: instantiating host functions: %w", source, err)
	}
	m.runtime, m.compiled = rt, compiled
	m.pool = newPool(l.MaxInstances, m.newInstance)

	// Instantiate once: this runs _initialize and reads the manifest, and
	// leaves a warm instance in the pool.
	out, err := m.call(ctx, "load", func(ctx context.Context, inst *instance) ([]byte, error) {
		res, err := inst.manifest.Call(ctx)
		if err != nil {
			return nil, err
		}
		return inst.read(abi.PackedBuffer(res[0]), l.MaxResponseBytes)
	})
	if err != nil {
		return nil, invalid("loading failed", err)
	}
	var man abi.Manifest
	if err := json.Unmarshal(out, &man); err != nil {
		return nil, invalid("manifest is not valid JSON", err)
	}
	if err := validateManifest(man); err != nil {
		return nil, invalid("manifest: "+err.Error(), nil)
	}
	m.manifest, m.name = man, man.Name
	ok = true
	return m, nil
}

// checkShape verifies exports and imports before anything runs.
func checkShape(c wazero.CompiledModule, l Limits) error {
	exports := c.ExportedFunctions()
	if _, ok := exports[abi.ExportVersionMarker]; !ok {
		var other []string
		for name := range exports {
			if strings.HasPrefix(name, "wr_abi_") {
				other = append(other, strings.TrimPrefix(name, "wr_abi_"))
			}
		}
		if len(other) > 0 {
			sort.Strings(other)
			return fmt.Errorf("module declares ABI %s, but this host supports only ABI %s; upgrade the operator or rebuild with a matching guest-sdk", strings.Join(other, ","), abi.Version)
		}
		return fmt.Errorf("module does not export %q, so it declares no wasmreconcile ABI version", abi.ExportVersionMarker)
	}
	want := map[string][]api.ValueType{
		abi.ExportInitialize: nil,
		abi.ExportAlloc:      {api.ValueTypeI32},
		abi.ExportManifest:   nil,
		abi.ExportReconcile:  {api.ValueTypeI32, api.ValueTypeI32},
	}
	results := map[string][]api.ValueType{
		abi.ExportInitialize: nil,
		abi.ExportAlloc:      {api.ValueTypeI32},
		abi.ExportManifest:   {api.ValueTypeI64},
		abi.ExportReconcile:  {api.ValueTypeI64},
	}
	for _, name := range []string{abi.ExportInitialize, abi.ExportAlloc, abi.ExportManifest, abi.ExportReconcile} {
		def, ok := exports[name]
		if !ok {
			return fmt.Errorf("missing required export %q", name)
		}
		if !sameTypes(def.ParamTypes(), want[name]) || !sameTypes(def.ResultTypes(), results[name]) {
			return fmt.Errorf("export %q has signature %s -> %s, want %s -> %s", name,
				typeNames(def.ParamTypes()), typeNames(def.ResultTypes()), typeNames(want[name]), typeNames(results[name]))
		}
	}
	mem, ok := c.ExportedMemories()[abi.ExportMemory]
	if !ok {
		return fmt.Errorf("missing required export %q", abi.ExportMemory)
	}
	if mem.Min() > l.MemoryLimitPages {
		return fmt.Errorf("module needs at least %d memory pages, over the limit of %d; raise limits.memory", mem.Min(), l.MemoryLimitPages)
	}
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		switch {
		case mod == wasi_snapshot_preview1.ModuleName:
		case mod == abi.ImportModule && name == abi.ImportLog:
		default:
			return fmt.Errorf("imports unknown function %s.%s; this host provides %s.%s and WASI preview1", mod, name, abi.ImportModule, abi.ImportLog)
		}
	}
	if len(c.ImportedMemories()) > 0 {
		return fmt.Errorf("imports a memory; guests must define and export their own")
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func typeNames(ts []api.ValueType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = api.ValueTypeName(t)
	}
	return "(" + strings.Join(names, ",") + ")"
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func validateManifest(m abi.Manifest) error {
	if !dnsLabel.MatchString(m.Name) {
		return fmt.Errorf("name %q must be a lower-case DNS label (a-z, 0-9, '-', at most 63 characters)", m.Name)
	}
	if m.For.Version == "" || m.For.Kind == "" {
		return fmt.Errorf("for must name a version and kind, got %+v", m.For)
	}
	return nil
}
