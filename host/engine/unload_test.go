package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmreconcile/wasmreconcile/host/abi"
	"github.com/wasmreconcile/wasmreconcile/host/internal/compiledmem"
	"github.com/wasmreconcile/wasmreconcile/internal/testwasm"
)

// codeEvents records Options.ModuleUnloaded and ModuleReloaded.
type codeEvents struct {
	mu        sync.Mutex
	unloads   int
	reloads   int
	reloadErr []error
	unloaded  chan string // each unload, when not nil
}

func (c *codeEvents) options(o Options) Options {
	o.ModuleUnloaded = func(module string) {
		c.mu.Lock()
		c.unloads++
		ch := c.unloaded
		c.mu.Unlock()
		if ch != nil {
			ch <- module
		}
	}
	o.ModuleReloaded = func(_ string, took time.Duration, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reloads++
		c.reloadErr = append(c.reloadErr, err)
	}
	return o
}

func (c *codeEvents) counts() (unloads, reloads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unloads, c.reloads
}

// loadUnloadable loads wasm on a new engine with a compilation cache
// directory of its own (compiles in process: the guests here are a few
// hundred bytes).
func loadUnloadable(t *testing.T, wasm []byte, limits Limits, ev *codeEvents) (*Engine, *Module, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := New(ev.options(Options{CompilationCacheDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	m, err := e.Load(context.Background(), "guest", wasm, limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return e, m, dir
}

// cacheFiles lists every file under dir: what a compile or an
// instrumentation would write. Every writer of the directory replaces a
// file by renaming a new one over it (os.SameFile then tells), while
// reading a file touches its modification time (package dirquota).
func cacheFiles(t *testing.T, dir string) map[string]fs.FileInfo {
	t.Helper()
	files := map[string]fs.FileInfo{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files[path] = fi
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func readWasm(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openCaches(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.caches)
}

// TestIdleModuleUnloadsAndComesBack: a module past its idle timeout drops
// its instances and code (the engine's cache of its code is closed); the
// next call loads it back from disk, without writing anything there (no
// instrumentation, no compile), and answers as before with the same fuel.
func TestIdleModuleUnloadsAndComesBack(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	e, m, dir := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Hour}, ev)
	if !m.Unloadable() || !m.Loaded() {
		t.Fatalf("unloadable %v, loaded %v; want both", m.Unloadable(), m.Loaded())
	}
	ctx := context.Background()
	req := []byte(`{"object":{"kind":"Gadget"}}`)
	before, err := m.ReconcileFresh(ctx, "reconcile a", req)
	if err != nil {
		t.Fatal(err)
	}
	written := cacheFiles(t, dir)
	if m.unloadIfIdle(time.Now()) {
		t.Fatal("unloaded right after a call")
	}
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded past its idle timeout")
	}
	if m.Loaded() || m.PoolStats().Live != 0 || openCaches(e) != 0 {
		t.Fatalf("after unloading: loaded %v, %+v instances, %d code caches open; want false, none, 0", m.Loaded(), m.PoolStats(), openCaches(e))
	}
	if u, r := ev.counts(); u != 1 || r != 0 {
		t.Fatalf("%d unloads and %d reloads reported, want 1 and 0", u, r)
	}
	after, err := m.ReconcileFresh(ctx, "reconcile a", req)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Output) != string(before.Output) || after.Fuel != before.Fuel {
		t.Errorf("after reloading: %q with %d fuel, want %q with %d", after.Output, after.Fuel, before.Output, before.Fuel)
	}
	if !m.Loaded() {
		t.Error("not loaded after a call")
	}
	if u, r := ev.counts(); u != 1 || r != 1 || ev.reloadErr[0] != nil {
		t.Errorf("%d unloads and %d reloads reported (errors %v), want 1 and 1", u, r, ev.reloadErr)
	}
	if now := cacheFiles(t, dir); len(now) != len(written) {
		t.Errorf("loading back wrote to the cache directory: %d files, was %d", len(now), len(written))
	} else {
		for f, v := range written {
			if n := now[f]; n == nil || !os.SameFile(n, v) || n.Size() != v.Size() {
				t.Errorf("loading back rewrote %s", f)
			}
		}
	}
}

// TestReloadFallsBackToOriginals: with the metered rewrite gone, the module
// comes back from its kept bytes; with those gone or altered too, the call
// fails with a *ReloadError that says what to do, and nothing else runs.
func TestReloadFallsBackToOriginals(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	wasm := readWasm(t, "testdata/echo.wasm")
	_, m, dir := loadUnloadable(t, wasm, Limits{IdleModuleTimeout: time.Hour}, ev)
	ctx := context.Background()
	unload := func() {
		t.Helper()
		if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
			t.Fatal("not unloaded")
		}
	}
	unload()
	if err := os.RemoveAll(filepath.Join(dir, rewritesDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reconcile(ctx, "reconcile a", []byte(`{}`)); err != nil {
		t.Fatalf("without the rewrite: %v", err)
	}

	unload()
	if err := os.RemoveAll(filepath.Join(dir, rewritesDir)); err != nil {
		t.Fatal(err)
	}
	original := filepath.Join(dir, originalsDir, strings.TrimPrefix(m.Digest(), "sha256:")+".wasm")
	if err := os.WriteFile(original, append(append([]byte(nil), wasm...), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := m.Reconcile(ctx, "reconcile a", []byte(`{}`))
	var re *ReloadError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "holds bytes of") || !strings.Contains(err.Error(), "--idle-module-timeout") {
		t.Fatalf("with altered bytes: %v, want a *ReloadError naming them and the flag", err)
	}
	if err := os.Remove(original); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reconcile(ctx, "reconcile a", []byte(`{}`)); !errors.As(err, &re) || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("with the bytes gone: %v, want a *ReloadError", err)
	}
	if m.Loaded() {
		t.Error("loaded after failing to load back")
	}
}

// TestUnloadWaitsForRunningCall: a module whose call is running (here a
// spinning guest, until its deadline) is not unloaded under it, even past
// its idle timeout; once the call ends it is.
func TestUnloadWaitsForRunningCall(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	_, m, _ := loadUnloadable(t, readWasm(t, "testdata/adversarial/spin.wasm"),
		Limits{IdleModuleTimeout: time.Hour, Timeout: 30 * time.Second, Fuel: 1 << 62}, ev)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Reconcile(ctx, "reconcile spin", []byte(`{}`))
		done <- err
	}()
	waitFor(t, "the call holds the instance", func() bool { s := m.PoolStats(); return s.Live == 1 && s.Idle == 0 })
	if m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("unloaded under a running call")
	}
	if !m.Loaded() {
		t.Fatal("the code is gone under a running call")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the spinning call succeeded")
	}
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded once the call ended")
	}
}

