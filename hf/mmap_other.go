//go:build !unix

package hf

import "os"

// mapping holds a whole file: systems without mmap read it.
type mapping struct{ data []byte }

func mapFile(path string) (*mapping, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &mapping{data: b}, nil
}

func (m *mapping) close() error { m.data = nil; return nil }
