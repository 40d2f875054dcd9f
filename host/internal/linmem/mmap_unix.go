//go:build unix

package linmem

import "syscall"

// mmap reserves n bytes of zeroed, private, anonymous memory. MAP_NORESERVE
// keeps the kernel from accounting the untouched part against overcommit.
func mmap(n uint64) ([]byte, bool) {
	if n == 0 || n > 1<<40 {
		return nil, false
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return nil, false
	}
	return b, true
}

func munmap(b []byte) { _ = syscall.Munmap(b) }
