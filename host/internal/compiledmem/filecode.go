package compiledmem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/tetratelabs/wazero"

	"github.com/wasmreconcile/wasmreconcile/host/internal/dirquota"
	"github.com/wasmreconcile/wasmreconcile/internal/atomicfile"
)

// ErrShared is returned by MapCode for machine code that another compiled
// module shares (identical bytes loaded into one engine): it may be running,
// and it was mapped, or left, when it was first compiled.
var ErrShared = errors.New("the machine code is shared with another compiled module")

// MapCode moves the machine code of c, compiled by wazero's optimizing
// compiler, out of anonymous memory: it writes the code to a file in dir,
// named by the code's sha256 (kept if it is already there with the same
// bytes), and maps that file over the code at the same address, read-only
// and executable, private to this process. From then on the kernel reads a
// page of code when it is first run, keeps it in the page cache, shared with
// any process that maps the same file, and may drop it under memory
// pressure and read it back, as it does an executable's text; the pages of
// code that never run (most of a Go guest's runtime and libraries) take no
// memory at all. It returns the number of bytes of code now backed by the
// file.
//
// Call it once c is compiled and before anything is instantiated from it. It
// changes nothing and returns an error when the code is not the optimizing
// compiler's, when it is shared with another compiled module (ErrShared), or
// when the file cannot be written, checked or mapped: the code then stays in
// anonymous memory and runs as before.
//
// The file must not be truncated while the code is mapped (a process
// running code past the new end would fault): keep dir private to the
// process, as the compilation cache it lives in must be. Replacing or
// removing the file is safe: the mapping keeps the file it mapped.
//
// MapCode also returns the code's sha256, which names the file. known,
// when not zero, is what an earlier MapCode returned for code compiled
// from the same module bytes, as wazero's compilation cache gives it back
// when an unloaded module wakes: MapCode then names the file by it without
// hashing the code (7 ms for a Go guest's 9 MiB). The file is compared
// with the code byte for byte all the same, so a known that does not match
// costs a hash and a rewrite, never a wrong mapping.
func MapCode(c wazero.CompiledModule, dir string, known [sha256.Size]byte) (int, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	code, refs, unlock, err := executable(c)
	if err != nil {
		return 0, sum, err
	}
	defer unlock()
	if refs != 1 {
		return 0, sum, ErrShared
	}
	if uintptr(unsafePointer(code))%uintptr(os.Getpagesize()) != 0 {
		return 0, sum, fmt.Errorf("the machine code at %p does not start a page", unsafePointer(code))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, sum, fmt.Errorf("machine code directory: %w", err)
	}
	var f *os.File
	if known != sum {
		sum = known
		f, _ = openSame(codePath(dir, sum), code) // when it fails, hash as if unknown
	}
	if f == nil {
		sum = hashCode(code)
		path := codePath(dir, sum)
		if f, err = openSame(path, code); err != nil {
			if err := atomicfile.Write(path, code); err != nil {
				return 0, sum, fmt.Errorf("writing the machine code to %s: %w", path, err)
			}
			// Checked again on the file that is mapped: the name could have
			// been replaced between the write and the open.
			if f, err = openSame(path, code); err != nil {
				return 0, sum, err
			}
		}
	}
	defer f.Close()
	dirquota.Touch(f.Name()) // used: a bounded cache directory keeps it longest
	if err := mapOver(code, f); err != nil {
		return 0, sum, fmt.Errorf("mapping %s over the machine code: %w", f.Name(), err)
	}
	return len(code), sum, nil
}

// codeHashes counts the machine code MapCode hashed, for its tests.
var codeHashes atomic.Int64

func hashCode(code []byte) [sha256.Size]byte {
	codeHashes.Add(1)
	return sha256.Sum256(code)
}

// codePath is the file in dir that holds the machine code of digest sum.
func codePath(dir string, sum [sha256.Size]byte) string {
	return filepath.Join(dir, hex.EncodeToString(sum[:])+".code")
}

// openSame opens the file at path if it holds exactly want.
func openSame(path string, want []byte) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if same, err := sameContent(f, want); err != nil || !same {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s does not hold the machine code its name is the digest of", path)
		}
		return nil, err
	}
	return f, nil
}

// sameContent reports whether f, from its start, holds exactly want. It
// reads the file instead of mapping it, so that checking takes no memory
// beyond its buffer.
func sameContent(f *os.File, want []byte) (bool, error) {
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(want)) {
		return false, err
	}
	buf := make([]byte, 256<<10)
	for off := 0; off < len(want); {
		n, err := f.ReadAt(buf[:min(len(buf), len(want)-off)], int64(off))
		if n > 0 && !bytes.Equal(buf[:n], want[off:off+n]) {
			return false, nil
		}
		off += n
		if err != nil && (err != io.EOF || off < len(want)) {
			return false, err
		}
	}
	return true, nil
}
