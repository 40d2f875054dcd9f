package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/compiledmem"
	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
	"github.com/wasmreconcile/wasmreconcile/host/internal/meter"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
)

// Options configure an Engine. The zero value is ready to use.
type Options struct {
	// CompilationCacheDir, when set, persists compiled machine code in that
	// directory so that a restart, or a load of bytes no open module was
	// loaded from, skips compilation, and the instrumenter's output beside
	// it (in wasmreconcile-rewrites/, keyed by the input's digest, the
	// limits the instrumenter reads and this executable's sha256), so that
	// such a load skips instrumenting and validating too. Whoever can write
	// the directory can change what guests run: keep it private to the
	// operator. Defaults to "": modules loaded from the same bytes share
	// their code in memory, and nothing is persisted.
	CompilationCacheDir string
	// CompilationCacheMaxBytes bounds what the files under the compilation
	// cache directory add up to (CompilationCacheDir, or the one the engine
	// makes for its compile workers): after a module is loaded or loaded
	// back, when they add up to more, the least recently used are removed
	// until they add up to 90% of it. What an unloaded module needs to come
	// back (its bytes and its metered rewrite) and files written or used in
	// the last two minutes stay, so the directory can stay over the bound
	// while they alone fill it (CompilationCachePruned reports it). A module
	// whose compiled code was removed is compiled again when it is next
	// loaded, or loaded back after Limits.IdleModuleTimeout. Only this
	// engine's modules are known to it: do not share a bounded directory
	// with another operator. Defaults to 0: no bound.
	CompilationCacheMaxBytes int64
	// CompilationCachePruned, when set, is called after each check of
	// CompilationCacheMaxBytes with what the directory held and what was
	// removed. It runs on a goroutine of its own; calls do not overlap.
	CompilationCachePruned func(CachePrune)

	// FuelSlice is how much fuel a guest receives per refuel. Between two
	// refuels a guest runs without returning to Go, so the slice bounds how
	// late a deadline is noticed and how long a guest can delay a GC.
	// Defaults to meter.DefaultSlice (see docs/benchmarks.md).
	FuelSlice uint64

	// Interpreter runs guests on wazero's interpreter instead of its
	// optimizing compiler: compilation is about 10x faster, execution much
	// slower. Fuel counts are identical on both.
	// Defaults to false (compiler, where the platform supports it).
	Interpreter bool

	// Ceilings cap the Fuel, Timeout and MemoryLimitPages of every module:
	// a caller's limits or a manifest's over a ceiling are lowered to it
	// (Module.Clamped says which), and a ceiling below a default lowers
	// the default. Its other fields are ignored. Zero fields take
	// DefaultMaxFuel (5,000,000,000), DefaultMaxTimeout (60 s) and
	// DefaultMaxMemoryPages (4096 pages = 256 MiB); see ceilings.go.
	Ceilings Limits

	// IdleReleased, when set, is called with a module's name for each of
	// its instances closed for having served no call for
	// Limits.IdleInstanceTimeout. It runs on a timer's goroutine and must
	// not block. The operator counts these in
	// wasmreconcile_instances_recycled_total{reason="idle"}.
	IdleReleased func(module string)

	// Compile bounds compiling modules: the shapes refused before
	// compiling, and the process compiles run in (see CompileOptions).
	// With a Worker and no CompilationCacheDir, the engine keeps its
	// compiled code in a directory of its own under os.TempDir, removed by
	// Close. Defaults to the zero CompileOptions: shapes over the default
	// complexities are refused, and compiles run in this process.
	Compile CompileOptions

	// ModuleUnloaded, when set, is called with a module's name each time it
	// is unloaded for having served no call for Limits.IdleModuleTimeout,
	// and ModuleReloaded each time a call loads it back, with how long that
	// took and why it failed (nil when it did not). ModuleUnloaded runs on
	// a timer's goroutine, ModuleReloaded on the call's, while the calls
	// that need the module wait: neither may block. The operator counts
	// them in wasmreconcile_module_unloads_total and
	// wasmreconcile_module_wake_seconds.
	ModuleUnloaded func(module string)
	ModuleReloaded func(module string, took time.Duration, err error)

	// MemoryBudget, when set, bounds the memory of the engine's instances
	// and compile workers, with every other engine that shares it (see
	// MemoryBudget). The memory ceiling (Ceilings.MemoryLimitPages) is
	// lowered to the budget. Defaults to nil: no budget.
	MemoryBudget *MemoryBudget

	// CodeInMemory keeps every module's machine code in anonymous memory,
	// as wazero leaves it. Defaults to false: when the engine has a
	// compilation cache directory (CompilationCacheDir, or the one it makes
	// for a compile worker), each module's machine code is written to a
	// file in it (wasmreconcile-code/, named by the code's sha256) and
	// mapped from there, so that only the pages a guest runs are resident
	// and the kernel may drop them under memory pressure, as it does an
	// executable's text (package compiledmem). A module whose code cannot
	// be mapped so (a file system mounted noexec) runs from memory, and
	// CodeMapFailed says why.
	CodeInMemory bool
	// CodeMapFailed, when set, is called with a module's name and the
	// reason each time its machine code could not be backed by a file. It
	// runs on the loading goroutine and must not block.
	CodeMapFailed func(module string, err error)
}

