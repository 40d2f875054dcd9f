package dirquota

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// put writes a file of size bytes at dir/name, last modified age ago.
func put(t *testing.T, dir, name string, size int, age time.Duration) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	when := time.Now().Add(-age)
	if err := os.Chtimes(path, when, when); err != nil {
		t.Fatal(err)
	}
	return path
}

// left lists the files under dir, by their path relative to it.
func left(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestPruneRemovesTheLeastRecentlyUsedFirst(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "wazero/a", 400, 5*time.Hour)
	put(t, dir, "code/b", 400, 4*time.Hour)
	put(t, dir, "rewrites/c", 400, 3*time.Hour)
	put(t, dir, "d", 400, 2*time.Hour)
	q, err := New(dir, Options{MaxBytes: 1000, Target: 900})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Prune()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{Files: 4, Bytes: 1600, Removed: 2, Freed: 800}); res != want {
		t.Errorf("prune: %+v, want %+v", res, want)
	}
	if got, want := left(t, dir), []string{"d", "rewrites/c"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Under the size now: the next prune removes nothing.
	if res, err = q.Prune(); err != nil || res.Removed != 0 || res.Bytes != 800 {
		t.Errorf("second prune: %+v, %v; want nothing removed of 800 bytes", res, err)
	}
}

func TestTouchedFilesGoLast(t *testing.T) {
	dir := t.TempDir()
	oldest := put(t, dir, "oldest", 400, 5*time.Hour)
	put(t, dir, "middle", 400, 4*time.Hour)
	put(t, dir, "newest", 400, 3*time.Hour)
	Touch(oldest) // used now: within the grace period, and the most recent
	q, err := New(dir, Options{MaxBytes: 1000, Target: 800, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Prune(); err != nil {
		t.Fatal(err)
	}
	if got, want := left(t, dir), []string{"newest", "oldest"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}

// TestWhatIsNeverRemoved: pinned files, files within the grace period and
// files being written stay, even when the directory stays over its size
// for them; a temporary file left by a writer that died is removed.
func TestWhatIsNeverRemoved(t *testing.T) {
	dir := t.TempDir()
	pinned := put(t, dir, "modules/pinned.wasm", 1000, 10*time.Hour)
	put(t, dir, "wazero/fresh", 1000, 30*time.Second)
	put(t, dir, "wazero/abc.123.tmp", 1000, 10*time.Minute)
	put(t, dir, "code/.x.code.456", 1000, 10*time.Minute)
	put(t, dir, "wazero/dead.789.tmp", 1000, 2*time.Hour)
	put(t, dir, "wazero/old", 1000, 3*time.Hour)
	var got []Result
	q, err := New(dir, Options{MaxBytes: 2000, Grace: time.Minute,
		Pinned: func() (map[string]bool, error) { return map[string]bool{pinned: true}, nil },
		Pruned: func(r Result, _ error) { got = append(got, r) }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Prune()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{Files: 6, Bytes: 6000, Removed: 2, Freed: 2000, Over: true}); res != want {
		t.Errorf("prune: %+v, want %+v", res, want)
	}
	if len(got) != 1 || got[0] != res {
		t.Errorf("Pruned saw %+v, want the one result %+v", got, res)
	}
	want := []string{"code/.x.code.456", "modules/pinned.wasm", "wazero/abc.123.tmp", "wazero/fresh"}
	if l := left(t, dir); !slices.Equal(l, want) {
		t.Errorf("left %v, want %v", l, want)
	}
}

// TestUnknownPinsRemoveNothing: when what must stay cannot be known, a
// prune of a directory over its size removes nothing and says why.
func TestUnknownPinsRemoveNothing(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "sha256/old", 1000, 10*time.Hour)
	put(t, dir, "sha256/older", 1000, 20*time.Hour)
	q, err := New(dir, Options{MaxBytes: 1000, Grace: time.Minute,
		Pinned: func() (map[string]bool, error) { return nil, errors.New("the cache has not started") }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Prune()
	if err == nil || !strings.Contains(err.Error(), "nothing removed") || !strings.Contains(err.Error(), "the cache has not started") {
		t.Errorf("prune error %v, want nothing removed and the cause", err)
	}
	if want := (Result{Files: 2, Bytes: 2000, Over: true}); res != want {
		t.Errorf("prune: %+v, want %+v", res, want)
	}
	if l := left(t, dir); len(l) != 2 {
		t.Errorf("left %v, want both files", l)
	}
}

// TestSymlinksAreNotFollowed: a link in the directory to a file outside it
// neither counts nor has its target removed.
func TestSymlinksAreNotFollowed(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := put(t, outside, "precious", 5000, 10*time.Hour)
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	put(t, dir, "own", 100, 10*time.Hour)
	q, err := New(dir, Options{MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Prune()
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 100 || res.Removed != 0 {
		t.Errorf("prune: %+v, want 100 bytes counted and nothing removed", res)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target: %v", err)
	}
}

func TestMissingDirectoryIsEmpty(t *testing.T) {
	q, err := New(filepath.Join(t.TempDir(), "not-yet"), Options{MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := q.Prune(); err != nil || res != (Result{}) {
		t.Errorf("prune of a missing directory: %+v, %v; want nothing, no error", res, err)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		dir string
		o   Options
	}{{"", Options{MaxBytes: 1}}, {"d", Options{}}, {"d", Options{MaxBytes: -1}}} {
		if _, err := New(c.dir, c.o); err == nil {
			t.Errorf("New(%q, %+v) succeeded", c.dir, c.o)
		}
	}
}

// TestSoonPrunesAfterEveryCall: writes racing with background prunes are
// all accounted for: once the last Soon's prune is done, the directory is
// under its size.
func TestSoonPrunesAfterEveryCall(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	runs := 0
	q, err := New(dir, Options{MaxBytes: 1000, Target: 500, Grace: time.Nanosecond,
		Pruned: func(Result, error) { mu.Lock(); runs++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				put(t, dir, filepath.Join("w", string(rune('a'+i)), string(rune('a'+j))), 100, time.Duration(100-j)*time.Second)
				q.Soon()
			}
		})
	}
	wg.Wait()
	q.Wait()
	res, err := q.Prune()
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes > 1000 || res.Removed != 0 {
		t.Errorf("after the writers, a prune found %+v; want at most 1000 bytes and nothing to remove", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs < 2 {
		t.Errorf("%d prunes ran for 80 writes", runs)
	}
}