// TestConcurrentCallsShareOneReload: calls that arrive together at an
// unloaded module wait for one load and all succeed.
func TestConcurrentCallsShareOneReload(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	_, m, _ := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Hour, MaxInstances: 3}, ev)
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			want := fmt.Appendf(nil, `{"i":%d}`, i)
			res, err := m.Reconcile(context.Background(), "reconcile", want)
			if err == nil && string(res.Output) != string(want) {
				err = errors.New("answered " + string(res.Output))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, r := ev.counts(); r != 1 {
		t.Errorf("%d reloads, want 1", r)
	}
}

// TestIdleTimerUnloads: the timer unloads a module with no calls, also when
// its instances would never be closed for idleness themselves.
func TestIdleTimerUnloads(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{unloaded: make(chan string, 1)}
	_, m, _ := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: 50 * time.Millisecond, IdleInstanceTimeout: -1}, ev)
	select {
	case name := <-ev.unloaded:
		if name != "echo" {
			t.Errorf("unloaded %q, want echo", name)
		}
	case <-time.After(time.Minute):
		t.Fatal("not unloaded a minute after its 50 ms idle timeout")
	}
	if m.Loaded() || m.PoolStats().Live != 0 {
		t.Fatalf("loaded %v, %+v", m.Loaded(), m.PoolStats())
	}
	if _, err := m.Reconcile(context.Background(), "reconcile", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select { // armed again by the load
	case <-ev.unloaded:
	case <-time.After(time.Minute):
		t.Fatal("not unloaded again after it came back")
	}
}

