//go:build cuda || cudaemu

package cuda

import (
	"math"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda/internal/cu"
)

// Quantized weights (device/quant.go): the GPU dequantizes (k_dequant);
// products with a quantized B are device.QuantGemm's composition, a tile
// of columns of op(B) dequantized into a temporary for cuBLAS at a time
// (register.go records that the device lacks the fused product, so plans
// count the tiles); it quantizes too (Quantize), bit for bit the host's
// definition.

// Dequantize writes rows [r0, r1) × columns [c0, c1) of the quantized
// matrix src into dst.
func (d *Device) Dequantize(dst, src device.View, r0, r1, c0, c1 int) {
	rows, cols := device.QuantMatrix(src)
	w := c1 - c0
	n := int64((r1 - r0) * w)
	if n == 0 {
		return
	}
	var fmtCode, a0, codes, nested int64
	switch src.DType {
	case device.NF4:
		l := device.NF4LayoutOf(rows * cols)
		a0, codes, nested = l.AbsmaxAt(), l.CodesAt(), l.NestedAt()
	case device.Int8:
		l := device.Int8LayoutOf(rows * cols)
		fmtCode, a0, codes = 1, l.AbsmaxAt(), l.CodesAt()
	default:
		panic("cuda: dequantizing " + src.DType.String())
	}
	d.launch("k_dequant", gridFor(n), new(args).i64(n).i64(int64(w)).op(dst).op(src).
		i64(fmtCode).i64(int64(cols)).i64(int64(r0)).i64(int64(c0)).i64(a0).i64(codes).i64(nested))
}

var _ device.Dequantizer = (*Device)(nil)

// Quantize writes src quantized into dst on the GPU, the bytes of
// device.QuantizeNF4 and device.QuantizeInt8: the host path moved every
// element over and back, a chunk at a time, and took seconds over an 8B
// model's weights on a 16-core host (92 s on one core). It takes no
// device memory: NF4's first pass (k_quant_absmax) leaves the blocks'
// absmaxes at the front of dst's storage, which holds at least four bytes
// per block, for the host's double quantization (device.NF4Nest: a
// compensated sum over every block, in order, then a code per block),
// while the second (k_quant_nf4) writes the codes; Int8 is one pass
// (k_quant_int8). A non-finite element is a *device.NonFiniteError
// naming the first, found before anything else is written.
func (d *Device) Quantize(dst, src device.View) error {
	n := src.Len()
	if n == 0 {
		if dst.DType == device.NF4 {
			return device.WriteNF4(d, dst.Buf, device.NF4LayoutOf(0), &device.NF4Parts{Levels: device.NF4Levels(), Map: device.DynamicMap()})
		}
		return nil
	}
	out := uint64(dst.Buf.Block.Ptr())
	bad := d.scratch + 8
	d.must("cuMemsetD32Async", d.w.do(func() error { return d.memset(bad, 0xffffffff, 2) }))
	blocks := int64((n + device.QuantBlock - 1) / device.QuantBlock)
	switch dst.DType {
	case device.NF4:
		l := device.NF4LayoutOf(n)
		d.launch("k_quant_absmax", gridFor(blocks), new(args).i64(int64(n)).op(src).u64(out).u64(uint64(bad)))
		if err := d.nonFinite(src, bad); err != nil {
			return err
		}
		absmax := make([]float32, blocks)
		d.Read(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(absmax))), 4*len(absmax)), dst.Buf, 0)
		a := new(args).i64(int64(n)).op(src).u64(out).i64(l.CodesAt())
		levels := device.NF4Levels()
		for k := 0; k < 16; k += 2 {
			lo, hi := midpoint(levels, k), midpoint(levels, k+1)
			a.u64(uint64(lo) | uint64(hi)<<32)
		}
		d.launch("k_quant_nf4", gridFor(blocks), a)
		m := device.DynamicMap()
		p := device.NF4Parts{Levels: levels, Map: m, Nested: make([]float32, l.Nested), AbsmaxCodes: make([]byte, l.Blocks)}
		p.Offset = device.NF4Nest(p.AbsmaxCodes, p.Nested, absmax, &m)
		return device.WriteNF4(d, dst.Buf, l, &p)
	case device.Int8:
		l := device.Int8LayoutOf(n)
		d.launch("k_quant_int8", gridFor(blocks), new(args).i64(int64(n)).op(src).u64(out).i64(l.AbsmaxAt()).i64(l.CodesAt()).u64(uint64(bad)))
		return d.nonFinite(src, bad)
	}
	panic("cuda: quantizing to " + dst.DType.String())
}

// midpoint is the F32 bits of the midpoint between NF4 levels k and k+1
// as device's definition forms it (their F32 sum, halved), or 0 past the
// last (k_quant_nf4 reads 15).
func midpoint(levels [16]float32, k int) uint32 {
	if k >= 15 {
		return 0
	}
	return math.Float32bits(float32(levels[k]+levels[k+1]) / 2)
}

// nonFinite reads the first non-finite element a quantizing kernel
// recorded at bad (all ones: none) and returns it as an error.
func (d *Device) nonFinite(src device.View, bad cu.DevicePtr) error {
	var at uint64
	d.must("cuMemcpyDtoH", d.w.do(func() error { return d.readBack(unsafe.Pointer(&at), bad, 8) }))
	if at == math.MaxUint64 {
		return nil
	}
	return &device.NonFiniteError{Index: int(at), Value: device.ElementF32(d, src, int(at))}
}

var _ device.Quantizer = (*Device)(nil)
