package compiledmem

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapOver maps f, from its start, over code, at code's address, read-only
// and executable and private: the kernel replaces the anonymous pages in one
// step, and a page of code is read from f when it is first run.
//
// A failed mapping with MAP_FIXED may leave the range unmapped on some
// kernels, so the mapping is first tried elsewhere: what makes it fail (a
// file system mounted noexec, a file not readable) fails there, with the
// code untouched.
func mapOver(code []byte, f *os.File) error {
	addr := uintptr(unsafePointer(code))
	probe, _, errno := syscall.Syscall6(syscall.SYS_MMAP, 0, uintptr(len(code)),
		syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE, f.Fd(), 0)
	if errno != 0 {
		return errno
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_MUNMAP, probe, uintptr(len(code)), 0); errno != 0 {
		return fmt.Errorf("unmapping the trial mapping: %w", errno)
	}
	got, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(len(code)),
		syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE|syscall.MAP_FIXED, f.Fd(), 0)
	if errno != 0 {
		return errno
	}
	if got != addr {
		return fmt.Errorf("the kernel mapped it at %#x, not at %#x", got, addr)
	}
	return nil
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// mapFile maps the first size bytes of f, read-only and executable.
//
// The address comes from x/sys/unix's Mmap, as wazero's own code's does:
// wazero unmaps code with unix.Munmap, which knows only the mappings
// unix.Mmap made. The file is then mapped over it as MapCode maps it:
// mapped at an address of the kernel's choosing, a mapping this large may
// start on a 2 MiB boundary, where the kernel maps the page cache's large
// folios whole, 2 MiB resident for one page run.
func mapFile(f *os.File, size int) ([]byte, error) {
	code, err := unix.Mmap(-1, 0, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	if err := mapOver(code, f); err != nil {
		_ = unix.Munmap(code)
		return nil, err
	}
	return code, nil
}

// unmap unmaps what mapFile mapped.
func unmap(code []byte) {
	if code != nil {
		_ = unix.Munmap(code)
	}
}
