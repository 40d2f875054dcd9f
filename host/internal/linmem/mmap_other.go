//go:build !unix

package linmem

func mmap(uint64) ([]byte, bool) { return nil, false }

func munmap([]byte) {}