// CachePrune is what one check of Options.CompilationCacheMaxBytes found
// and did.
type CachePrune struct {
	Files   int   // files under the compilation cache directory before the check
	Bytes   int64 // their size
	Removed int   // files removed, least recently used first
	Freed   int64 // their size
	// Over reports that the directory is still over the bound: what is
	// left is pinned by unloaded modules or was used in the last two
	// minutes. Raise the bound.
	Over bool
	Err  error // reading the directory failed; what could be read was pruned
}

// Engine instruments, compiles and loads guest modules. It is safe for
// concurrent use.
type Engine struct {
	cacheDir     string
	fuelSlice    uint64
	interpreter  bool
	ceilings     Limits // Options.Ceilings, defaults filled
	idleReleased func(module string)
	compile      CompileOptions // Options.Compile, defaults filled
	budget       *MemoryBudget
	workers      chan struct{} // a token per compile worker running (CompileWorker.MaxConcurrent)
	tempCacheDir string        // the cache directory the engine made itself, removed by Close
	rewrites     rewriteCache  // the instrumenter's output, beside the compiled code
	originals    originals     // the input of unloadable modules, beside the compiled code
	unloaded     func(module string)
	reloaded     func(module string, took time.Duration, err error)
	codeDir      string // where machine code is backed by files; "" keeps it in memory
	codeFailed   func(module string, err error)
	quota        *dirquota.Quota // Options.CompilationCacheMaxBytes; nil: no bound
	// beforeAttach, in tests, runs between compiling a module through a
	// cache that serves mapped code and attaching that code.
	beforeAttach func(*compiledmem.MappedCode)

	mu             sync.Mutex
	validated      map[string]bool       // digests of input bytes wazero validated
	workerCompiled map[string]bool       // digests of instrumented bytes a worker compiled into the cache
	caches         map[string]*codeCache // by codeKey, while a module uses them
	codeSums       map[string][32]byte   // by codeKey: the sha256 of its machine code, as trim mapped it (at most maxCodeSums)
	pins           map[string]int        // files in the cache directory unloaded modules need, by path: how many modules need each
	closed         bool
}

// maxCodeSums bounds Engine.codeSums; past it the map starts over, and a
// module waking later hashes its code again (compiledmem.MapCode).
const maxCodeSums = 4096

// codeCache is the compilation cache of the modules loaded from one input
// under one instrumentation: the same instrumented bytes, so the same
// compiled code. It is closed with the last module that uses it, which
// frees that code (see Engine.cacheFor).
type codeCache struct {
	cache  wazero.CompilationCache
	mapped *compiledmem.MappedCode // nil without a code directory
	refs   int
}

// maxValidated bounds Engine.validated: about 100 bytes an entry, so at most
// about 400 KB. Past it an arbitrary entry is forgotten, and those bytes are
// validated again if they come back.
const maxValidated = 4096

// New returns an Engine configured by opts.
func New(opts Options) (*Engine, error) {
	ceilings, err := opts.Ceilings.ceilings()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	compile, err := opts.Compile.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if opts.Interpreter {
		compile.Worker = nil // the interpreter's compile is linear in the bytes
	}
	if b := opts.MemoryBudget; b != nil {
		if pages := uint32(min(b.Limit()/pageBytes, maxMemoryPages)); pages < ceilings.MemoryLimitPages {
			ceilings.MemoryLimitPages = pages // no instance larger than the whole budget
		}
		if w := compile.Worker; w != nil && w.MaxMemory > b.Limit() {
			return nil, fmt.Errorf("engine: the compile worker's memory limit %s is over the guest memory budget %s: no compile could ever start; lower --compile-max-memory or raise --memory-budget",
				quantity(w.MaxMemory), quantity(b.Limit()))
		}
	}
	e := &Engine{cacheDir: opts.CompilationCacheDir, fuelSlice: opts.FuelSlice, interpreter: opts.Interpreter, ceilings: ceilings,
		idleReleased: opts.IdleReleased, compile: compile, budget: opts.MemoryBudget, unloaded: opts.ModuleUnloaded, reloaded: opts.ModuleReloaded,
		validated: map[string]bool{}, workerCompiled: map[string]bool{}, caches: map[string]*codeCache{}}
	if compile.Worker != nil {
		e.workers = make(chan struct{}, compile.Worker.MaxConcurrent)
		if e.cacheDir == "" {
			// A worker hands its code over through a compilation cache.
			if e.cacheDir, err = os.MkdirTemp("", "wasmreconcile-compiled-"); err != nil {
				return nil, fmt.Errorf("engine: a directory for the compile workers' code: %w; set a compilation cache directory (--compilation-cache-dir)", err)
			}
			e.tempCacheDir = e.cacheDir
		}
	}
	if e.cacheDir != "" && !opts.Interpreter && !opts.CodeInMemory {
		e.codeDir = filepath.Join(e.cacheDir, codeDir)
	}
	e.codeFailed = opts.CodeMapFailed
	if e.cacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(e.cacheDir) // creates and checks the directory
		if err != nil {
			e.removeTempCache()
			return nil, fmt.Errorf("engine: compilation cache %q: %w; fix the directory or leave it unset", e.cacheDir, err)
		}
		_ = c.Close(context.Background())
		e.rewrites = newRewriteCache(e.cacheDir)
		e.originals = newOriginals(e.cacheDir)
	}
	if opts.CompilationCacheMaxBytes < 0 {
		e.removeTempCache()
		return nil, fmt.Errorf("engine: a compilation cache bound of %d bytes; give a positive one, or 0 for none", opts.CompilationCacheMaxBytes)
	}
	if e.cacheDir != "" && opts.CompilationCacheMaxBytes > 0 {
		pruned := opts.CompilationCachePruned
		e.quota, err = dirquota.New(e.cacheDir, dirquota.Options{MaxBytes: opts.CompilationCacheMaxBytes, Pinned: e.pinned,
			Pruned: func(r dirquota.Result, err error) {
				if pruned != nil {
					pruned(CachePrune{Files: r.Files, Bytes: r.Bytes, Removed: r.Removed, Freed: r.Freed, Over: r.Over, Err: err})
				}
			}})
		if err != nil {
			e.removeTempCache()
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return e, nil
}

// pin keeps the files at paths in a bounded cache directory until the
// returned function is called.
func (e *Engine) pin(paths ...string) (unpin func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pins == nil {
		e.pins = map[string]int{}
	}
	for _, p := range paths {
		e.pins[p]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			for _, p := range paths {
				if e.pins[p]--; e.pins[p] <= 0 {
					delete(e.pins, p)
				}
			}
		})
	}
}

