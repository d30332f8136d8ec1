package safetensors

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// openRegular opens path for reading only if it is a regular file: it
// stats first (opening a FIFO blocks until a writer comes), opens without
// blocking where the system allows, and checks the opened file again, in
// case something else was put in its place between the two.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, describe(st.Mode()))
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlocking, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err = f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is %s, not a regular file", path, describe(st.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadFile reads a small file beside the tensors (an index, a config.json)
// as openRegular opens it, refusing one over limit bytes before reading
// it. Errors name the path.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the limit of %d for this file", path, st.Size(), limit)
	}
	// The size may have grown since the stat: read one byte more than
	// the limit to know.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over the limit of %d bytes for this file", path, limit)
	}
	return b, nil
}

// modeNames are the kinds of file that are not regular, as errors name
// them.
var modeNames = []struct {
	bit  fs.FileMode
	name string
}{
	{fs.ModeDir, "a directory"},
	{fs.ModeNamedPipe, "a named pipe (FIFO)"},
	{fs.ModeSocket, "a socket"},
	{fs.ModeCharDevice, "a character device"},
	{fs.ModeDevice, "a device"},
	{fs.ModeIrregular, "an irregular file"},
}

// describe names a file mode that is not a regular file's.
func describe(m fs.FileMode) string {
	for _, k := range modeNames {
		if m&k.bit != 0 {
			return k.name
		}
	}
	return fmt.Sprintf("of mode %v", m)
}

// mapping is a read-only view of a whole file: a memory map where the
// system has one (mmap_unix.go), else the file read into memory.
type mapping struct{ data []byte }

// mapFile maps the regular file at path.
func mapFile(path string) (*mapping, error) {
	f, st, err := openRegular(path)
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
