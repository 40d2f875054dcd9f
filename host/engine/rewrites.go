package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/host/internal/instrument"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
)

// rewritesDir is the directory, inside the compilation cache directory, that
// keeps the instrumenter's output (see rewriteCache).
const rewritesDir = "wasmreconcile-rewrites"

// rewriteCache keeps the instrumenter's output on disk, beside the compiled
// code in the compilation cache directory, so that loading bytes again (a
// restart, a version swapped back, a module that comes back) skips
// instrumenting them (0.1-0.3 s for a 3 MB Go guest; seconds under the race
// detector) as the compilation cache skips compiling them. Nothing is kept
// in memory. A file is written only for input that was instrumented and
// validated, so a hit skips both.
//
// An entry is named by the sha256 of the input's digest, every instrument
// option and the running executable's own sha256: a binary with another
// instrumenter never reads what this one wrote, even when both report the
// same version. Each file starts with the sha256 of the rest; a file that
// does not match (a disk error, an edit) is removed and the bytes
// instrumented again. The directory is trusted as the compilation cache is:
// whoever can write it can also write the machine code wazero loads.
//
// The zero value (no directory) keeps nothing.
type rewriteCache struct {
	dir string
}

func newRewriteCache(cacheDir string) rewriteCache {
	if cacheDir == "" {
		return rewriteCache{}
	}
	return rewriteCache{dir: filepath.Join(cacheDir, rewritesDir)}
}

// executableDigest is the sha256 of the running executable, read once. It
// is "" when the executable cannot be read, and then nothing is cached.
var executableDigest = sync.OnceValue(func() string {
	path, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
})

// path returns the file of the rewrite of the input with this digest under
// o, or "" when nothing is cached.
func (c rewriteCache) path(digest string, o instrument.Options) string {
	exe := executableDigest()
	if c.dir == "" || exe == "" {
		return ""
	}
	key := sha256.Sum256(fmt.Appendf(nil, "%s\x00%+v\x00%s", digest, o, exe))
	return filepath.Join(c.dir, hex.EncodeToString(key[:])+".wasm")
}

// get returns the cached rewrite at path, if there is an intact one.
func (c rewriteCache) get(path string) ([]byte, bool) {
	if path == "" {
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < sha256.Size {
		return nil, false
	}
	sum := sha256.Sum256(b[sha256.Size:])
	if !bytes.Equal(sum[:], b[:sha256.Size]) {
		_ = os.Remove(path) // damaged: instrumented again and rewritten
		return nil, false
	}
	dirquota.Touch(path) // used: a bounded cache directory keeps it longest
	return b[sha256.Size:], true
}

// put keeps out at path. It is best effort: a cache that cannot be written
// only costs the next load an instrumentation.
func (c rewriteCache) put(path string, out []byte) {
	if path == "" {
		return
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return
	}
	sum := sha256.Sum256(out)
	_ = atomicfile.Write(path, append(sum[:], out...))
}
