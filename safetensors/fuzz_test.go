package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

// FuzzDecode feeds arbitrary bytes to the header parser. Whatever it
// accepts must be self-consistent: every tensor's range inside the data
// and of its shape's size, the ranges tiling the data, the floating types
// converting, and Write reproducing a file that decodes to the same
// header and bytes. Seeds: testdata/fuzz/FuzzDecode and the f.Add calls.
func FuzzDecode(f *testing.F) {
	f.Add(file(`{}`, 0))
	f.Add(file(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[3],"data_offsets":[4,7]},"e":{"dtype":"F64","shape":[0],"data_offsets":[7,7]}}`, 7))
	f.Add(file(`{"w":{"dtype":"F32","shape":[3,5,17,257,641,65537,6700417],"data_offsets":[8,4]}}`, 8))
	f.Add(file(`{"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}}`, 0))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.MaxUint64))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := safetensors.Decode(b)
		if err != nil {
			return
		}
		var covered int64
		var srcs []safetensors.Source
		for name, e := range h.Tensors {
			size, err := safetensors.ByteSize(e.DType, e.Shape)
			if err != nil || e.Offsets[0] < 0 || e.Offsets[1] > int64(len(data)) || e.Offsets[1]-e.Offsets[0] != size {
				t.Fatalf("accepted tensor %s %+v (size %d, %v) over %d data bytes", name, e, size, err, len(data))
			}
			covered += size
			raw := data[e.Offsets[0]:e.Offsets[1]]
			switch e.DType {
			case safetensors.F32, safetensors.F16, safetensors.BF16, safetensors.F64:
				v, err := safetensors.Float32s(e.DType, raw)
				if err != nil || int64(len(v)) != size/int64(e.DType.Size()) {
					t.Fatalf("tensor %s: %d values, %v", name, len(v), err)
				}
			}
			srcs = append(srcs, safetensors.Source{Name: name, DType: e.DType, Shape: e.Shape, Data: raw})
		}
		if covered != int64(len(data)) {
			t.Fatalf("tensors cover %d of %d data bytes", covered, len(data))
		}
		var buf bytes.Buffer
		if err := safetensors.Write(&buf, h.Metadata, srcs); err != nil {
			t.Fatalf("rewriting an accepted file: %v", err)
		}
		h2, data2, err := safetensors.Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("reading a rewritten file: %v", err)
		}
		if len(h2.Tensors) != len(h.Tensors) || len(data2) != len(data) || len(h2.Metadata) != len(h.Metadata) {
			t.Fatalf("rewritten: %d tensors, %d bytes; was %d, %d", len(h2.Tensors), len(data2), len(h.Tensors), len(data))
		}
		for k, v := range h.Metadata {
			if h2.Metadata[k] != v {
				t.Fatalf("metadata %q: %q rewritten as %q", k, v, h2.Metadata[k])
			}
		}
		for name, e := range h.Tensors {
			e2 := h2.Tensors[name]
			if e2.DType != e.DType || !bytes.Equal(data[e.Offsets[0]:e.Offsets[1]], data2[e2.Offsets[0]:e2.Offsets[1]]) {
				t.Fatalf("tensor %s differs once rewritten", name)
			}
		}
	})
}