// TestNotUnloadable: a negative timeout, or an engine with no directory to
// load back from, keeps a module loaded.
func TestNotUnloadable(t *testing.T) {
	t.Parallel()
	wasm := readWasm(t, "testdata/echo.wasm")
	_, negative, _ := loadUnloadable(t, wasm, Limits{IdleModuleTimeout: -1}, &codeEvents{})
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	inMemory, err := e.Load(context.Background(), "echo", wasm, Limits{IdleModuleTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer inMemory.Close(context.Background())
	for name, m := range map[string]*Module{"negative timeout": negative, "no cache directory": inMemory} {
		if m.Unloadable() || m.unloadIfIdle(time.Now().Add(time.Hour)) || !m.Loaded() {
			t.Errorf("%s: unloadable %v, loaded %v; want false, true", name, m.Unloadable(), m.Loaded())
		}
	}
}

// TestCloseUnloaded: an unloaded module closes, and a call after that
// fails without loading it back.
func TestCloseUnloaded(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	_, m, _ := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Hour}, ev)
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded")
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var te *TrapError
	if _, err := m.Reconcile(context.Background(), "reconcile", []byte(`{}`)); !errors.As(err, &te) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a call after Close: %v, want a *TrapError", err)
	}
	if _, r := ev.counts(); r != 0 {
		t.Errorf("%d reloads after Close, want 0", r)
	}
}

