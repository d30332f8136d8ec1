package train

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// A safetensors file: an 8-byte little-endian header length, a JSON header
// mapping tensor names to dtype, shape and byte range, then the raw
// little-endian data. memfit writes F32 tensors named by their dotted
// parameter paths, so other tools read the weights directly.

// Tensor is one named F32 array of a safetensors file.
type Tensor struct {
	Shape []int
	Data  []float32
}

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// maxHeader bounds the JSON header a reader accepts, so a corrupt length
// cannot make it allocate gigabytes.
const maxHeader = 64 << 20

// WriteSafetensors writes tensors and string metadata to path atomically:
// a temporary file in the same directory, fsync, rename, fsync of the
// directory. A crash leaves either the old file or the new one.
func WriteSafetensors(path string, tensors map[string]Tensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	for _, n := range names {
		t := tensors[n]
		if numel(t.Shape) != len(t.Data) {
			return fmt.Errorf("safetensors: %s: shape %v does not hold %d values", n, t.Shape, len(t.Data))
		}
		size := int64(4 * len(t.Data))
		header[n] = stEntry{DType: "F32", Shape: append([]int{}, t.Shape...), Offsets: [2]int64{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces to 8 bytes, as the format recommends.
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	return writeAtomic(path, func(w io.Writer) error {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
		if _, err := w.Write(n[:]); err != nil {
			return err
		}
		if _, err := w.Write(hj); err != nil {
			return err
		}
		buf := make([]byte, 0, 1<<16)
		for _, name := range names {
			for _, v := range tensors[name].Data {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
				if len(buf) == cap(buf) {
					if _, err := w.Write(buf); err != nil {
						return err
					}
					buf = buf[:0]
				}
			}
		}
		_, err := w.Write(buf)
		return err
	})
}

// ReadSafetensors reads an F32 safetensors file, checking that the header
// and the data agree: every tensor's byte range fits its shape, and the
// ranges tile the data section exactly (no overlaps, no holes), as the
// format requires. Directories, FIFOs and other non-regular files are
// refused before they are opened (opening a FIFO would block).
func ReadSafetensors(path string) (map[string]Tensor, map[string]string, error) {
	if what, err := notRegular(path); err != nil {
		return nil, nil, err
	} else if what != "" {
		return nil, nil, fmt.Errorf("safetensors: %s is %s, not a safetensors file", path, what)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() { // replaced since checkRegular
		return nil, nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: file of %d bytes is too short for a header", path, st.Size())
	}
	hlen := binary.LittleEndian.Uint64(n[:])
	if hlen > maxHeader || int64(hlen) > st.Size()-8 {
		return nil, nil, fmt.Errorf("safetensors: %s: header length %d does not fit a file of %d bytes", path, hlen, st.Size())
	}
	hj := make([]byte, hlen)
	if _, err := io.ReadFull(f, hj); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: reading header: %v", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hj, &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: header is not JSON: %v", path, err)
	}
	dataLen := st.Size() - 8 - int64(hlen)
	meta := map[string]string{}
	entries := map[string]stEntry{}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors: %s: metadata: %v", path, err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s: %v", path, name, err)
		}
		if e.DType != "F32" {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s has dtype %s; memfit reads F32", path, name, e.DType)
		}
		count := numel(e.Shape)
		if count < 0 || e.Offsets[0] < 0 || e.Offsets[1] != e.Offsets[0]+4*int64(count) || e.Offsets[1] > dataLen {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s: shape %v and byte range %v do not fit %d data bytes", path, name, e.Shape, e.Offsets, dataLen)
		}
		entries[name] = e
	}
	if err := checkTiling(entries, dataLen); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: %v", path, err)
	}
	out := make(map[string]Tensor, len(entries))
	for name, e := range entries {
		b := make([]byte, e.Offsets[1]-e.Offsets[0])
		if _, err := f.ReadAt(b, 8+int64(hlen)+e.Offsets[0]); err != nil {
			return nil, nil, fmt.Errorf("safetensors: %s: tensor %s: %v", path, name, err)
		}
		d := make([]float32, len(b)/4)
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		out[name] = Tensor{Shape: e.Shape, Data: d}
	}
	return out, meta, nil
}

// checkTiling checks that the tensors' byte ranges cover [0, dataLen)
// exactly once. Overlapping ranges would let one corrupt write show up in
// two tensors, and a hole is bytes no tensor accounts for; both mean the
// header does not describe the data.
func checkTiling(entries map[string]stEntry, dataLen int64) error {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := entries[names[i]].Offsets, entries[names[j]].Offsets
		if a != b {
			return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
		}
		return names[i] < names[j]
	})
	var end int64
	prev := ""
	for _, n := range names {
		o := entries[n].Offsets
		switch {
		case o[0] < end:
			return fmt.Errorf("tensors %s %v and %s %v overlap", prev, entries[prev].Offsets, n, o)
		case o[0] > end && prev == "":
			return fmt.Errorf("tensor %s %v is the first; data bytes [0 %d] before it belong to no tensor", n, o, o[0])
		case o[0] > end:
			return fmt.Errorf("tensors %s %v and %s %v leave data bytes [%d %d] between them that belong to no tensor", prev, entries[prev].Offsets, n, o, end, o[0])
		}
		if o[1] > end || prev == "" {
			end, prev = o[1], n
		}
	}
	if end != dataLen {
		if prev == "" {
			return fmt.Errorf("%d data bytes but no tensors", dataLen)
		}
		return fmt.Errorf("tensor %s %v is the last, but the data section holds %d bytes (%d belong to no tensor)", prev, entries[prev].Offsets, dataLen, dataLen-end)
	}
	return nil
}

// notRegular says what path is when it is not a regular file (after
// symbolic links): "a directory", "a named pipe (FIFO)", ...; "" for a
// regular file. It only stats, so a FIFO is never opened (which blocks).
func notRegular(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	m := st.Mode()
	switch {
	case m.IsRegular():
		return "", nil
	case m.IsDir():
		return "a directory", nil
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)", nil
	case m&os.ModeSocket != 0:
		return "a socket", nil
	case m&os.ModeDevice != 0:
		return "a device", nil
	}
	return fmt.Sprintf("not a regular file (mode %v)", m), nil
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