// pinned is dirquota's Options.Pinned.
func (e *Engine) pinned() (map[string]bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]bool, len(e.pins))
	for p := range e.pins {
		out[p] = true
	}
	return out, nil
}

// pruneCache checks the bound on the compilation cache directory in the
// background, after something may have been written to it.
func (e *Engine) pruneCache() {
	if e.quota != nil {
		e.quota.Soon()
	}
}

func (e *Engine) removeTempCache() {
	if e.tempCacheDir != "" {
		_ = os.RemoveAll(e.tempCacheDir)
	}
}

// codeKey names the instrumented bytes of the input with this digest under
// l: the instrumenter is deterministic and reads only these limits.
func codeKey(digest string, l Limits) string {
	return fmt.Sprintf("%s/%d/%d", digest, l.MaxTableElements, l.MaxCallDepth)
}

// cacheFor returns the compilation cache of the modules whose instrumented
// bytes key names, and the function that gives it back, which its module
// calls once when it closes.
//
// The modules of one Engine do not all share one cache, because wazero
// v1.12 never frees code from a cache that stays open: a runtime's Close
// leaves what it compiled in the cache, and although CompiledModule.Close
// removes it, the cache's list of code sorted by address keeps a pointer to
// it in the unused tail of its backing array (the slice is shortened, the
// slot not cleared), so the code, and the decoded module it points to,
// stay reachable. Every version of every module ever loaded would stay
// compiled. One cache per distinct instrumented bytes still shares the code
// of modules loaded from the same bytes, and closing it with the last of
// them drops everything it holds (TestIdenticalBytesShareCode).
//
// With a code directory (Options.CodeInMemory unset), the cache hands wazero
// a module whose machine code trim mapped from a file before without that
// code, and compileCode maps the file instead (compiledmem.MappedCode): a
// module waking from unload neither reads its code into fresh memory nor
// checks it twice.
func (e *Engine) cacheFor(key string) (*codeCache, func(context.Context), error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, nil, errors.New("engine is closed")
	}
	c, ok := e.caches[key]
	if !ok {
		c = &codeCache{}
		if e.cacheDir != "" {
			cache, err := wazero.NewCompilationCacheWithDir(e.cacheDir)
			if err != nil {
				return nil, nil, fmt.Errorf("compilation cache %q: %w", e.cacheDir, err)
			}
			c.cache = cache
			if !e.interpreter {
				// An error leaves the cache as wazero made it: the code is
				// read and mapped over as on the first load, and a worker
				// compiles before every load (compiledmem's tests catch the
				// wazero upgrade that would cause it).
				c.mapped, _ = compiledmem.ServeMappedCode(cache, e.codeDir, func() ([sha256.Size]byte, bool) {
					return e.knownCodeSum(key)
				})
				if c.mapped != nil && e.compile.Worker != nil {
					c.mapped.RequireHits() // compiles run in a worker, never here
				}
			}
		} else {
			c.cache = wazero.NewCompilationCache()
		}
		e.caches[key] = c
	}
	c.refs++
	var once sync.Once
	return c, func(ctx context.Context) {
		once.Do(func() {
			e.mu.Lock()
			c.refs--
			last := c.refs == 0 && e.caches[key] == c
			if last {
				delete(e.caches, key)
			}
			e.mu.Unlock()
			if last {
				_ = c.cache.Close(ctx)
				if c.mapped != nil {
					c.mapped.Close()
				}
			}
		})
	}, nil
}

// instrumentOptions are the instrumenter's options for a module under l.
func (e *Engine) instrumentOptions(l Limits) instrument.Options {
	return instrument.Options{MaxTableElements: l.MaxTableElements, MaxCallDepth: l.MaxCallDepth, FunctionImportsOnly: true,
		MaxFunctionComplexity: e.compile.MaxFunctionComplexity, MaxModuleComplexity: e.compile.MaxModuleComplexity}
}