// TestGoGuestComesBackTheSame: the widget, a Go guest, answers with the
// same bytes and the same fuel on a fresh instance before and after it was
// unloaded.
func TestGoGuestComesBackTheSame(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	e, err := New(ev.options(testCache(t, Options{})))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	ctx := context.Background()
	m, err := e.Load(ctx, "widget.wasm", testwasm.Build(t, "./widget"), Limits{IdleModuleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	req, err := json.Marshal(abi.Request{Object: map[string]any{
		"apiVersion": "examples.wasmreconcile.io/v1alpha1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default", "generation": 2},
		"spec":     map[string]any{"size": 3},
	}, Now: "2026-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := m.ReconcileFresh(ctx, "reconcile default/w", req)
	if err != nil {
		t.Fatal(err)
	}
	if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
		t.Fatal("not unloaded")
	}
	after, err := m.ReconcileFresh(ctx, "reconcile default/w", req)
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Output) != string(before.Output) || after.Fuel != before.Fuel {
		t.Errorf("after reloading: %d bytes with %d fuel, want %d bytes with %d:\n%s\n%s", len(after.Output), after.Fuel, len(before.Output), before.Fuel, after.Output, before.Output)
	}
}

// Goals of issue 26 for an unloaded widget module.
const (
	goalIdleModuleMiB = 1   // what an unloaded module still costs
	goalWakeExtraMs   = 100 // its first call, beyond a loaded module's first call with no instance
)

// BenchmarkIdleModule loads WASMRECONCILE_MEMORY_MODULES (default 8)
// widget modules, each under other bytes, into one Engine with a
// compilation cache directory, after a first module that pays for what all
// share, and unloads them (Limits.IdleModuleTimeout). It reports what an
// unloaded module still costs, in live Go heap and resident set (goal
// ≤1 MiB), and how long the first call after an unload takes against the
// first call of a loaded module whose instances were closed for idleness,
// interleaved (goal: at most 100 ms more).
func BenchmarkIdleModule(b *testing.B) {
	modules := benchModules()
	wasm := testwasm.Build(b, "./widget")
	req := gadget(b, map[string]any{"size": 3, "color": "blue"}, 2400)
	ctx := context.Background()
	for range b.N {
		e, err := New(Options{CompilationCacheDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		load := func(i int) *Module {
			return loadVariant(b, e, wasm, fmt.Sprintf("idle-%d-%d", i, b.N), Limits{IdleModuleTimeout: time.Hour}, req)
		}
		mods := []*Module{load(0)}
		base := sampleMemory(b)
		loadedAt := make([]time.Time, modules+1)
		for i := 1; i <= modules; i++ {
			mods = append(mods, load(i))
			loadedAt[i] = time.Now()
		}
		loaded := sampleMemory(b)
		for i, m := range mods[1:] {
			if !m.unloadIfIdle(loadedAt[i+1].Add(2 * time.Hour)) {
				b.Fatalf("module %d not unloaded", i+1)
			}
		}
		unloaded := sampleMemory(b)
		_, loadedRSS, _ := delta(base, loaded, modules)
		idleHeap, idleRSS, idleCode := delta(base, unloaded, modules)

		// Interleaved: the first call of the loaded module 0 with no
		// instance, then the first call of an unloaded one.
		var first, wake []time.Duration
		for _, m := range mods[1:] {
			closeIdle(mods[0])
			t0 := time.Now()
			if _, err := mods[0].Reconcile(ctx, "first", req); err != nil {
				b.Fatal(err)
			}
			first = append(first, time.Since(t0))
			t0 = time.Now()
			if _, err := m.Reconcile(ctx, "wake", req); err != nil {
				b.Fatal(err)
			}
			wake = append(wake, time.Since(t0))
		}
		median := func(ds []time.Duration) time.Duration {
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		firstMs, wakeMs := float64(median(first).Microseconds())/1000, float64(median(wake).Microseconds())/1000
		b.ReportMetric(idleRSS, "idle-module-rss-MiB")
		b.ReportMetric(idleHeap, "idle-module-heap-MiB")
		b.ReportMetric(loadedRSS, "loaded-module-rss-MiB")
		b.ReportMetric(firstMs, "first-call-ms")
		b.ReportMetric(wakeMs, "wake-call-ms")
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "missed"
		}
		b.Logf("%d widget modules (%.2f MiB of wasm each), one Engine with a compilation cache directory", modules, toMiB(float64(len(wasm))))
		b.Logf("one more module, loaded with no instance: %.2f MiB resident; unloaded: %.2f MiB resident (%.2f MiB live Go heap, %.2f MiB compiled code); goal ≤%d MiB — %s",
			loadedRSS, idleRSS, idleHeap, idleCode, goalIdleModuleMiB, verdict(idleRSS <= goalIdleModuleMiB && idleHeap <= goalIdleModuleMiB))
		b.Logf("first call, median of %d interleaved: loaded module with no instance %.1f ms, unloaded module %.1f ms (+%.1f ms); goal ≤+%d ms — %s",
			len(wake), firstMs, wakeMs, wakeMs-firstMs, goalWakeExtraMs, verdict(wakeMs-firstMs <= goalWakeExtraMs))
		for _, m := range mods {
			_ = m.Close(ctx)
		}
		_ = e.Close(ctx)
	}
}

// TestUnloadRacesCalls: with a 1 ms idle timeout, calls from several
// goroutines with pauses between them race the timer's unloads and each
// other's loads; every call answers right, the module unloads and loads
// back many times, and no instance is left behind (run under -race).
func TestUnloadRacesCalls(t *testing.T) {
	t.Parallel()
	ev := &codeEvents{}
	_, m, _ := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Millisecond, IdleInstanceTimeout: time.Millisecond, MaxInstances: 2}, ev)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 60 {
				want := fmt.Appendf(nil, `{"g":%d,"i":%d}`, g, i)
				res, err := m.Reconcile(context.Background(), "reconcile", want)
				if err == nil && string(res.Output) != string(want) {
					err = fmt.Errorf("answered %s to %s", res.Output, want)
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(i%4) * time.Millisecond) // let the timer win some races
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	u, r := ev.counts()
	if u < 2 || r < 2 {
		t.Errorf("%d unloads and %d reloads over 240 calls with a 1 ms idle timeout; want several of each", u, r)
	}
	waitFor(t, "the last instance closed for idleness", func() bool { return m.PoolStats().Live == 0 })
	for _, err := range ev.reloadErr {
		if err != nil {
			t.Errorf("a reload failed: %v", err)
		}
	}
}

// TestWakeMapsItsCodeFile: a module loaded back after an unload is served
// by the compilation cache without its machine code, which is mapped from
// the file its first load wrote (compiledmem.MappedCode), and answers as
// before; when that code cannot be attached, the module is compiled again
// from wazero's whole entry instead of running without code.
func TestWakeMapsItsCodeFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	ev := &codeEvents{}
	e, m, _ := loadUnloadable(t, readWasm(t, "testdata/echo.wasm"), Limits{IdleModuleTimeout: time.Hour}, ev)
	ctx := context.Background()
	req := []byte(`{"object":{"kind":"Gadget"}}`)
	before, err := m.ReconcileFresh(ctx, "reconcile a", req)
	if err != nil {
		t.Fatal(err)
	}
	served := func() (n int64) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.caches {
			n += c.mapped.Served()
		}
		return n
	}
	if n := served(); n != 0 {
		t.Fatalf("the first load was served %d entries without code, want 0 (no code file yet)", n)
	}
	var stolen int
	for _, steal := range []bool{false, true} {
		if steal {
			// Take the mapping Attach would attach: it fails, and the
			// module is compiled again from the whole entry.
			e.beforeAttach = func(mc *compiledmem.MappedCode) { stolen++; mc.Close() }
		}
		if !m.unloadIfIdle(time.Now().Add(2 * time.Hour)) {
			t.Fatal("not unloaded")
		}
		after, err := m.ReconcileFresh(ctx, "reconcile a", req)
		if err != nil {
			t.Fatal(err)
		}
		if string(after.Output) != string(before.Output) || after.Fuel != before.Fuel {
			t.Errorf("after waking (attach stolen %v): %q with %d fuel, want %q with %d", steal, after.Output, after.Fuel, before.Output, before.Fuel)
		}
		if n := served(); n != 1 {
			t.Errorf("the wake (attach stolen %v) was served %d entries without code, want 1", steal, n)
		}
	}
	if stolen != 1 {
		t.Errorf("the attach was stolen %d times, want 1", stolen)
	}
}

