// Package atomicfile writes a file whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes b to dest through a temporary file in the same directory,
// renamed over dest once complete, with mode 0644: a reader of dest sees the
// old content or the new, never part of it, and a failed write leaves no
// temporary file behind.
func Write(dest string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, dest)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
