package safetensors

import (
	"errors"
	"fmt"
	"io"
	"sort"
)

// Source is one tensor to write: its name, dtype and shape, and its bytes,
// either at hand (Data) or produced when the writer reaches it (Fill),
// so that an export can compute each tensor in turn and hold one at a
// time.
type Source struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte                  // the tensor's bytes, when Fill is nil
	Fill  func(w io.Writer) error // if set, writes exactly the tensor's bytes
}

// Write writes a safetensors file to w: the header (metadata, omitted when
// empty, and every tensor's entry), then each tensor's bytes. Tensors are
// laid out by descending element size, then by name, as the reference
// implementation lays them out, so that with the header padded to 8 bytes
// every tensor starts aligned to its element size. A tensor whose Data or
// Fill gives other than its shape's byte count is an error (the file
// would not be valid), as are two tensors of one name and a Source with
// both Data and Fill.
func Write(w io.Writer, meta map[string]string, tensors []Source) error {
	order := make([]*Source, len(tensors))
	for i := range tensors {
		order[i] = &tensors[i]
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.DType.Bits() != b.DType.Bits() {
			return a.DType.Bits() > b.DType.Bits()
		}
		return a.Name < b.Name
	})
	entries := make(map[string]Entry, len(order))
	sizes := make([]int64, len(order))
	var off int64
	for i, t := range order {
		if _, dup := entries[t.Name]; dup || t.Name == metadataKey {
			return fmt.Errorf("safetensors: tensor name %q given twice or reserved", t.Name)
		}
		if t.Data != nil && t.Fill != nil {
			return fmt.Errorf("safetensors: tensor %s: both Data and Fill", t.Name)
		}
		size, err := ByteSize(t.DType, t.Shape)
		if err != nil {
			return fmt.Errorf("safetensors: tensor %s: %v", t.Name, err)
		}
		if t.Fill == nil && int64(len(t.Data)) != size {
			return fmt.Errorf("safetensors: tensor %s: %d bytes for shape %v of %s, which takes %d", t.Name, len(t.Data), t.Shape, t.DType, size)
		}
		entries[t.Name] = Entry{DType: t.DType, Shape: t.Shape, Offsets: [2]int64{off, off + size}}
		sizes[i] = size
		off += size
	}
	header, err := EncodeHeader(entries, meta)
	if err != nil {
		return fmt.Errorf("safetensors: %v", err)
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	for i, t := range order {
		if t.Fill == nil {
			if _, err := w.Write(t.Data); err != nil {
				return err
			}
			continue
		}
		cw := &exactWriter{w: w, left: sizes[i]}
		if err := t.Fill(cw); err != nil {
			if errors.Is(err, errOverrun) {
				return fmt.Errorf("safetensors: tensor %s: Fill wrote more than its %d bytes", t.Name, sizes[i])
			}
			return fmt.Errorf("safetensors: tensor %s: %w", t.Name, err)
		}
		if cw.left != 0 {
			return fmt.Errorf("safetensors: tensor %s: Fill wrote %d of its %d bytes", t.Name, sizes[i]-cw.left, sizes[i])
		}
	}
	return nil
}

var errOverrun = errors.New("write past the tensor's end")

// exactWriter passes on at most left bytes, so that a Fill that writes
// too much fails before the file is corrupt.
type exactWriter struct {
	w    io.Writer
	left int64
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, errOverrun
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}
