package safetensors

import (
	"fmt"
	"maps"
	"slices"
)

// Tensor is one tensor of an opened file: its dtype, shape and
// little-endian bytes, which alias the file's memory map until the file is
// closed.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte
	File  string // the path of the file it comes from
}

// Len is the tensor's element count.
func (t Tensor) Len() int64 {
	n, _ := NumElements(t.Shape) // checked when the header was parsed
	return n
}

// Float32s converts the tensor's elements to float32 (see the function
// Float32s for the dtypes it takes).
func (t Tensor) Float32s() ([]float32, error) { return Float32s(t.DType, t.Data) }

// File is one safetensors file, memory-mapped, whose header has been
// checked against its data (ParseHeader).
type File struct {
	Path   string
	Header *Header
	data   []byte
	m      *mapping
}

// Open maps the safetensors file at path and checks it. Anything but a
// regular file is refused before it is opened. Errors begin
// "safetensors: PATH: ".
func Open(path string) (*File, error) {
	m, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %v", err)
	}
	h, data, err := Decode(m.data)
	if err != nil {
		m.close()
		return nil, fmt.Errorf("safetensors: %s: %v", path, err)
	}
	return &File{Path: path, Header: h, data: data, m: m}, nil
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (Tensor, bool) {
	e, ok := f.Header.Tensors[name]
	if !ok {
		return Tensor{}, false
	}
	return Tensor{DType: e.DType, Shape: e.Shape, Data: f.data[e.Offsets[0]:e.Offsets[1]:e.Offsets[1]], File: f.Path}, true
}

// Names lists the file's tensors, sorted.
func (f *File) Names() []string {
	return slices.Sorted(maps.Keys(f.Header.Tensors))
}

// Close unmaps the file: its tensors' Data is invalid afterwards.
func (f *File) Close() error {
	if f.m == nil {
		return nil
	}
	err := f.m.close()
	f.m, f.data = nil, nil
	return err
}
