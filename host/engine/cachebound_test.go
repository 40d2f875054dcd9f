package engine

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// age sets every file under dir as last used an hour ago, past the grace
// period a bounded cache gives what was just written.
func age(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for path := range cacheFiles(t, dir) {
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBoundedCacheKeepsWhatUnloadedModulesNeed: with a compilation cache
// bound far under what two modules write, a check removes every compiled
// module and the files of a closed module, but keeps the bytes and the
// metered rewrite of an open unloadable one, and says the directory is
// still over; that module still answers while loaded and, unloaded, comes back (compiled again) and
// answers as before. After it closes, nothing of it is kept.
func TestBoundedCacheKeepsWhatUnloadedModulesNeed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var prunes []CachePrune
	ev := &codeEvents{}
	e, err := New(ev.options(Options{CompilationCacheDir: dir, CompilationCacheMaxBytes: 256,
		CompilationCachePruned: func(p CachePrune) { mu.Lock(); prunes = append(prunes, p); mu.Unlock() }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx := context.Background()
	limits := Limits{IdleModuleTimeout: time.Hour}
	kept, err := e.Load(ctx, "kept", readWasm(t, "testdata/echo.wasm"), limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kept.Close(ctx) })
	closed, err := e.Load(ctx, "closed", readWasm(t, "testdata/grow.wasm"), limits)
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close(ctx)
	req := []byte(`{"object":{"kind":"Gadget"}}`)
	before, err := kept.ReconcileFresh(ctx, "reconcile a", req)
	if err != nil {
		t.Fatal(err)
	}
	e.quota.Wait()
	mu.Lock()
	if len(prunes) == 0 || prunes[len(prunes)-1].Removed != 0 {
		t.Errorf("checks right after the loads: %+v; want at least one, removing nothing (all in the grace period)", prunes)
	}
	mu.Unlock()

	age(t, dir)
	keep := map[string]bool{e.originals.path(kept.digest): true, e.rewrites.path(kept.digest, e.instrumentOptions(kept.limits)): true}
	e.pruneCache()
	e.quota.Wait()
	left := cacheFiles(t, dir)
	for path := range keep {
		if left[path] == nil {
			t.Errorf("the check removed %s, which the unloadable module needs", path)
		}
	}
	for path := range left {
		if !keep[path] {
			t.Errorf("the check left %s", strings.TrimPrefix(path, dir))
		}
	}
	mu.Lock()
	last := prunes[len(prunes)-1]
	mu.Unlock()
	if last.Removed == 0 || last.Freed == 0 || !last.Over || last.Err != nil {
		t.Errorf("the check reported %+v; want files removed and the directory still over", last)
	}

	// Loaded, its compiled code removed from the directory: a new
	// instance still runs from what the module holds (its code mapped
	// from a file that is gone stays mapped).
	if still, err := kept.ReconcileFresh(ctx, "reconcile a", req); err != nil || string(still.Output) != string(before.Output) {
		t.Errorf("loaded, after the check: %q, %v; want %q", still.Output, err, before.Output)
	}
	if !kept.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded past its idle timeout")
	}
	after, err := kept.ReconcileFresh(ctx, "reconcile a", req)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Output) != string(before.Output) || after.Fuel != before.Fuel {
		t.Errorf("after loading back: %q with %d fuel, want %q with %d", after.Output, after.Fuel, before.Output, before.Fuel)
	}

	_ = kept.Close(ctx)
	// Loading back checked the bound in the background; that check may
	// still run, and with kept closed nothing of it is pinned: wait for it
	// before walking the directory it may be removing from.
	e.quota.Wait()
	age(t, dir)
	e.pruneCache()
	e.quota.Wait()
	if left := cacheFiles(t, dir); len(left) != 0 {
		t.Errorf("after the module closed, the check left %d files", len(left))
	}
}

// TestFailedLoadChecksTheBound: bytes that compile and then fail (a trap
// in _initialize) wrote to the cache, so their failed load checks the
// bound too: an author retrying bad bytes cannot grow the directory past it.
func TestFailedLoadChecksTheBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var prunes []CachePrune
	e, err := New(Options{CompilationCacheDir: dir, CompilationCacheMaxBytes: 256,
		CompilationCachePruned: func(p CachePrune) { mu.Lock(); prunes = append(prunes, p); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if _, err := e.Load(context.Background(), "trap", readWasm(t, "testdata/initrap.wasm"), Limits{}); err == nil {
		t.Fatal("initrap.wasm loaded")
	}
	e.quota.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(prunes) == 0 || prunes[len(prunes)-1].Bytes == 0 {
		t.Errorf("checks after the failed load: %+v; want one that saw what its compile wrote", prunes)
	}
}

func TestCacheBoundRefusesNegative(t *testing.T) {
	t.Parallel()
	_, err := New(Options{CompilationCacheDir: t.TempDir(), CompilationCacheMaxBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "0 for none") {
		t.Errorf("a negative bound: %v", err)
	}
}

// TestUnboundedCacheRemovesNothing: without a bound no check runs.
func TestUnboundedCacheRemovesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := New(Options{CompilationCacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	m, err := e.Load(context.Background(), "m", readWasm(t, "testdata/echo.wasm"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Close(context.Background())
	if e.quota != nil {
		t.Fatal("a quota without a bound")
	}
	if n := len(cacheFiles(t, dir)); n == 0 {
		t.Error("nothing in the cache directory")
	}
}

// TestFailedWakeChecksTheBound: loading a module back checks the bound
// however it ends, as Load does: a wake that compiles again and then
// fails may have written to the directory.
func TestFailedWakeChecksTheBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	checks := 0
	e, err := New(Options{CompilationCacheDir: dir, CompilationCacheMaxBytes: 1 << 30,
		CompilationCachePruned: func(CachePrune) { mu.Lock(); checks++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := context.Background()
	m, err := e.Load(ctx, "m", readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded past its idle timeout")
	}
	for _, p := range []string{e.originals.path(m.digest), e.rewrites.path(m.digest, e.instrumentOptions(m.limits))} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	e.quota.Wait()
	mu.Lock()
	before := checks
	mu.Unlock()
	if _, err := m.ReconcileFresh(ctx, "reconcile a", []byte(`{"object":{"kind":"Gadget"}}`)); err == nil {
		t.Fatal("woke without its bytes")
	}
	e.quota.Wait()
	mu.Lock()
	defer mu.Unlock()
	if checks == before {
		t.Errorf("no check of the bound after the failed wake (%d before and after)", checks)
	}
}
