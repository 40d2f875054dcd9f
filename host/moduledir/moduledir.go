// Package moduledir watches a directory of .wasm modules for an author's dev
// loop: `operator run --module-dir DIR`. A file created, written or renamed
// into DIR is applied (loaded and hot-swapped) once writes to it have
// settled; a file removed or renamed away is removed.
package moduledir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Settle is how long a file must see no write before it is applied: a build
// writes a module in several steps. 100 ms keeps a rebuilt module's first
// reconcile well inside the hot-reload goal.
const Settle = 100 * time.Millisecond

// Watcher applies the .wasm files of one directory. It is a manager Runnable
// that runs in every replica (applying only loads; module controllers run in
// the leader).
type Watcher struct {
	dir     string
	apply   func(ctx context.Context, path string) error
	remove  func(path string)
	watcher *fsnotify.Watcher
	settle  time.Duration

	mu      sync.Mutex
	pending map[string]*time.Timer

	applyMu sync.Mutex // one apply at a time: each reads the file's latest bytes
}

// New watches dir. apply loads or reloads the module in a path; remove stops
// the module of a path that is gone. Neither is called before Start.
func New(dir string, apply func(ctx context.Context, path string) error, remove func(path string)) (*Watcher, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("module directory: %w; create it or fix --module-dir", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("module directory %s is not a directory; --module-dir takes a directory of .wasm files", dir)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching module directory %s: %w", dir, err)
	}
	if err := fw.Add(dir); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("watching module directory %s: %w", dir, err)
	}
	return &Watcher{dir: dir, apply: apply, remove: remove, watcher: fw, settle: Settle, pending: map[string]*time.Timer{}}, nil
}

// SetSettle changes how long a file must see no write before it is applied.
// Call it before Start.
func (w *Watcher) SetSettle(d time.Duration) { w.settle = d }

// Initial returns the .wasm files in the directory now, sorted, for loading
// before the operator starts.
func (w *Watcher) Initial() []string {
	matches, _ := filepath.Glob(filepath.Join(w.dir, "*.wasm"))
	sort.Strings(matches)
	return matches
}

// NeedLeaderElection is false: every replica keeps its modules loaded.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start applies changes until ctx is done.
func (w *Watcher) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("moduledir").WithValues("dir", w.dir)
	defer w.watcher.Close()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			for _, t := range w.pending {
				t.Stop()
			}
			w.mu.Unlock()
			return nil
		case err, ok := <-w.watcher.Errors:
			if !ok {
				return nil
			}
			log.Error(err, "watching the module directory")
		case ev, ok := <-w.watcher.Events:
			if !ok {
				return nil
			}
			if !strings.HasSuffix(ev.Name, ".wasm") {
				continue
			}
			path := ev.Name
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				if _, err := os.Stat(path); os.IsNotExist(err) {
					w.cancel(path)
					log.Info("module file removed; stopping its module", "path", path)
					w.remove(path)
					continue
				}
			}
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Rename) {
				w.schedule(ctx, path, func() {
					start := time.Now()
					if err := w.apply(ctx, path); err != nil {
						log.Error(err, "module file changed but did not load; the previous version keeps serving", "path", path)
						return
					}
					log.Info("module file applied", "path", path, "took", time.Since(start).String())
				})
			}
		}
	}
}

// schedule runs fn once path has seen no event for w.settle.
func (w *Watcher) schedule(ctx context.Context, path string, fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.pending[path]; t != nil {
		t.Stop()
	}
	w.pending[path] = time.AfterFunc(w.settle, func() {
		w.mu.Lock()
		delete(w.pending, path)
		w.mu.Unlock()
		w.applyMu.Lock()
		defer w.applyMu.Unlock()
		if ctx.Err() == nil {
			fn()
		}
	})
}

func (w *Watcher) cancel(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.pending[path]; t != nil {
		t.Stop()
		delete(w.pending, path)
	}
}
