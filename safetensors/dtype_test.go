package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

func TestFloat32s(t *testing.T) {
	le16 := func(v ...uint16) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint16(b, x)
		}
		return b
	}
	f64 := func(v ...float64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return b
	}
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		d    safetensors.DType
		b    []byte
		want []float32
	}{
		// F16: 1, -2, the smallest subnormal 2^-24, the largest 65504, +Inf.
		{"F16", safetensors.F16, le16(0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00), []float32{1, -2, 1.0 / (1 << 24), 65504, inf}},
		// BF16 is the top half of an F32.
		{"BF16", safetensors.BF16, le16(0x3f80, 0xc040, 0x7f80), []float32{1, -3, inf}},
		{"F64 rounds", safetensors.F64, f64(0.1, 1e300, -2), []float32{0.1, inf, -2}},
		{"F32", safetensors.F32, binary.LittleEndian.AppendUint32(nil, math.Float32bits(-0.5)), []float32{-0.5}},
	}
	for _, c := range cases {
		got, err := safetensors.Float32s(c.d, c.b)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if v, err := safetensors.Float32s(safetensors.F16, le16(0x7e00)); err != nil || !math.IsNaN(float64(v[0])) {
		t.Errorf("F16 NaN reads %v, %v", v, err)
	}
	for _, d := range []safetensors.DType{safetensors.U8, safetensors.I32, safetensors.F8_E4M3, "X"} {
		if _, err := safetensors.Float32s(d, []byte{0, 0, 0, 0}); err == nil {
			t.Errorf("%s converted to float32", d)
		}
	}
	if _, err := safetensors.Float32s(safetensors.F32, []byte{0, 0, 0}); err == nil {
		t.Error("3 bytes converted as F32")
	}
}

// WriteBF16s rounds to nearest, ties to even, as PyTorch does, keeps NaN
// a NaN, and reads back through Float32s.
func TestWriteBF16s(t *testing.T) {
	in := []float32{1, 1 + 1.0/256, 1 + 3.0/256, -2.5, float32(math.Inf(-1)), float32(math.NaN()), 3.0000002}
	want := []float32{1, 1, 1 + 4.0/256, -2.5, float32(math.Inf(-1)), float32(math.NaN()), 3}
	var b bytes.Buffer
	if err := safetensors.WriteBF16s(&b, in); err != nil {
		t.Fatal(err)
	}
	got, err := safetensors.Float32s(safetensors.BF16, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
			t.Errorf("%v: %v, want %v", in[i], got[i], want[i])
		}
	}
}
