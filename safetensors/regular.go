package safetensors

import (
	"fmt"

	"github.com/memfit/memfit/internal/regularfile"
)

// mapping is a read-only view of a whole file: a memory map where the
// system has one (mmap_unix.go), else the file read into memory.
type mapping struct{ data []byte }

// mapFile maps the regular file at path.
func mapFile(path string) (*mapping, error) {
	f, st, err := regularfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if int64(int(st.Size())) != st.Size() {
		return nil, fmt.Errorf("%s: %d bytes do not fit this machine's address space", path, st.Size())
	}
	b, err := mapData(f, int(st.Size()))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &mapping{data: b}, nil
}

func (m *mapping) close() error {
	b := m.data
	m.data = nil
	return unmapData(b)
}
