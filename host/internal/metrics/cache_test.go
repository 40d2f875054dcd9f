package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmreconcile/wasmreconcile/host/engine"
	"github.com/wasmreconcile/wasmreconcile/host/internal/metrics"
	"github.com/wasmreconcile/wasmreconcile/host/source"
)

// TestObserveCachePrune: the gauge is what is left after a check, the
// counter adds the files each check removed, and the over flag follows
// the latest check.
func TestObserveCachePrune(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCachePrune(engine.CachePrune{Files: 10, Bytes: 1000, Removed: 3, Freed: 300, Over: true})
	m.ObserveCachePrune(engine.CachePrune{Files: 8, Bytes: 800, Removed: 2, Freed: 500})
	if got := testutil.ToFloat64(m.CompilationCacheBytes); got != 300 {
		t.Errorf("wasmreconcile_compilation_cache_bytes %v, want 300", got)
	}
	if got := testutil.ToFloat64(m.CompilationCacheRemoved); got != 5 {
		t.Errorf("wasmreconcile_compilation_cache_removed_files_total %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.CompilationCacheOver); got != 0 {
		t.Errorf("wasmreconcile_compilation_cache_over %v after a check that got under, want 0", got)
	}
	m.ObserveCachePrune(engine.CachePrune{Files: 8, Bytes: 900, Over: true})
	if got := testutil.ToFloat64(m.CompilationCacheOver); got != 1 {
		t.Errorf("wasmreconcile_compilation_cache_over %v, want 1", got)
	}
}

// TestObserveModuleCachePrune: the module cache's series follow its own
// checks, apart from the compilation cache's.
func TestObserveModuleCachePrune(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveModuleCachePrune(source.BlobCachePrune{Files: 6, Bytes: 600, Removed: 2, Freed: 200, Over: true})
	m.ObserveModuleCachePrune(source.BlobCachePrune{Files: 4, Bytes: 400, Removed: 1, Freed: 100})
	if got := testutil.ToFloat64(m.ModuleCacheBytes); got != 300 {
		t.Errorf("wasmreconcile_module_cache_bytes %v, want 300", got)
	}
	if got := testutil.ToFloat64(m.ModuleCacheRemoved); got != 3 {
		t.Errorf("wasmreconcile_module_cache_removed_files_total %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.ModuleCacheOver); got != 0 {
		t.Errorf("wasmreconcile_module_cache_over %v after a check that got under, want 0", got)
	}
	if got := testutil.ToFloat64(m.CompilationCacheBytes); got != 0 {
		t.Errorf("wasmreconcile_compilation_cache_bytes %v, moved by the module cache", got)
	}
}
