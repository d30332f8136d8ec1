//go:build !unix

package safetensors

import (
	"io"
	"os"
)

// mapData reads f whole: systems without mmap hold the file in memory.
func mapData(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

func unmapData([]byte) error { return nil }
