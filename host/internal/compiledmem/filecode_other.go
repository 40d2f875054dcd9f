//go:build !linux

package compiledmem

import (
	"errors"
	"os"
	"unsafe"
)

// mapOver is Linux's only: elsewhere the code stays in anonymous memory.
func mapOver([]byte, *os.File) error {
	return errors.New("backing machine code with a file is implemented for Linux only")
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// mapFile is Linux's only, as mapOver.
func mapFile(*os.File, int) ([]byte, error) {
	return nil, errors.New("backing machine code with a file is implemented for Linux only")
}

func unmap([]byte) {}
