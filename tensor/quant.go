package tensor

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Quantized frozen weights (device.NF4, device.Int8). A quantized tensor
// is a leaf that never requires grad: made by ConvertTo from a float
// tensor, by QuantizeFloat32 from host values, or by FromNF4 from a
// checkpoint's parts. Linear takes it as its weight and MatMul as its
// second operand: the product dequantizes it as it reads it (on the CPU
// inside the GEMM's packing; elsewhere a tile at a time,
// device.QuantGemm), in the dtype of the other operand after autocast,
// so no 16-bit or F32 copy of the weight exists, and backward gives the
// other operand's gradient only. Cast and ConvertTo to a float dtype,
// Float32s and Float64s dequantize it (an export, a fingerprint); every
// other op refuses it with a *Error naming the op.

// quantizedOps are the ops (mustLive's names) a quantized tensor may
// reach.
var quantizedOps = map[string]bool{
	"matmul": true, "linear": true, "cast": true, "ConvertTo": true, "Float64s": true,
	"View": true, "StorageKey": true, "StorageBytes": true, "CopyStorage": true,
	"AllocStorage": true, "Alias": true, "CopyStorageFrom": true,
}

// dequantized returns a quantized t's values in dtype, a new contiguous
// tensor counted under cat.
func (t *Tensor) dequantized(dtype DType, cat memory.Category) *Tensor {
	src := t.view()
	out := mustAlloc(t.st.dev, dtype, t.shape, cat)
	rows, cols := device.QuantMatrix(src)
	device.Dequantize(t.st.dev, out.view(), src, 0, rows, 0, cols)
	return out
}

// QuantizeFloat32 returns a new tensor of dtype NF4 or Int8 holding data
// quantized (on the host, so the device never holds a float copy: a
// loader's peak is the quantized model plus the one tensor on the host).
// A non-finite value is an error naming its index.
func QuantizeFloat32(dev device.Device, dtype DType, data []float32, shape []int, cat memory.Category) (*Tensor, error) {
	if !dtype.IsQuantized() {
		return nil, errorf("QuantizeFloat32", "%v is not a quantized dtype", dtype)
	}
	if err := checkLen(len(data), shape); err != nil {
		return nil, err
	}
	var (
		np  device.NF4Parts
		ip  device.Int8Parts
		err error
	)
	if dtype == NF4 {
		np, err = device.QuantizeNF4(data)
	} else {
		ip, err = device.QuantizeInt8(data)
	}
	if err != nil {
		return nil, errorf("QuantizeFloat32", "%v %v: %v", dtype, shape, err)
	}
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		return nil, err
	}
	if dtype == NF4 {
		err = device.WriteNF4(dev, t.st.buf, device.NF4LayoutOf(len(data)), &np)
	} else {
		err = device.WriteInt8(dev, t.st.buf, device.Int8LayoutOf(len(data)), &ip)
	}
	if err != nil {
		t.Release()
		return nil, err
	}
	return t, nil
}

// FromNF4 returns a new NF4 tensor of shape holding p as it is (codes,
// absmax codes, nested scales, offset and tables): how a checkpoint in
// bitsandbytes' 4-bit layout loads without a 16-bit copy
// (device.BitsandbytesNF4.Parts gives p).
func FromNF4(dev device.Device, shape []int, p device.NF4Parts, cat memory.Category) (*Tensor, error) {
	n := numel(shape)
	if p.Codes == nil {
		return nil, errorf("FromNF4", "no codes for %v", shape)
	}
	t, err := alloc(dev, NF4, shape, cat)
	if err != nil {
		return nil, err
	}
	if err := device.WriteNF4(dev, t.st.buf, device.NF4LayoutOf(n), &p); err != nil {
		t.Release()
		return nil, errorf("FromNF4", "%v: %v", shape, err)
	}
	return t, nil
}

// productDType is the dtype a product of x with a quantized weight
// computes in: the autocast dtype under autocast (for F32, F16 and BF16
// x), else x's.
func (s *Scope) productDType(op string, x *Tensor) DType {
	switch {
	case !x.dtype.IsFloat():
		panic(errorf(op, "%s is not a float tensor", x.describe()))
	case s.autocast != device.Invalid && x.dtype != F64:
		return s.autocast
	}
	return x.dtype
}

// quantLinear is Linear with a quantized weight w [out, in]: y = x·wᵀ + b
// in x's dtype after autocast, and in backward dx = dy·w (and db). It
// saves w alone: no weight gradient needs x.
func (s *Scope) quantLinear(x, w, b *Tensor) *Tensor {
	in, outDim := w.shape[1], w.shape[0]
	x2 := s.Reshape(x, -1, in)
	defer s.release(x2)
	cx := s.castTo(x2, s.productDType("linear", x2))
	if cx != x2 {
		defer s.release(cx)
	}
	rows := x2.shape[0]
	bias := s.autocastBias(b, cx.dtype) // as Linear's
	if bias != b {
		defer s.release(bias)
	}
	out := mustAlloc(cx.st.dev, cx.dtype, []int{rows, outDim}, s.cat)
	wt := transposeView(w)
	gemmWith(out, cx, wt, 1, 0, device.Full, bias, s)
	wt.Release()
	gx := gradOperand(x2, cx) // as Linear's: dx in x's dtype from the product
	castX := gx != cx
	needX, needB := gx.needsGrad(), b != nil && b.needsGrad()
	sums := s.rows // the bias's sum over rows, when summed over tiles (rowsums.go)
	s.record(out, "linear", []*Tensor{gx, w, b}, []*Tensor{w}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		var dx, db *Tensor
		if needX {
			dt := g.dtype
			if castX {
				dt = F32
			}
			dx = mustAlloc(g.st.dev, dt, []int{rows, in}, s.cat)
			gemmInto(dx, g, saved[0], 1, 0, s)
		}
		switch {
		case needB && sums.has(b):
			sums.columns(s, b, g, accumDType(g.dtype))
		case needB:
			db = s.reduce(device.Sum, g, []int{0}, false, 1, accumDType(g.dtype))
		}
		return []*Tensor{dx, nil, db}
	})
	shape := append(append([]int(nil), x.shape[:x.Dim()-1]...), outDim)
	res := s.Reshape(out, shape...)
	out.Release()
	return res
}

// quantMatMul is MatMul of a (at least 2-D) by a quantized matrix b
// [K, N]: alpha·a·b in a's dtype after autocast, and in backward
// da = alpha·g·bᵀ.
func (s *Scope) quantMatMul(a, b *Tensor, alpha float64) *Tensor {
	ca := s.castTo(a, s.productDType("matmul", a))
	if ca != a {
		defer s.release(ca)
	}
	shape := append(append([]int(nil), a.shape[:a.Dim()-1]...), b.shape[1])
	out := mustAlloc(ca.st.dev, ca.dtype, shape, s.cat)
	gemmInto(out, ca, b, alpha, 0, s)
	aShape := ca.shape
	ga := gradOperand(a, ca) // as MatMul's
	castA := ga != ca
	needA := ga.needsGrad()
	s.record(out, "matmul", []*Tensor{ga, b}, []*Tensor{b}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		if !needA {
			return []*Tensor{nil, nil}
		}
		dt := g.dtype
		if castA {
			dt = F32
		}
		bt := transposeView(saved[0])
		da := mustAlloc(g.st.dev, dt, aShape, s.cat)
		gemmInto(da, g, bt, alpha, 0, s)
		bt.Release()
		return []*Tensor{da, nil}
	})
	return s.own(out)
}
