package compiledmem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/leb128"
	"github.com/tetratelabs/wabin/wasm"
	"github.com/tetratelabs/wazero"
)

const (
	functions = 6000 // in the test module, each exported as f<i>
	steps     = 60   // of arithmetic in each function
)

// testModule is a module of functions f<i>(x i32) -> i32 whose machine code
// spans many pages, each computing want(i, x).
func testModule() []byte {
	m := &wasm.Module{TypeSection: []*wasm.FunctionType{{Params: []wasm.ValueType{wasm.ValueTypeI32}, Results: []wasm.ValueType{wasm.ValueTypeI32}}}}
	for i := range functions {
		body := []byte{wasm.OpcodeLocalGet, 0}
		for s := range steps {
			body = append(body, wasm.OpcodeI32Const)
			body = append(body, leb128.EncodeInt32(int32(i*steps+s))...)
			body = append(body, wasm.OpcodeI32Add, wasm.OpcodeI32Const)
			body = append(body, leb128.EncodeInt32(int32(s%7+2))...)
			body = append(body, wasm.OpcodeI32Mul)
		}
		body = append(body, wasm.OpcodeEnd)
		m.FunctionSection = append(m.FunctionSection, 0)
		m.CodeSection = append(m.CodeSection, &wasm.Code{Body: body})
		m.ExportSection = append(m.ExportSection, &wasm.Export{Type: wasm.ExternTypeFunc, Name: fmt.Sprint("f", i), Index: uint32(i)})
	}
	return binary.EncodeModule(m)
}

// want is what f<i>(x) returns.
func want(i int, x uint32) uint32 {
	for s := range steps {
		x = (x + uint32(int32(i*steps+s))) * uint32(s%7+2)
	}
	return x
}

// compile compiles wasm with cfg, and closes the runtime with the test.
func compile(t *testing.T, cfg wazero.RuntimeConfig, wasm []byte) (wazero.Runtime, wazero.CompiledModule) {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	c, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	return rt, c
}

// calls instantiates c and checks what the functions named return.
func calls(t *testing.T, rt wazero.Runtime, c wazero.CompiledModule, fns ...int) {
	t.Helper()
	ctx := context.Background()
	mod, err := rt.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	for _, i := range fns {
		res, err := mod.ExportedFunction(fmt.Sprint("f", i)).Call(ctx, 12345)
		if err != nil {
			t.Fatalf("f%d: %v", i, err)
		}
		if got := uint32(res[0]); got != want(i, 12345) {
			t.Fatalf("f%d(12345) = %d, want %d", i, got, want(i, 12345))
		}
	}
}

var wasmBytes = testModule()

// seedDir is a wazero compilation cache directory holding wasmBytes
// compiled once for the package: compiling its 6,000 functions takes
// seconds under -race, and the tests are about what happens to the code
// after a compile, which a load from wazero's cache gives them as a
// compile does (the operator loads its modules that way).
var seedDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "compiledmem-seed-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	seedDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		ctx := context.Background()
		cache, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
		_, err = rt.CompileModule(ctx, wasmBytes)
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// seedCache copies the package's one compile of wasmBytes into the
// compilation cache directory dir, so that compiling wasmBytes through a
// cache in dir loads it instead.
func seedCache(t *testing.T, dir string) {
	t.Helper()
	if err := os.CopyFS(dir, os.DirFS(seedDir)); err != nil {
		t.Fatalf("seeding the compilation cache %s: %v", dir, err)
	}
}

// compiler is the optimizing compiler with a compilation cache of its own,
// seeded with wasmBytes: each call's runtime loads the code into memory of
// its own, as a compile would, and shares it with no other runtime.
func compiler(t *testing.T) wazero.RuntimeConfig {
	t.Helper()
	dir := t.TempDir()
	seedCache(t, dir)
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close(context.Background()) })
	return wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache)
}

// TestReleaseBodies: the bodies are freed (their bytes counted), and
// instances made afterwards run every function right.
func TestReleaseBodies(t *testing.T) {
	rt, c := compile(t, compiler(t), wasmBytes)
	freed, err := ReleaseBodies(c)
	if err != nil {
		t.Fatal(err)
	}
	if min := functions * steps * 6; freed < min {
		t.Errorf("freed %d bytes of bodies, want at least %d", freed, min)
	}
	again, err := ReleaseBodies(c)
	if err != nil || again != 0 {
		t.Errorf("a second release freed %d bytes (%v), want 0", again, err)
	}
	calls(t, rt, c, 0, functions/2, functions-1)
	calls(t, rt, c, 1) // a second instance
}

// TestInterpreterRefused: the interpreter's modules are left whole, with an
// error that says why.
func TestInterpreterRefused(t *testing.T) {
	rt, c := compile(t, wazero.NewRuntimeConfigInterpreter(), wasmBytes)
	if _, err := ReleaseBodies(c); err == nil || !strings.Contains(err.Error(), "optimizing compiler") {
		t.Fatalf("ReleaseBodies on the interpreter: %v, want a refusal naming the compiler", err)
	}
	if _, _, err := MapCode(c, t.TempDir(), [32]byte{}); err == nil || !strings.Contains(err.Error(), "optimizing compiler") {
		t.Fatalf("MapCode on the interpreter: %v, want a refusal naming the compiler", err)
	}
	calls(t, rt, c, 0, functions-1)
}

