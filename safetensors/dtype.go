package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
)

// DType is an element type as a safetensors header names it ("F32",
// "BF16", "U8", ...).
type DType string

// The element types of the format. The F8, F6 and F4 types are the OCP
// microscaling formats (F8_E4M3 is PyTorch's float8_e4m3fn); F6 and F4
// elements are packed, several to a byte.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8_E5M2 DType = "F8_E5M2"
	F8_E4M3 DType = "F8_E4M3"
	F8_E8M0 DType = "F8_E8M0"
	F6_E2M3 DType = "F6_E2M3"
	F6_E3M2 DType = "F6_E3M2"
	F4      DType = "F4"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
	C64     DType = "C64"
)

// dtypeBits is every dtype the format defines, with its element size in
// bits.
var dtypeBits = map[DType]int{
	BOOL: 8, U8: 8, I8: 8, F8_E5M2: 8, F8_E4M3: 8, F8_E8M0: 8,
	F6_E2M3: 6, F6_E3M2: 6, F4: 4,
	I16: 16, U16: 16, F16: 16, BF16: 16,
	I32: 32, U32: 32, F32: 32,
	F64: 64, I64: 64, U64: 64, C64: 64,
}

// Known reports whether the format defines d.
func (d DType) Known() bool { return dtypeBits[d] != 0 }

// Bits is the size of one element in bits; 0 for an unknown dtype.
func (d DType) Bits() int { return dtypeBits[d] }

// Size is the size of one element in bytes; 0 for an unknown dtype and
// for the packed F6 and F4 types, whose elements are smaller than a byte
// (ByteSize sizes their tensors).
func (d DType) Size() int {
	if b := dtypeBits[d]; b%8 == 0 {
		return b / 8
	}
	return 0
}

// NumElements is the element count of shape, or an error when a dimension
// is negative or the product does not fit an int64 (a hostile shape such
// as [2^40, 2^40] must not wrap around to a small count).
func NumElements(shape []int) (int64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v has more elements than an int64 counts", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// ByteSize is the number of bytes a tensor of dtype d and shape takes, or
// an error for an unknown dtype, a shape whose element count overflows, or
// packed elements that do not end on a byte.
func ByteSize(d DType, shape []int) (int64, error) {
	b := d.Bits()
	if b == 0 {
		return 0, fmt.Errorf("unknown dtype %q", string(d))
	}
	n, err := NumElements(shape)
	if err != nil {
		return 0, err
	}
	hi, nbits := bits.Mul64(uint64(n), uint64(b))
	if hi != 0 || nbits/8 > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v of %s has more bytes than an int64 counts", shape, d)
	}
	if nbits%8 != 0 {
		return 0, fmt.Errorf("shape %v of %s ends inside a byte (%d bits)", shape, d, nbits)
	}
	return int64(nbits / 8), nil
}

// Float32s converts little-endian elements of dtype d to float32: F32 as
// stored, F16 and BF16 widened exactly, F64 rounded to nearest. Other
// dtypes are an error (read their bytes as they are). b must hold a whole
// number of elements.
func Float32s(d DType, b []byte) ([]float32, error) {
	size := d.Size()
	switch d {
	case F32, F16, BF16, F64:
	default:
		return nil, fmt.Errorf("dtype %s does not convert to float32 (memfit converts F32, F16, BF16 and F64)", d)
	}
	if len(b)%size != 0 {
		return nil, fmt.Errorf("%d bytes are not a whole number of %s elements", len(b), d)
	}
	out := make([]float32, len(b)/size)
	switch d {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	}
	return out, nil
}

// F16ToFloat32 widens an IEEE 754 half-precision value exactly (subnormals,
// infinities and NaN payloads included).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// WriteFloat32s writes v to w as little-endian F32, through a small
// buffer: the bytes of a whole tensor are never held at once.
func WriteFloat32s(w io.Writer, v []float32) error {
	return writeStream(w, v, 4, func(b []byte, x float32) []byte {
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	})
}

// WriteBF16s writes v to w as little-endian BF16, each value rounded by
// Float32ToBF16, through a small buffer as WriteFloat32s.
func WriteBF16s(w io.Writer, v []float32) error {
	return writeStream(w, v, 2, func(b []byte, x float32) []byte {
		return binary.LittleEndian.AppendUint16(b, Float32ToBF16(x))
	})
}

// writeStream appends each value's bytes (size of them) to a 64 KiB
// buffer, writing it whenever it fills.
func writeStream(w io.Writer, v []float32, size int, put func([]byte, float32) []byte) error {
	buf := make([]byte, 0, 64<<10)
	for _, x := range v {
		buf = put(buf, x)
		if len(buf)+size > cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err := w.Write(buf)
	return err
}

// Float32ToBF16 rounds x to bfloat16, to nearest with ties to even (as
// PyTorch's .to(torch.bfloat16)); a NaN stays a NaN, quieted.
func Float32ToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if x != x {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