// instrument returns the metered rewrite of wasm. Nothing of it is kept in
// memory: after compiling, neither the input nor the rewrite is needed
// (wazero decodes what it keeps), and a cache of rewrites would hold
// megabytes per module version for the life of the Engine. With a
// compilation cache directory the rewrite is kept on disk beside the
// compiled code (rewriteCache), so loading the same bytes again reads it
// back; without one they are instrumented again (about 0.1-0.3 s for the
// 3 MB widget guest), and only the digest of bytes that passed wazero's
// validation is remembered, so that they skip it (another 0.2-0.4 s).
//
// wazero validates the input once per digest. With a compile worker the
// worker does it (compileCode), beside the compile, and instrument returns
// the input as unvalidated: decoding untrusted bytes for validation took
// the operator's heap 50 MB up for a 2 MB Go guest (the interpreter's
// lowering), which the worker's limits bound and whose exit returns.
// Until validated, a rewrite is not written to the rewrite cache.
func (e *Engine) instrument(ctx context.Context, digest string, wasm []byte, l Limits) (metered, unvalidated []byte, err error) {
	opts := e.instrumentOptions(l)
	cached := e.rewrites.path(digest, opts)
	if out, ok := e.rewrites.get(cached); ok {
		return out, nil, nil // instrumented and validated when it was written
	}
	// The instrumenter runs first: it refuses malformed bytes in
	// microseconds, some of which take wazero's decoder seconds and
	// gigabytes (a huge LEB count; see docs/metering.md). Then wazero
	// validates the input itself, so that the rewrite, which decodes only
	// what it must change, can never turn an invalid module into a valid
	// one.
	out, err := opts.Instrument(wasm)
	if err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err // a stopping host does not validate what it will not run
	}
	e.mu.Lock()
	valid := e.validated[digest]
	e.mu.Unlock()
	if !valid {
		if e.compile.Worker != nil {
			return out, wasm, nil
		}
		if err := validate(ctx, wasm); err != nil {
			return nil, nil, err
		}
	}
	e.validatedRewrite(digest, l, out)
	return out, nil, nil
}

// validatedRewrite remembers that the input with digest passed wazero's
// validation and keeps its rewrite under l in the rewrite cache.
func (e *Engine) validatedRewrite(digest string, l Limits, metered []byte) {
	e.mu.Lock()
	if !e.validated[digest] {
		if len(e.validated) >= maxValidated {
			for k := range e.validated { // forget one arbitrary entry
				delete(e.validated, k)
				break
			}
		}
		e.validated[digest] = true
	}
	e.mu.Unlock()
	e.rewrites.put(e.rewrites.path(digest, e.instrumentOptions(l)), metered)
}

// coreFeatures are the WebAssembly features guests may use: 2.0 and tail
// calls, which the instrumenter meters (docs/abi.md).
const coreFeatures = api.CoreFeaturesV2 | experimental.CoreFeaturesTailCall

// validationError reports input bytes that wazero does not accept as a
// module, before instrumentation.
type validationError struct{ err error }

func (e *validationError) Error() string { return e.err.Error() }
func (e *validationError) Unwrap() error { return e.err }

// validate decodes and validates wasm with wazero's interpreter, which
// compiles about ten times faster than the optimizing compiler, with the
// features the engine runs guests with.
func validate(ctx context.Context, wasm []byte) error {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithCoreFeatures(coreFeatures))
	defer rt.Close(ctx)
	c, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return &validationError{err: err}
	}
	return c.Close(ctx)
}

// Close releases the compiled code of the modules still open, which must
// not be used afterwards, and refuses further loads. Close the modules
// first.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	caches := e.caches
	e.caches, e.closed = map[string]*codeCache{}, true
	e.mu.Unlock()
	var errs []error
	for _, c := range caches {
		errs = append(errs, c.cache.Close(ctx))
	}
	if e.quota != nil {
		e.quota.Wait()
	}
	e.removeTempCache()
	return errors.Join(errs...)
}

// Load validates and compiles wasm, instantiates it once to read its
// manifest, and returns a Module ready to reconcile. source names the bytes in
// errors until the manifest is known, e.g. a file path.
//
// Load returns an *InvalidModuleError when the bytes are not a usable
// wasmreconcile module: not wasm, an unknown ABI version, a missing export, an
// unknown import, a trap during _initialize, or an invalid manifest. It never
// panics on bad input.
func (e *Engine) Load(ctx context.Context, source string, wasm []byte, limits Limits) (*Module, error) {
	// Failed loads too: bytes refused after compiling wrote to the cache.
	defer e.pruneCache()
	m, err := e.loadWithManifest(ctx, source, wasm, limits)
	if err != nil {
		return nil, err
	}
	e.unloadable(m, wasm)
	return m, nil
}

// loadWithManifest is Load but for making the module unloadable.
func (e *Engine) loadWithManifest(ctx context.Context, source string, wasm []byte, limits Limits) (*Module, error) {
	// The ceilings hold the caller's limits (flags, spec) before anything
	// runs, and the manifest's below (ceilings.go).
	limits, clamped := e.ceilings.clamp(limits, false)
	m, metered, err := e.load(ctx, source, wasm, nil, limits)
	if err != nil {
		return nil, err
	}
	// The manifest may lower what the caller allows, never raise it.
	merged, more, err := e.mergeManifestLimits(limits, m.manifest.Limits)
	if err != nil {
		_ = m.Close(ctx)
		return nil, &InvalidModuleError{Module: m.name, Reason: "manifest: " + err.Error()}
	}
	clamped = append(clamped, more...)
	merged = e.ceilings.lowerDefaults(merged)
	m.clamped = clamped
	if merged == limits {
		return m, nil
	}
	final, err := merged.withDefaults()
	if err != nil {
		_ = m.Close(ctx)
		return nil, &InvalidModuleError{Module: m.name, Reason: "manifest limits: " + err.Error()}
	}
	if final.MemoryLimitPages == m.limits.MemoryLimitPages {
		m.limits = final // per-call limits change in place
		return m, nil
	}
	// A memory cap is fixed when the runtime is built: build it again, from
	// the same instrumented bytes (the manifest changes no limit the
	// instrumenter reads), before closing the first, so that the compiled
	// code is shared, not compiled again (wazero's cache keeps code only
	// while a module compiled from it is open).
	second, _, err := e.load(ctx, source, wasm, metered, merged)
	_ = m.Close(ctx)
	if err != nil {
		return nil, err
	}
	second.clamped = clamped
	return second, nil
}

