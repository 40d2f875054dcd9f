package compiledmem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
)

// servedCache is a compilation cache in cacheDir whose entries MappedCode
// serves with the code files in codeDir; known is what it knows of the
// code's digest.
func servedCache(t *testing.T, cacheDir, codeDir string, known func() ([sha256.Size]byte, bool)) (wazero.RuntimeConfig, *MappedCode) {
	t.Helper()
	cfg, m, _ := servedCacheClosable(t, cacheDir, codeDir, known)
	return cfg, m
}

func servedCacheClosable(t *testing.T, cacheDir, codeDir string, known func() ([sha256.Size]byte, bool)) (wazero.RuntimeConfig, *MappedCode, wazero.CompilationCache) {
	t.Helper()
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ServeMappedCode(cache, codeDir, known)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cache.Close(context.Background())
		m.Close()
	})
	return wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache), m, cache
}

// firstCompile puts the test module into wazero's cache in cacheDir (the
// package's one compile of it, seedCache) and maps its code from codeDir,
// as a first load does; it returns the code's digest and the path of its
// file.
func firstCompile(t *testing.T, cacheDir, codeDir string) ([sha256.Size]byte, string) {
	t.Helper()
	seedCache(t, cacheDir)
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
	c, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := MapCode(c, codeDir, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	_ = rt.Close(ctx)
	_ = cache.Close(ctx)
	return sum, codePath(codeDir, sum)
}

func knows(sum [sha256.Size]byte) func() ([sha256.Size]byte, bool) {
	return func() ([sha256.Size]byte, bool) { return sum, true }
}

// inSortedList reports whether c's code is where wazero looks a return
// address up (engine.sortedCompiledModules), in address order.
func inSortedList(t *testing.T, c wazero.CompiledModule) bool {
	t.Helper()
	e, err := entryOf(c)
	if err != nil {
		t.Fatal(err)
	}
	defer e.unlock()
	sorted, err := field(e.eng, "sortedCompiledModules")
	if err != nil {
		t.Fatal(err)
	}
	found, last := false, uintptr(0)
	for i := range sorted.Len() {
		exe, err := executableOf(sorted.Index(i))
		if err != nil {
			t.Fatal(err)
		}
		if addr := uintptr(exe.UnsafePointer()); addr <= last {
			t.Errorf("the sorted list is out of order at %d", i)
		} else {
			last = addr
		}
		found = found || sorted.Index(i).Pointer() == e.compiled.Pointer()
	}
	return found
}

// TestServeMappedCode: a module compiled again from the cache is served
// without its code, and Attach maps the code file, read-only and executable,
// with only the pages that ran resident; every function returns the right
// value; wazero finds the code in its sorted list; and when the module and
// its cache are closed, wazero unmaps the file as it unmaps its own code.
func TestServeMappedCode(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	cacheDir, codeDir := t.TempDir(), t.TempDir()
	sum, path := firstCompile(t, cacheDir, codeDir)
	ctx := context.Background()
	cfg, m, cache := servedCacheClosable(t, cacheDir, codeDir, knows(sum))
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	c, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		t.Fatal(err)
	}
	if m.Served() != 1 {
		t.Fatalf("%d entries served without their code, want 1", m.Served())
	}
	if _, _, ok := mapping(t, path); !ok {
		t.Fatalf("%s is not mapped before Attach", path)
	}
	attached, err := m.Attach(c)
	if err != nil || !attached {
		t.Fatalf("Attach: %v, %v; want true", attached, err)
	}
	if !inSortedList(t, c) {
		t.Error("the attached code is not in wazero's sorted list")
	}
	calls(t, rt, c, 0)
	header, rss, ok := mapping(t, path)
	if !ok {
		t.Fatalf("%s is not mapped", path)
	}
	if perms := strings.Fields(header)[1]; perms != "r-xp" {
		t.Errorf("%s is mapped %s, want r-xp", path, perms)
	}
	fi, _ := os.Stat(path)
	if rss >= int(fi.Size())/2 {
		t.Errorf("%d of the code's %d bytes are resident after one function ran, want under half", rss, fi.Size())
	}
	calls(t, rt, c, functions-1, functions/3, 7)

	// Closed: wazero's finalizer unmaps the code with unix.Munmap, which
	// panics for a mapping it does not know. (wazero's cache keeps its
	// compiled modules reachable until it is closed: package engine's
	// cacheFor.)
	_ = c.Close(ctx)
	_ = rt.Close(ctx)
	_ = cache.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		if _, _, ok := mapping(t, path); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still mapped 30 s after its module was closed", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeMappedCodeServesWholeEntries: without a known digest, with a
// code file that is not the entry's code (other bytes of the same length,
// cut short, gone), or once disabled, the entry is served as wazero wrote
// it; Attach then maps nothing, and the module runs from wazero's copy.
func TestServeMappedCodeServesWholeEntries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	cacheDir, codeDir := t.TempDir(), t.TempDir()
	sum, path := firstCompile(t, cacheDir, codeDir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		known   func() ([sha256.Size]byte, bool)
		prepare func(m *MappedCode)
	}{
		{"no known digest", func() ([sha256.Size]byte, bool) { return [32]byte{}, false }, nil},
		{"other bytes", knows(sum), func(*MappedCode) {
			b := bytes.Clone(good)
			b[len(b)/2] ^= 0xff
			rewrite(b)
		}},
		{"cut short", knows(sum), func(*MappedCode) { rewrite(good[:len(good)-1]) }},
		{"gone", knows(sum), func(*MappedCode) { _ = os.Remove(path) }},
		{"another digest", knows(sha256.Sum256([]byte("other"))), nil},
		{"disabled", knows(sum), func(m *MappedCode) { m.Disable() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rewrite(good)
			ctx := context.Background()
			cfg, m := servedCache(t, cacheDir, codeDir, tc.known)
			if tc.prepare != nil {
				tc.prepare(m)
			}
			rt := wazero.NewRuntimeWithConfig(ctx, cfg)
			defer rt.Close(ctx)
			c, err := rt.CompileModule(ctx, wasmBytes)
			if err != nil {
				t.Fatal(err)
			}
			attached, err := m.Attach(c)
			if m.Served() != 0 || attached || err != nil {
				t.Fatalf("served %d without code, attached %v (%v); want 0, false, no error", m.Served(), attached, err)
			}
			calls(t, rt, c, 0, functions-1)
		})
	}
}

