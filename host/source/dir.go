package source

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

// Dir watches a directory of .wasm modules, for an author's dev loop
// (`operator run --module-dir DIR`) or a mounted volume: a file created,
// written or renamed into the directory is applied (loaded and
// hot-swapped, as a File source) once writes to it have settled; a file
// removed or renamed away is removed. It is a manager Runnable that runs in
// every replica (applying only loads; module controllers run in the
// leader).
type Dir struct {
	dir     string
	apply   func(ctx context.Context, path string) error
	remove  func(path string)
	watcher *fsnotify.Watcher
	settle  time.Duration

	mu      sync.Mutex
	pending map[string]pendingApply // by path
	gen     int                     // of the last schedule
	busy    int                     // applies running or waiting for applyMu

	applyMu sync.Mutex // one apply at a time: each reads the file's latest bytes
}

// WatchDir watches dir. apply loads or reloads the module in a path;
// remove stops the module of a path that is gone. Neither is called before
// Start, and calls to apply never overlap.
func WatchDir(dir string, apply func(ctx context.Context, path string) error, remove func(path string)) (*Dir, error) {
	// Absolute, so that a module's path is the same string however dir was
	// spelt ("." or "./run/") and whichever of Initial and an event named it.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
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
	return &Dir{dir: dir, apply: apply, remove: remove, watcher: fw, settle: Settle, pending: map[string]pendingApply{}}, nil
}

// SetSettle changes how long a file must see no write before it is applied.
// Call it before Start.
func (w *Dir) SetSettle(d time.Duration) { w.settle = d }

// Initial returns the .wasm files in the directory now, sorted, for loading
// before the operator starts.
func (w *Dir) Initial() []string {
	matches, _ := filepath.Glob(filepath.Join(w.dir, "*.wasm"))
	sort.Strings(matches)
	return matches
}

// NeedLeaderElection is false: every replica keeps its modules loaded.
func (w *Dir) NeedLeaderElection() bool { return false }

// Start applies changes until ctx is done.
func (w *Dir) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("moduledir").WithValues("dir", w.dir)
	defer w.watcher.Close()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			for _, p := range w.pending {
				p.timer.Stop()
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
			path := filepath.Clean(ev.Name)
			if !filepath.IsAbs(path) {
				path = filepath.Join(w.dir, filepath.Base(path))
			}
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

// schedule runs fn once path has seen no event for w.settle. A later
// schedule of the same path replaces an earlier one that has not fired.
func (w *Dir) schedule(ctx context.Context, path string, fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pending[path]; ok {
		p.timer.Stop() // if it fired already, its callback sees a newer generation and returns
	}
	w.gen++
	gen := w.gen
	w.pending[path] = pendingApply{gen: gen, timer: time.AfterFunc(w.settle, func() {
		w.mu.Lock()
		if p, ok := w.pending[path]; !ok || p.gen != gen {
			w.mu.Unlock()
			return // replaced or cancelled
		}
		delete(w.pending, path)
		w.busy++
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.busy--
			w.mu.Unlock()
		}()
		w.applyMu.Lock()
		defer w.applyMu.Unlock()
		if ctx.Err() == nil {
			fn()
		}
	})}
}

func (w *Dir) cancel(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pending[path]; ok {
		p.timer.Stop()
		delete(w.pending, path)
	}
}

// Idle reports whether no change is waiting to settle or being applied.
func (w *Dir) Idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) == 0 && w.busy == 0
}

type pendingApply struct {
	gen   int
	timer *time.Timer
}