// TestRestartMapsItsCodeFile: an engine started again on the same
// compilation cache directory (a restarted operator) loads a module with
// its machine code mapped from the file the first engine wrote, without
// wazero's copy (the code's digest is remembered in the directory); a
// remembered digest that is garbage or names other code only costs that:
// the module loads from wazero's copy and answers the same.
func TestRestartMapsItsCodeFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("backing code with a file is Linux's only")
	}
	t.Parallel()
	dir := t.TempDir()
	wasm := readWasm(t, "testdata/echo.wasm")
	ctx := context.Background()
	req := []byte(`{"object":{"kind":"Gadget"}}`)
	var want []byte
	sums := func() []string {
		files, _ := filepath.Glob(filepath.Join(dir, codeDir, "*.sum"))
		return files
	}
	for i, step := range []struct {
		name    string
		prepare func()
		served  int64
	}{
		{"the first load", nil, 0},
		{"a restart", nil, 1},
		{"a restart with the digest garbage", func() {
			for _, f := range sums() {
				if err := os.WriteFile(f, []byte("not a digest"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}, 0},
		{"a restart after the digest was written again", nil, 1},
		{"a restart with the digest of other code", func() {
			other := sha256.Sum256([]byte("other code"))
			for _, f := range sums() {
				if err := os.WriteFile(f, []byte(hex.EncodeToString(other[:])), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}, 0},
		{"a restart after that", nil, 1},
	} {
		if step.prepare != nil {
			step.prepare()
		}
		e, err := New(Options{CompilationCacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		m, err := e.Load(ctx, "guest", wasm, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		res, err := m.ReconcileFresh(ctx, "reconcile a", req)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if i == 0 {
			want = res.Output
			if len(sums()) != 1 {
				t.Fatalf("after the first load, digest files %v, want one", sums())
			}
		} else if !bytes.Equal(res.Output, want) {
			t.Errorf("%s: answered %s, want %s", step.name, res.Output, want)
		}
		var served int64
		e.mu.Lock()
		for _, c := range e.caches {
			served += c.mapped.Served()
		}
		e.mu.Unlock()
		if served != step.served {
			t.Errorf("%s: %d entries served without code, want %d", step.name, served, step.served)
		}
		_ = m.Close(ctx)
		_ = e.Close(ctx)
	}
}