// mergeManifestLimits applies the manifest's limits to l, the caller's
// limits held to the ceilings: a manifest may ask for less fuel, time or
// memory than the caller allows, never more. What the caller allows is its
// own value, or, where it set none, the default (lowered by the ceilings).
// A manifest's value over it is lowered to it, and reported as a Clamp.
func (e *Engine) mergeManifestLimits(l Limits, ml *abi.ManifestLimits) (Limits, []Clamp, error) {
	if ml == nil {
		return l, nil, nil
	}
	if ml.TimeoutMillis < 0 {
		return l, nil, fmt.Errorf("limits.timeoutMillis %d must not be negative", ml.TimeoutMillis)
	}
	if ml.MemoryPages > 65536 {
		return l, nil, fmt.Errorf("limits.memoryPages %d exceeds the wasm32 maximum of 65536", ml.MemoryPages)
	}
	allowed := e.ceilings.lowerDefaults(l)
	if allowed.Fuel == 0 {
		allowed.Fuel = DefaultFuel
	}
	if allowed.Timeout == 0 {
		allowed.Timeout = DefaultTimeout
	}
	if allowed.MemoryLimitPages == 0 {
		allowed.MemoryLimitPages = DefaultMemoryLimitPages
	}
	var clamps []Clamp
	if ml.Fuel != 0 {
		l.Fuel = ml.Fuel
		if ml.Fuel > allowed.Fuel {
			l.Fuel = allowed.Fuel
			clamps = append(clamps, Clamp{Limit: "fuel", Manifest: true, Allowance: true, Requested: ml.Fuel, Ceiling: allowed.Fuel, Flag: "spec.limits.fuel, --fuel"})
		}
	}
	if ml.TimeoutMillis != 0 {
		want := time.Duration(ml.TimeoutMillis) * time.Millisecond
		l.Timeout = want
		if want > allowed.Timeout {
			l.Timeout = allowed.Timeout
			clamps = append(clamps, Clamp{Limit: "timeout", Manifest: true, Allowance: true, Requested: uint64(want), Ceiling: uint64(allowed.Timeout), Flag: "spec.limits.timeout, --timeout"})
		}
	}
	if ml.MemoryPages != 0 {
		l.MemoryLimitPages = ml.MemoryPages
		if ml.MemoryPages > allowed.MemoryLimitPages {
			l.MemoryLimitPages = allowed.MemoryLimitPages
			clamps = append(clamps, Clamp{Limit: "memory", Manifest: true, Allowance: true, Requested: uint64(ml.MemoryPages), Ceiling: uint64(allowed.MemoryLimitPages), Flag: "spec.limits.memoryPages, --memory-limit-pages"})
		}
	}
	return l, clamps, nil
}

