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

	"github.com/tetratelabs/wazero"

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
func MapCode(c wazero.CompiledModule, dir string) (int, error) {
	code, refs, unlock, err := executable(c)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if refs != 1 {
		return 0, ErrShared
	}
	if uintptr(unsafePointer(code))%uintptr(os.Getpagesize()) != 0 {
		return 0, fmt.Errorf("the machine code at %p does not start a page", unsafePointer(code))
	}
	sum := sha256.Sum256(code)
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".code")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("machine code directory: %w", err)
	}
	f, err := openSame(path, code)
	if err != nil {
		if err := atomicfile.Write(path, code); err != nil {
			return 0, fmt.Errorf("writing the machine code to %s: %w", path, err)
		}
		// Checked again on the file that is mapped: the name could have been
		// replaced between the write and the open.
		if f, err = openSame(path, code); err != nil {
			return 0, err
		}
	}
	defer f.Close()
	if err := mapOver(code, f); err != nil {
		return 0, fmt.Errorf("mapping %s over the machine code: %w", path, err)
	}
	return len(code), nil
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
