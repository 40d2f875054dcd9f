// Package dirquota keeps the files under a directory under a size by
// removing the least recently used. A compilation cache needs it: every
// module version adds its compiled code to the directory, and in a pod the
// directory is an emptyDir whose sizeLimit, once passed, makes the kubelet
// evict the pod.
//
// "Used" is the file's modification time: a reader that wants a file kept
// calls Touch when it uses it. Files a caller pins, files modified within
// a grace period (a compile writing now) and files being written (a
// temporary name) are never removed, so the directory can stay over its
// size while they alone fill it.
package dirquota

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a Quota.
type Options struct {
	// MaxBytes is what the regular files under the directory may add up
	// to. It must be positive.
	MaxBytes int64
	// Target is what a prune that finds the files over MaxBytes brings
	// them down to, so that the next few writes do not prune again.
	// Defaults to 0: 90% of MaxBytes.
	Target int64
	// Grace protects files modified (or touched) less than this long ago:
	// a file being compiled into the directory is read back right after
	// it is written. Defaults to 0: DefaultGrace.
	Grace time.Duration
	// Pinned, when set, returns the files (their paths, as filepath.Join
	// of the directory and their relative path) that must stay; it is
	// called once per prune that finds the directory over MaxBytes. When
	// it fails, that prune removes nothing (what must stay is not known)
	// and returns its error.
	Pinned func() (map[string]bool, error)
	// Pruned, when set, is called after every prune with what it found
	// and removed, and the error reading the directory, if any (what could
	// be read was pruned).
	Pruned func(Result, error)
}

// DefaultGrace is Options.Grace's default.
const DefaultGrace = 2 * time.Minute

// staleTemp is the age past which a file with a temporary name (a writer
// that died before its rename) is a leftover, removed like any other.
const staleTemp = time.Hour

// Result is what one prune found and did.
type Result struct {
	Files   int   // regular files under the directory before the prune
	Bytes   int64 // their size
	Removed int   // files removed
	Freed   int64 // their size
	// Over reports that the files still add up to more than MaxBytes:
	// what is left is pinned, within the grace period or being written.
	Over bool
}

// Quota prunes one directory. It is safe for concurrent use.
type Quota struct {
	dir  string
	opts Options
	now  func() time.Time

	mu      sync.Mutex
	running bool
	again   bool
	idle    *sync.Cond
}

// New returns a Quota for dir under o.
func New(dir string, o Options) (*Quota, error) {
	if dir == "" {
		return nil, errors.New("dirquota: no directory")
	}
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("dirquota: a size of %d bytes; give a positive one", o.MaxBytes)
	}
	if o.Target <= 0 || o.Target > o.MaxBytes {
		o.Target = o.MaxBytes / 10 * 9
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	q := &Quota{dir: dir, opts: o, now: time.Now}
	q.idle = sync.NewCond(&q.mu)
	return q, nil
}

// Touch marks the file at path as used now, so that a prune removes it
// after the files used before it. It is best effort: a file that cannot
// be touched is only removed sooner.
func Touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// Soon prunes the directory in the background. Calls while a prune runs
// make one more run after it, so a write is never left unaccounted.
func (q *Quota) Soon() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running {
		q.again = true
		return
	}
	q.running = true
	go func() {
		for {
			_, _ = q.Prune()
			q.mu.Lock()
			if !q.again {
				q.running = false
				q.idle.Broadcast()
				q.mu.Unlock()
				return
			}
			q.again = false
			q.mu.Unlock()
		}
	}()
}

// Wait returns once no prune started by Soon runs.
func (q *Quota) Wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.running {
		q.idle.Wait()
	}
}

type file struct {
	path string
	size int64
	mod  time.Time
}

// Prune removes the least recently used files under the directory until
// they add up to at most the target, if they add up to more than
// MaxBytes. A directory that does not exist is empty.
func (q *Quota) Prune() (Result, error) {
	files, err := scan(q.dir)
	res := Result{Files: len(files), Bytes: total(files)}
	if res.Bytes > q.opts.MaxBytes {
		var pinned map[string]bool
		if q.opts.Pinned != nil {
			var pinErr error
			if pinned, pinErr = q.opts.Pinned(); pinErr != nil {
				res.Over = true
				err = errors.Join(err, fmt.Errorf("dirquota: nothing removed from %s: what must stay is not known: %w", q.dir, pinErr))
				if q.opts.Pruned != nil {
					q.opts.Pruned(res, err)
				}
				return res, err
			}
		}
		now := q.now()
		slices.SortFunc(files, func(a, b file) int { return a.mod.Compare(b.mod) })
		left := res.Bytes
		for _, f := range files {
			if left <= q.opts.Target {
				break
			}
			age := now.Sub(f.mod)
			if pinned[f.path] || age < q.opts.Grace || (temporary(f.path) && age < staleTemp) {
				continue
			}
			if rmErr := os.Remove(f.path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
				continue // not ours to remove (permissions): it stays counted
			}
			res.Removed++
			res.Freed += f.size
			left -= f.size
		}
		res.Over = left > q.opts.MaxBytes
	}
	if q.opts.Pruned != nil {
		q.opts.Pruned(res, err)
	}
	return res, err
}

// Size is what the regular files under dir add up to, as a prune counts
// them: symbolic links are not followed, and a missing directory is empty.
func Size(dir string) (int64, error) {
	files, err := scan(dir)
	return total(files), err
}

func total(files []file) int64 {
	var n int64
	for _, f := range files {
		n += f.size
	}
	return n
}

// scan lists the regular files under dir; what it could not read is
// reported in the error, the rest listed.
func scan(dir string) ([]file, error) {
	var files []file
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking, or no directory yet
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories, and symbolic links are not followed
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		files = append(files, file{path: path, size: info.Size(), mod: info.ModTime()})
		return nil
	})
	if err != nil {
		err = fmt.Errorf("dirquota: reading %s: %w", dir, err)
	}
	return files, err
}

// temporary reports whether path names a file being written: wazero's
// cache writes "KEY.*.tmp", and package atomicfile ".NAME.*", each renamed
// when complete.
func temporary(path string) bool {
	base := filepath.Base(path)
	return strings.HasSuffix(base, ".tmp") || strings.HasPrefix(base, ".")
}