// load builds a Module from wasm, instrumented under limits unless metered,
// the rewrite of a previous load with the same MaxTableElements and
// MaxCallDepth, is given. It returns the instrumented bytes, which the
// Module does not keep.
func (e *Engine) load(ctx context.Context, source string, wasm, metered []byte, limits Limits) (*Module, []byte, error) {
	l, err := limits.withDefaults()
	if err != nil {
		return nil, nil, fmt.Errorf("module[%s]: %w", source, err)
	}
	sum := sha256.Sum256(wasm)
	m := &Module{
		name:      source,
		digest:    "sha256:" + hex.EncodeToString(sum[:]),
		limits:    l,
		size:      len(wasm),
		fuelSlice: e.fuelSlice,
	}
	invalid := func(reason string, err error) error {
		return &InvalidModuleError{Module: source, Reason: reason, Err: err}
	}

	var unvalidated []byte
	if metered == nil {
		metered, unvalidated, err = e.instrument(ctx, m.digest, wasm, l)
	}
	if err != nil && ctx.Err() != nil {
		return nil, nil, fmt.Errorf("module[%s]: loading stopped: %w", source, ctx.Err())
	}
	if err != nil {
		var (
			unsupported *instrument.UnsupportedError
			imp         *instrument.ImportError
			limit       *instrument.LimitError
			complexity  *instrument.ComplexityError
		)
		switch {
		case errors.As(err, &complexity):
			flag := "--max-function-complexity"
			if complexity.Function < 0 {
				flag = "--max-module-complexity"
			}
			return nil, nil, &InvalidModuleError{Module: source, Reason: "refused before compiling: " + complexity.Error(),
				Hint: "compiling such code takes an optimizing compiler seconds to minutes and gigabytes (docs/metering.md, \"Compile bombs\"); split the function, or raise " + flag}
		case errors.As(err, &imp):
			return nil, nil, invalid(imp.Error(), nil)
		case errors.As(err, &limit):
			return nil, nil, invalid(limit.Error(), nil)
		case errors.As(err, &unsupported):
			return nil, nil, invalid("cannot be metered", err)
		}
		return nil, nil, invalid("not a valid WebAssembly module", err)
	}

	c, err := e.compileCode(ctx, source, m.digest, metered, unvalidated, l)
	if err != nil {
		return nil, nil, err
	}
	m.code = c
	ok := false
	defer func() {
		if !ok {
			_ = m.Close(ctx)
		}
	}()
	m.budget = e.budget
	m.pool = newPool(l.MaxInstances, m.newInstance, e.budget)

	// Instantiate once: this runs _initialize and reads the manifest, and
	// leaves a warm instance in the pool.
	// Reading the manifest is part of loading: it runs on the InitFuel budget.
	res, err := m.call(ctx, "load", l.InitFuel, l.InitTimeout, false, func(ctx context.Context, inst *instance) ([]byte, error) {
		res, err := inst.manifest.Call(ctx)
		if err != nil {
			return nil, err
		}
		return inst.read(abi.PackedBuffer(res[0]), l.MaxResponseBytes)
	})
	if err != nil {
		return nil, nil, invalid("loading failed", err)
	}
	var man abi.Manifest
	if err := json.Unmarshal(res.Output, &man); err != nil {
		return nil, nil, invalid("manifest is not valid JSON", err)
	}
	if err := validateManifest(man); err != nil {
		return nil, nil, &InvalidModuleError{Module: source, Reason: "manifest: " + err.Error(), Hint: "fix the module's manifest (docs/abi.md, \"Manifest\")"}
	}
	m.manifest, m.name = man, man.Name
	// From here on the instance left by the load is closed when idle too:
	// a module with no traffic holds no instance.
	m.pool.startReaping(l.IdleInstanceTimeout, l.IdleSpareTimeout, func(n int) {
		if e.idleReleased != nil {
			for range n {
				e.idleReleased(m.name)
			}
		}
	})
	ok = true
	return m, metered, nil
}

// compileCode compiles metered, the rewrite of the input with digest under
// l, into a runtime of its own with the host modules, and checks its shape
// and imports: the code a Module's instances run. unvalidated is the input
// when wazero has yet to validate it, which instrument leaves only to a
// compile worker: the worker validates it first. Loading a module back after it was unloaded calls it too
// (unload.go).
func (e *Engine) compileCode(ctx context.Context, source, digest string, metered, unvalidated []byte, l Limits) (*code, error) {
	invalid := func(reason string, err error) error {
		return &InvalidModuleError{Module: source, Reason: reason, Err: err}
	}
	cache, release, err := e.cacheFor(codeKey(digest, l))
	if err != nil {
		return nil, fmt.Errorf("module[%s]: %w", source, err)
	}
	// The worker validates the input, if asked, and compiles into the
	// cache; the compile below reads it. Validated bytes whose code may be
	// in the cache already (put there by a worker of this process or of
	// one before a restart) are first compiled from it: a cache that
	// requires hits fails a miss with ErrNotCached instead of compiling
	// here, and only then does a worker run.
	worker := e.compile.Worker != nil
	fromCache := worker && unvalidated == nil && cache.mapped != nil
	runWorker := func(force bool) error {
		if force {
			e.forgetWorkerCompiled(metered)
		}
		if err := e.compileInWorker(ctx, metered, unvalidated); err != nil {
			var limitErr *CompileLimitError
			var failed *workerFailedError
			switch {
			case ctx.Err() != nil:
				return fmt.Errorf("module[%s]: loading stopped: %w", source, ctx.Err())
			case errors.As(err, &limitErr):
				return &InvalidModuleError{Module: source, Reason: "compile stopped", Err: limitErr,
					Hint: "its code is too costly to compile (docs/metering.md, \"Compile bombs\"); simplify the module, or raise the limit"}
			case errors.As(err, &failed):
				return fmt.Errorf("module[%s]: %w; check the compile worker (--compile-in-process runs compiles in the operator instead)", source, err)
			}
			return invalid("not a valid WebAssembly module", err)
		}
		if unvalidated != nil {
			e.validatedRewrite(digest, l, metered)
		}
		return nil
	}
	if worker && !fromCache {
		if err := runWorker(false); err != nil {
			release(ctx)
			return nil, err
		}
	}
	// No WithCloseOnContextDone: the fuel meter stops calls at their
	// deadline. compilerConfig is the compile worker's too.
	cfg := compilerConfig(e.interpreter).
		WithCompilationCache(cache.cache).
		WithMemoryLimitPages(l.MemoryLimitPages)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	var compiled wazero.CompiledModule
	ok := false
	defer func() {
		if !ok {
			_ = rt.Close(ctx)
			if compiled != nil {
				_ = compiled.Close(ctx) // see code.close
			}
			release(ctx)
		}
	}()

	compiled, err = rt.CompileModule(ctx, metered)
	if fromCache && errors.Is(err, compiledmem.ErrNotCached) {
		if err := runWorker(true); err != nil {
			return nil, err // the deferred cleanup releases the cache
		}
		compiled, err = rt.CompileModule(ctx, metered)
	}
	mapped := false
	if err == nil && cache.mapped != nil {
		if e.beforeAttach != nil {
			e.beforeAttach(cache.mapped)
		}
		var attachErr error
		if mapped, attachErr = cache.mapped.Attach(compiled); attachErr != nil {
			// Left without code: never instantiate it. Compile again, with
			// the code read from wazero's entry.
			_ = compiled.Close(ctx)
			cache.mapped.Disable()
			compiled, err = rt.CompileModule(ctx, metered)
		}
	}
	if err != nil {
		if strings.Contains(err.Error(), "over limit of") { // wazero checks the memory minimum at compile time
			return nil, invalid(fmt.Sprintf("module's minimum memory is over the limit of %d pages; raise spec.limits.memoryPages (--memory-limit-pages)", l.MemoryLimitPages), err)
		}
		return nil, invalid("not a valid WebAssembly module", err)
	}
	// Every WASI function is charged (cost.go) through a listener on the
	// WASI host module only; guest functions carry none.
	if _, err := wasi_snapshot_preview1.Instantiate(experimental.WithFunctionListenerFactory(ctx, wasiMeter{}), rt); err != nil {
		return nil, fmt.Errorf("module[%s]: instantiating WASI: %w", source, err)
	}
	if err := instantiateHostModule(ctx, rt); err != nil {
		return nil, fmt.Errorf("module[%s]: instantiating host functions: %w", source, err)
	}
	if err := meter.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("module[%s]: instantiating the fuel meter: %w", source, err)
	}
	if err := checkShape(compiled, l); err != nil {
		var h *hintedError
		if errors.As(err, &h) {
			return nil, &InvalidModuleError{Module: source, Reason: h.reason, Hint: h.hint}
		}
		return nil, invalid(err.Error(), nil)
	}
	if err := checkImports(rt, compiled); err != nil {
		return nil, invalid(err.Error(), nil)
	}
	e.trim(source, codeKey(digest, l), compiled, mapped)
	ok = true
	return &code{runtime: rt, compiled: compiled, release: release}, nil
}

