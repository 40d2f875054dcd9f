package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewRefusesBadDirectories(t *testing.T) {
	dir := t.TempDir()
	if _, err := WatchDir(filepath.Join(dir, "missing"), nil, nil); err == nil || !strings.Contains(err.Error(), "create it or fix --module-dir") {
		t.Errorf("missing directory: %v", err)
	}
	file := filepath.Join(dir, "f.wasm")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WatchDir(file, nil, nil); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file as the directory: %v", err)
	}
}

// TestWatcherAppliesSettledWritesAndRemovals writes a module in several
// steps (applied once, after it settles), writes a non-module file
// (ignored), renames a module in (applied), and removes one (removed).
func TestWatcherAppliesSettledWritesAndRemovals(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.wasm", "a.wasm", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	applied, removed := map[string]int{}, map[string]int{}
	w, err := WatchDir(dir, func(_ context.Context, path string) error {
		mu.Lock()
		applied[filepath.Base(path)]++
		mu.Unlock()
		return nil
	}, func(path string) {
		mu.Lock()
		removed[filepath.Base(path)]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Initial(); len(got) != 2 || filepath.Base(got[0]) != "a.wasm" || filepath.Base(got[1]) != "b.wasm" {
		t.Fatalf("Initial() = %v, want a.wasm and b.wasm, sorted", got)
	}
	w.SetSettle(time.Second) // far longer than the three writes below take, even on a loaded machine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	defer func() { cancel(); <-done }()

	// A build writing in three steps, faster than the settle time.
	f, err := os.Create(filepath.Join(dir, "c.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := f.Write([]byte("part")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "more.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "d.wasm.tmp")
	if err := os.WriteFile(tmp, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "d.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a.wasm")); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		ok := applied["c.wasm"] >= 1 && applied["d.wasm"] >= 1 && removed["a.wasm"] == 1
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %v, removed %v", applied, removed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A positive barrier instead of a sleep: nothing waits to settle and
	// nothing is being applied.
	for deadline := time.Now().Add(30 * time.Second); !w.Idle(); {
		if time.Now().After(deadline) {
			t.Fatal("the directory watcher never became idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if applied["c.wasm"] != 1 {
		t.Errorf("c.wasm, written in three quick steps, was applied %d times; want once", applied["c.wasm"])
	}
	for name := range applied {
		if !strings.HasSuffix(name, ".wasm") {
			t.Errorf("%s is not a module but was applied", name)
		}
	}
	if applied["a.wasm"] != 0 || applied["b.wasm"] != 0 {
		t.Errorf("untouched or removed files applied: %v", applied)
	}
}

// TestWatcherNamesPathsAlike: a directory given as "." names a module's
// file by the same path in Initial and in the events of its changes, so
// that a reload is the same module, not a second one from "another" file.
func TestWatcherNamesPathsAlike(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.wasm"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	applied := make(chan string, 10)
	w, err := WatchDir(".", func(_ context.Context, path string) error { applied <- path; return nil }, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	initial := w.Initial()
	if len(initial) != 1 {
		t.Fatalf("Initial() = %v", initial)
	}
	w.SetSettle(10 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	defer func() { cancel(); <-done }()
	if err := os.WriteFile("m.wasm", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-applied:
		if got != initial[0] {
			t.Fatalf("a change applied %q; Initial named the file %q", got, initial[0])
		}
	case <-time.After(time.Minute):
		t.Fatal("the change was never applied")
	}
}