// TestServeMappedCodeConcurrent: runtimes compiling the same bytes through
// one served cache at once share one compiled module; its code is attached
// once, every other mapping is let go, and every module runs.
func TestServeMappedCodeConcurrent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	cacheDir, codeDir := t.TempDir(), t.TempDir()
	sum, _ := firstCompile(t, cacheDir, codeDir)
	cfg, m := servedCache(t, cacheDir, codeDir, knows(sum))
	ctx := context.Background()
	const n = 4
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		attached int
		rts      [n]wazero.Runtime
		cs       [n]wazero.CompiledModule
	)
	for i := range n {
		rts[i] = wazero.NewRuntimeWithConfig(ctx, cfg)
		defer rts[i].Close(ctx)
		wg.Go(func() {
			<-start
			c, err := rts[i].CompileModule(ctx, wasmBytes)
			if err != nil {
				t.Error(err)
				return
			}
			ok, err := m.Attach(c)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			cs[i] = c
			if ok {
				attached++
			}
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	m.mu.Lock()
	left := len(m.pending)
	m.mu.Unlock()
	if attached != 1 || left != 0 || m.Served() < 1 {
		t.Fatalf("attached %d times, %d mappings left, %d served; want 1, 0, at least 1", attached, left, m.Served())
	}
	for i := range n {
		calls(t, rts[i], cs[i], i, functions-1-i)
	}
}

// TestAttachWithNothingToAttach: a module served without its code for
// which no mapping is left (Close took it) makes Attach fail, so that the
// caller never instantiates it; disabled, the cache then serves the whole
// entry and the module compiled again runs.
func TestAttachWithNothingToAttach(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	cacheDir, codeDir := t.TempDir(), t.TempDir()
	sum, _ := firstCompile(t, cacheDir, codeDir)
	cfg, m := servedCache(t, cacheDir, codeDir, knows(sum))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer rt.Close(ctx)
	c, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if attached, err := m.Attach(c); err == nil || attached {
		t.Fatalf("Attach with the mapping gone: %v, %v; want an error", attached, err)
	}
	_ = c.Close(ctx)
	m.Disable()
	if c, err = rt.CompileModule(ctx, wasmBytes); err != nil {
		t.Fatal(err)
	}
	if attached, err := m.Attach(c); err != nil || attached {
		t.Fatalf("Attach after Disable: %v, %v; want false, no error", attached, err)
	}
	calls(t, rt, c, 0, functions-1)
}

// TestServeMappedCodeRefused: a cache without a directory, or one a runtime
// has started with, is left alone.
func TestServeMappedCodeRefused(t *testing.T) {
	ctx := context.Background()
	known := knows([32]byte{})
	mem := wazero.NewCompilationCache()
	defer mem.Close(ctx)
	if _, err := ServeMappedCode(mem, t.TempDir(), known); err == nil {
		t.Error("served a cache without a directory")
	}
	used, err := wazero.NewCompilationCacheWithDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer used.Close(ctx)
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(used))
	defer rt.Close(ctx)
	if _, err := ServeMappedCode(used, t.TempDir(), known); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("served a cache in use: %v", err)
	}
}

// TestRequireHits: a cache that requires hits fails the compile of a module
// it does not hold with ErrNotCached, compiling nothing; once the module is
// in the cache the same compile reads it.
func TestRequireHits(t *testing.T) {
	ctx := context.Background()
	cacheDir := t.TempDir()
	cfg, m := servedCache(t, cacheDir, t.TempDir(), func() ([sha256.Size]byte, bool) { return [32]byte{}, false })
	m.RequireHits()
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer rt.Close(ctx)
	if _, err := rt.CompileModule(ctx, wasmBytes); !errors.Is(err, ErrNotCached) {
		t.Fatalf("compiling a module the cache does not hold: %v, want ErrNotCached", err)
	}
	if files, _ := filepath.Glob(filepath.Join(cacheDir, "wazero-*", "*")); len(files) != 0 {
		t.Fatalf("the refused compile wrote %v", files)
	}
	firstCompile(t, cacheDir, t.TempDir())
	c, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		t.Fatalf("compiling a module the cache holds: %v", err)
	}
	calls(t, rt, c, 0, functions-1)
}