// codeDir is the directory, in the compilation cache directory, of the
// files that back modules' machine code (Options.CodeInMemory), and of the
// small files that name the code of each module (codeSumPath).
const codeDir = "wasmreconcile-code"

// trim lets go of what a compiled module keeps and no instance needs: its
// decoded function bodies, which only compiling reads, and, unless
// Options.CodeInMemory, the anonymous copy of its machine code, which it
// maps from a file instead (package compiledmem). Neither changes what a
// guest runs; a failure leaves the module as wazero made it.
//
// key is the code's cache key (codeKey): the digest of its machine code is
// remembered under it, so that a module waking from unload maps its code
// without hashing it again (7 ms of a Go guest's wake). mapped says its code
// is mapped from that file already (compiledmem.MappedCode.Attach).
func (e *Engine) trim(source, key string, compiled wazero.CompiledModule, mapped bool) {
	if e.interpreter {
		return
	}
	_, _ = compiledmem.ReleaseBodies(compiled) // fails only with another engine or wazero version; compiledmem's tests catch that
	if e.codeDir == "" || mapped {
		return
	}
	known, _ := e.knownCodeSum(key)
	_, sum, err := compiledmem.MapCode(compiled, e.codeDir, known)
	if err != nil {
		if !errors.Is(err, compiledmem.ErrShared) && e.codeFailed != nil {
			e.codeFailed(source, err)
		}
		return
	}
	e.rememberCodeSum(key, sum, sum != known)
}

// knownCodeSum returns the sha256 of the machine code of the module key
// names, as trim mapped it in this process or, remembered in the code
// directory, before a restart; false when it is not known (or there is no
// code directory). A wrong one costs no more than an unknown one: the
// compilation cache checks the file it names against its own entry
// (compiledmem.MappedCode), and MapCode compares it with the code.
func (e *Engine) knownCodeSum(key string) ([sha256.Size]byte, bool) {
	if e.codeDir == "" {
		return [sha256.Size]byte{}, false
	}
	e.mu.Lock()
	sum, ok := e.codeSums[key]
	e.mu.Unlock()
	if ok {
		return sum, true
	}
	path := e.codeSumPath(key)
	if path == "" {
		return sum, false
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) != hex.EncodedLen(sha256.Size) {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], b); err != nil {
		return [sha256.Size]byte{}, false
	}
	e.rememberCodeSum(key, sum, false)
	return sum, true
}

// rememberCodeSum remembers the digest of the machine code of the module
// key names, and with persist writes it to the code directory too, so that
// a restarted operator maps the code from its file at once.
func (e *Engine) rememberCodeSum(key string, sum [sha256.Size]byte, persist bool) {
	e.mu.Lock()
	if e.codeSums == nil || len(e.codeSums) >= maxCodeSums {
		e.codeSums = map[string][32]byte{}
	}
	e.codeSums[key] = sum
	e.mu.Unlock()
	if path := e.codeSumPath(key); persist && path != "" {
		_ = atomicfile.Write(path, []byte(hex.EncodeToString(sum[:]))) // best effort: without it a restart hashes the code once
	}
}

