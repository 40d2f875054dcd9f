package source

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
)

// BlobCache is a directory of OCI manifests and modules by digest, which
// OCI sources read before asking the registry (Options.BlobCache). Every
// read is checked against the digest; a file that does not match is
// removed and fetched again. A nil *BlobCache keeps nothing.
//
// With BlobCacheOptions.MaxBytes the directory is bounded: after each
// write that takes it past the bound, the least recently used files go
// (a read counts as a use), down to 90% of it, except the manifests and
// modules of the references BlobCacheOptions.InUse names and files
// written or read in the last two minutes.
type BlobCache struct {
	dir   string
	quota *dirquota.Quota
}

// BlobCacheOptions bound a BlobCache. The zero value keeps everything.
type BlobCacheOptions struct {
	// MaxBytes is what the files in the directory may add up to. Defaults
	// to 0: no bound. It may not be negative.
	MaxBytes int64
	// InUse returns the OCI references (oci://…@sha256:…) whose manifests
	// and modules stay however long unused: the ones the operator serves
	// and would load again after a restart. A reference without a digest
	// pins nothing. When it fails, a prune removes nothing and reports its
	// error. Defaults to nil: nothing is pinned beyond the two minutes.
	InUse func() ([]string, error)
	// Pruned, when set, is called after every check of the bound.
	Pruned func(BlobCachePrune)
}

// BlobCachePrune is what one check of a BlobCache's bound found and did.
type BlobCachePrune struct {
	Files   int   // files in the directory before the check
	Bytes   int64 // their size
	Removed int   // files removed, least recently used first
	Freed   int64 // their size
	// Over reports that the directory is still over the bound: what is
	// left is in use or was used in the last two minutes. Raise the bound.
	Over bool
	Err  error // reading the directory, or InUse, failed
}

// NewBlobCache returns the cache in dir, which is made when first
// written.
func NewBlobCache(dir string, o BlobCacheOptions) (*BlobCache, error) {
	if dir == "" {
		return nil, errors.New("source: a blob cache needs a directory")
	}
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("source: a blob cache bound of %d bytes; give a positive one, or 0 for none", o.MaxBytes)
	}
	c := &BlobCache{dir: dir}
	if o.MaxBytes > 0 {
		pruned := o.Pruned
		q, err := dirquota.New(dir, dirquota.Options{MaxBytes: o.MaxBytes,
			Pinned: func() (map[string]bool, error) { return c.pinned(o.InUse) },
			Pruned: func(r dirquota.Result, err error) {
				if pruned != nil {
					pruned(BlobCachePrune{Files: r.Files, Bytes: r.Bytes, Removed: r.Removed, Freed: r.Freed, Over: r.Over, Err: err})
				}
			}})
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		c.quota = q
	}
	return c, nil
}

// Dir is the cache's directory.
func (c *BlobCache) Dir() string { return c.dir }

// Prune checks the bound now, and waits for any check already running.
// Writes check it in the background on their own; Prune is for tests and
// for a start with a directory left over.
func (c *BlobCache) Prune() error {
	if c == nil || c.quota == nil {
		return nil
	}
	c.Wait()
	_, err := c.quota.Prune()
	return err
}

// Wait returns once no check of the bound started by a write runs. A nil
// cache has none.
func (c *BlobCache) Wait() {
	if c != nil && c.quota != nil {
		c.quota.Wait()
	}
}

func (c *BlobCache) path(digest string) string {
	return filepath.Join(c.dir, "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (c *BlobCache) get(digest string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	p := c.path(digest)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != digest {
		_ = os.Remove(p)
		return nil, false
	}
	if c.quota != nil {
		dirquota.Touch(p)
	}
	return b, true
}

// put stores b; a failure only means it is fetched again next time.
func (c *BlobCache) put(digest string, b []byte) {
	if c == nil {
		return
	}
	p := c.path(digest)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), p) != nil {
		_ = os.Remove(f.Name())
		return
	}
	if c.quota != nil {
		c.quota.Soon()
	}
}

// pinned is the files of the references inUse names: each manifest, and
// the module layer the cached manifest names.
func (c *BlobCache) pinned(inUse func() ([]string, error)) (map[string]bool, error) {
	if inUse == nil {
		return nil, nil
	}
	refs, err := inUse()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range refs {
		ref, err := ParseOCIRef(s)
		if err != nil || ref.Digest == "" {
			continue // nothing of it can be in the cache
		}
		p := c.path(ref.Digest)
		out[p] = true
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // not fetched yet, or removed by hand
		}
		if l, err := wasmLayer(raw, math.MaxInt64); err == nil {
			out[c.path(l.Digest.String())] = true
		}
	}
	return out, nil
}