// mapping is the line of /proc/self/maps and the resident size of the
// mapping of path, or false when path is not mapped.
func mapping(t *testing.T, path string) (header string, rss int, ok bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4:
			if ok { // the next mapping
				return header, rss, true
			}
			if len(f) == 6 && f[5] == path {
				header, ok = line, true
			}
		case ok && len(f) == 3 && f[0] == "Rss:":
			kb, _ := strconv.Atoi(f[1])
			rss = kb << 10
		}
	}
	return header, rss, ok
}

// TestMapCode: the code is written to a file named by its digest and mapped
// from it read-only and executable; only the pages that ran are resident;
// every function still returns the right value.
func TestMapCode(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	dir := filepath.Join(t.TempDir(), "code")
	rt, c := compile(t, compiler(t), wasmBytes)
	n, mapped, err := MapCode(c, dir, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the code directory holds %v (%v), want one file", entries, err)
	}
	path := filepath.Join(dir, entries[0].Name())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if len(b) != n || entries[0].Name() != hex.EncodeToString(sum[:])+".code" || mapped != sum {
		t.Fatalf("file %s of %d bytes, MapCode said %d: want the code's digest as its name", entries[0].Name(), len(b), n)
	}
	calls(t, rt, c, 0) // one function runs: a page or a few are read
	header, rss, ok := mapping(t, path)
	if !ok {
		t.Fatalf("%s is not mapped", path)
	}
	if perms := strings.Fields(header)[1]; perms != "r-xp" {
		t.Errorf("%s is mapped %s, want r-xp", path, perms)
	}
	if rss >= n/2 {
		t.Errorf("%d of the code's %d bytes are resident after one function ran, want under half", rss, n)
	}
	t.Logf("%d bytes of code, %d resident after one call", n, rss)
	calls(t, rt, c, functions-1, functions/3, 7) // and every page still runs
}

// TestMapCodeRewritesAWrongFile: a file under the code's name with other
// bytes (a crash's leftovers, a tampered cache) is replaced, and what is
// mapped is the code.
func TestMapCodeRewritesAWrongFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	dir := t.TempDir()
	rt, c := compile(t, compiler(t), wasmBytes)
	// Find the code's name by mapping another compile of it first.
	_, first := compile(t, compiler(t), wasmBytes)
	if _, _, err := MapCode(first, dir, [32]byte{}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	path := filepath.Join(dir, entries[0].Name())
	b, _ := os.ReadFile(path)
	for i := range b {
		b[i] = 0xcc // int3: a mapping of these would trap
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := MapCode(c, dir, [32]byte{}); err != nil {
		t.Fatal(err)
	}
	calls(t, rt, c, 0, functions-1)
}

// TestMapCodeKnownDigest: given the digest an earlier MapCode returned
// for the same code, MapCode maps the file without hashing the code again;
// given a wrong one, it hashes, maps the right file and returns the right
// digest; a file under the known name with other bytes is replaced.
func TestMapCodeKnownDigest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	dir := t.TempDir()
	// Every compile loads the code from a compilation cache directory,
	// each into a runtime and engine of its own, so that no two share code
	// (as a waking module's does not).
	cacheDir := t.TempDir()
	seedCache(t, cacheDir)
	cfg := func() wazero.RuntimeConfig {
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cache.Close(context.Background()) })
		return wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache)
	}
	_, first := compile(t, cfg(), wasmBytes)
	_, sum, err := MapCode(first, dir, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	mapWith := func(known [32]byte) (got [32]byte, hashed int64) {
		t.Helper()
		rt, c := compile(t, cfg(), wasmBytes)
		before := codeHashes.Load()
		if _, got, err = MapCode(c, dir, known); err != nil {
			t.Fatal(err)
		}
		calls(t, rt, c, 0, functions-1)
		return got, codeHashes.Load() - before
	}
	if got, hashed := mapWith(sum); got != sum || hashed != 0 {
		t.Errorf("with the known digest: %x, %d hashes; want %x and none", got, hashed, sum)
	}
	wrong := sha256.Sum256([]byte("other code"))
	if got, hashed := mapWith(wrong); got != sum || hashed != 1 {
		t.Errorf("with a wrong digest: %x, %d hashes; want %x after one", got, hashed, sum)
	}
	// The known name holding other bytes: hashed, rewritten, mapped right.
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".code")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xcc
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	if got, hashed := mapWith(sum); got != sum || hashed != 1 {
		t.Errorf("with the known name holding other bytes: %x, %d hashes; want %x after one", got, hashed, sum)
	}
}

// TestMapCodeShared: code that identical bytes share in one runtime is not
// mapped again (it may be running), and both modules keep working.
func TestMapCodeShared(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	ctx := context.Background()
	dir := t.TempDir()
	rt, c := compile(t, compiler(t), wasmBytes)
	if _, _, err := MapCode(c, dir, [32]byte{}); err != nil {
		t.Fatal(err)
	}
	c2, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := MapCode(c2, dir, [32]byte{}); !errors.Is(err, ErrShared) {
		t.Fatalf("MapCode on shared code: %v, want ErrShared", err)
	}
	calls(t, rt, c, 3)
	calls(t, rt, c2, 4)
}

// TestMapCodeFailsSafe: when the file cannot be written the code stays
// where it was and runs.
func TestMapCodeFailsSafe(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rt, c := compile(t, compiler(t), wasmBytes)
	if _, _, err := MapCode(c, filepath.Join(notDir, "code"), [32]byte{}); err == nil {
		t.Fatal("MapCode into a directory under a file succeeded")
	}
	calls(t, rt, c, 0, functions-1)
}