// codeSumPath is the file in the code directory that remembers the digest
// of the machine code of the module key names, for this executable (whose
// wazero and instrumenter made it), or "" when nothing is remembered.
func (e *Engine) codeSumPath(key string) string {
	exe := executableDigest()
	if e.codeDir == "" || exe == "" {
		return ""
	}
	name := sha256.Sum256([]byte(key + "\x00" + exe))
	return filepath.Join(e.codeDir, hex.EncodeToString(name[:])+".sum")
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
	if def := exports[abi.ExportVersionMarker]; len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 0 {
		return fmt.Errorf("export %q has signature %s -> %s, want () -> (): it is a marker and is never called",
			abi.ExportVersionMarker, typeNames(def.ParamTypes()), typeNames(def.ResultTypes()))
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
	if _, ok := exports[abi.ExportInitialize]; !ok {
		if _, ok := exports["_start"]; ok {
			return &hintedError{
				reason: `module exports _start but not _initialize: it was built as a WASI command, and the host needs a reactor`,
				hint:   `build it as a reactor: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared (for C: clang -mexec-model=reactor); see docs/abi.md, "Module shape"`,
			}
		}
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
		return fmt.Errorf("module needs at least %d memory pages, over the limit of %d; raise spec.limits.memoryPages (--memory-limit-pages)", mem.Min(), l.MemoryLimitPages)
	}
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		switch {
		case mod == wasi_snapshot_preview1.ModuleName:
		case mod == abi.ImportModule && (name == abi.ImportLog || name == abi.ImportCacheRead):
		case mod == instrument.ImportModule && name == instrument.ImportRefuel: // added by the instrumenter
		default:
			return fmt.Errorf("imports unknown function %s.%s; this host provides %s.%s, %s.%s and WASI preview1", mod, name, abi.ImportModule, abi.ImportLog, abi.ImportModule, abi.ImportCacheRead)
		}
	}
	if len(c.ImportedMemories()) > 0 {
		return fmt.Errorf("imports a memory; guests must define and export their own")
	}
	return nil
}

// hintedError is a reason to refuse a module that calls for another remedy
// than rebuilding it against guest-sdk.
type hintedError struct{ reason, hint string }

func (e *hintedError) Error() string { return e.reason + "; " + e.hint }

// checkImports checks every function import against the signature of the
// host function it names, so that a mismatch is refused at load with the
// import's name instead of failing to link at instantiation. Unknown imports
// were refused by checkShape.
func checkImports(rt wazero.Runtime, c wazero.CompiledModule) error {
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		host := rt.Module(mod)
		if host == nil {
			return fmt.Errorf("imports %s.%s from a module this host does not provide", mod, name)
		}
		def, ok := host.ExportedFunctionDefinitions()[name]
		if !ok {
			return fmt.Errorf("imports unknown function %s.%s; see docs/abi.md for the host functions and WASI preview1 for the rest", mod, name)
		}
		if !sameTypes(def.ParamTypes(), imp.ParamTypes()) || !sameTypes(def.ResultTypes(), imp.ResultTypes()) {
			return fmt.Errorf("imports %s.%s with signature %s -> %s, but the host's is %s -> %s", mod, name,
				typeNames(imp.ParamTypes()), typeNames(imp.ResultTypes()), typeNames(def.ParamTypes()), typeNames(def.ResultTypes()))
		}
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
	for _, list := range []struct {
		field string
		gvks  []abi.GroupVersionKind
	}{{"owns", m.Owns}, {"reads", m.Reads}} {
		for i, g := range list.gvks {
			if g.Version == "" || g.Kind == "" {
				return fmt.Errorf("%s[%d] must name a version and kind, got %+v", list.field, i, g)
			}
		}
	}
	if err := validateTriggers(m); err != nil {
		return err
	}
	for i, g := range m.Owns {
		if g.Group == m.For.Group && g.Kind == m.For.Kind {
			return fmt.Errorf("owns[%d] is the reconciled kind %s itself: a module cannot own objects of the kind it reconciles (its children would be reconciled as owners, and pruning one would delete an owner); remove it from owns", i, g.Kind)
		}
	}
	return nil
}

// validateTriggers checks that every trigger names a read kind and sets
// exactly one mapping, with a well-formed path.
func validateTriggers(m abi.Manifest) error {
	for i, t := range m.Triggers {
		read := false
		for _, g := range m.Reads {
			read = read || g == t.Kind
		}
		if t.Kind.Group == m.For.Group && t.Kind.Kind == m.For.Kind {
			return fmt.Errorf("triggers[%d].kind is the reconciled kind %s itself: a change to an object already reconciles it, and a trigger would make every change reconcile others of its kind; remove the trigger", i, t.Kind.Kind)
		}
		if !read {
			return fmt.Errorf("triggers[%d].kind %s/%s %s is not in reads; a trigger maps a change to an object the module reads: add the kind to reads", i, t.Kind.Group, t.Kind.Version, t.Kind.Kind)
		}
		set := 0
		for _, b := range []bool{t.OwnerReference, t.Field != "", t.Selector != "", t.All} {
			if b {
				set++
			}
		}
		if set != 1 {
			return fmt.Errorf("triggers[%d] (kind %s) sets %d of ownerReference, field, selector and all; set exactly one", i, t.Kind.Kind, set)
		}
		for _, p := range []struct{ name, path string }{{"field", t.Field}, {"selector", t.Selector}} {
			if p.path == "" {
				continue
			}
			for _, part := range strings.Split(p.path, ".") {
				if part == "" {
					return fmt.Errorf("triggers[%d].%s %q is not a dot-separated path such as spec.target: it has an empty segment", i, p.name, p.path)
				}
			}
		}
	}
	return nil
}
