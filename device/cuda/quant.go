//go:build cuda || cudaemu

package cuda

import "github.com/memfit/memfit/device"

// Quantized weights (device/quant.go): the GPU dequantizes (k_dequant);
// products with a quantized B are device.QuantGemm's composition, a tile
// of columns of op(B) dequantized into a temporary for cuBLAS at a time
// (register.go records that the device lacks the fused product, so plans
// count the tiles); quantizing goes through the host, a chunk at a time
// (device.Quantize).

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
