//go:build unix

package safetensors

import (
	"os"
	"syscall"
)

// mapData maps size bytes of f read-only.
func mapData(f *os.File, size int) ([]byte, error) {
	if size == 0 {
		return nil, nil // mmap refuses an empty length
	}
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapData(b []byte) error {
	if b == nil {
		return nil
	}
	return syscall.Munmap(b)
}
