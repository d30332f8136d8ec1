package train

import (
	"fmt"
	"io"
	"os"

	"github.com/memfit/memfit/internal/regularfile"
	"github.com/memfit/memfit/safetensors"
)

// memfit's checkpoints are safetensors files (package safetensors) of F32
// tensors named by their dotted parameter paths, so other tools read the
// weights directly, with string metadata.

// Tensor is one named F32 array of a safetensors file.
type Tensor struct {
	Shape []int
	Data  []float32
}

// WriteSafetensors writes tensors and string metadata to path atomically:
// a temporary file in the same directory, fsync, rename, fsync of the
// directory. A crash leaves either the old file or the new one. Each
// tensor is converted to bytes as the writer reaches it.
func WriteSafetensors(path string, tensors map[string]Tensor, meta map[string]string) error {
	srcs := make([]safetensors.Source, 0, len(tensors))
	for n, t := range tensors {
		if numel(t.Shape) != len(t.Data) {
			return fmt.Errorf("safetensors: %s: shape %v does not hold %d values", n, t.Shape, len(t.Data))
		}
		srcs = append(srcs, safetensors.Source{Name: n, DType: safetensors.F32, Shape: t.Shape,
			Fill: func(w io.Writer) error { return safetensors.WriteFloat32s(w, t.Data) }})
	}
	return writeAtomic(path, func(w io.Writer) error { return safetensors.Write(w, meta, srcs) })
}

// ReadSafetensors reads an F32 safetensors file, checked as
// safetensors.Open checks every file (each tensor's byte range fits its
// shape, the ranges tile the data section exactly). Directories, FIFOs and
// other non-regular files are refused before they are opened (opening a
// FIFO would block).
func ReadSafetensors(path string) (map[string]Tensor, map[string]string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	for _, name := range f.Names() {
		if d := f.Header.Tensors[name].DType; d != safetensors.F32 {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s has dtype %s; memfit reads F32", path, name, d)
		}
	}
	out := make(map[string]Tensor, len(f.Header.Tensors))
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		d, err := t.Float32s()
		if err != nil {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s: %v", path, name, err)
		}
		out[name] = Tensor{Shape: t.Shape, Data: d}
	}
	meta := f.Header.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return out, meta, nil
}

// notRegular says what path is when it is not a regular file (after
// symbolic links): "a directory", "a named pipe (FIFO)", ...; "" for a
// regular file. It only stats, so a FIFO is never opened (which blocks).
func notRegular(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().IsRegular() {
		return "", nil
	}
	return regularfile.Describe(st.Mode()), nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}
