//go:build unix

package safetensors

import (
	"os"
	"syscall"
)

// nonBlocking opens files without blocking: opening a FIFO for reading
// waits for a writer, and one may be put in a file's place between the
// stat and the open.
const nonBlocking = syscall.O_NONBLOCK

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
