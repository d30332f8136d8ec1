package cpu

import (
	"sync"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu/gemm"
)

// Quantized weights (device/quant.go): products decode B inside the
// GEMM's packing (gemm's quantized products), Dequantize decodes rows
// with the same decoders, and Quantize runs device's definitions on the
// buffers directly, chunks of blocks over goroutines.

// quants holds the gemm.Quant descriptors of running products: a product
// hands its descriptor to the gemm package's pooled jobs, so one made on
// the stack per call would escape to the heap every time.
var quants = sync.Pool{New: func() any { return new(gemm.Quant) }}

// quantView describes a quantized view (its whole storage) as a
// gemm.Quant over the buffer's bytes.
func quantView(v device.View, q *gemm.Quant) {
	rows, cols := device.QuantMatrix(v)
	n := rows * cols
	b := v.Buf.Host
	switch v.DType {
	case device.NF4:
		l := device.NF4LayoutOf(n)
		*q = gemm.Quant{Format: gemm.NF4, Rows: rows, Cols: cols,
			Codes:       b[l.CodesAt():l.Bytes()],
			AbsmaxCodes: b[l.AbsmaxAt():l.CodesAt()],
			Nested:      f32At(b, l.NestedAt(), l.Nested),
			Offset:      *(*float32)(unsafe.Pointer(&b[l.OffsetAt()])),
			Levels:      (*[16]float32)(unsafe.Pointer(&b[l.LevelsAt()])),
			Map:         (*[256]float32)(unsafe.Pointer(&b[l.MapAt()])),
		}
	case device.Int8:
		l := device.Int8LayoutOf(n)
		*q = gemm.Quant{Format: gemm.Int8, Rows: rows, Cols: cols,
			Codes:  b[l.CodesAt():l.Bytes()],
			Absmax: f32At(b, l.AbsmaxAt(), l.Blocks),
		}
	default:
		panic("cpu: not a quantized view: " + v.DType.String())
	}
}

// f32At views n float32s at byte offset off of b (4-aligned: the
// layouts put every F32 part at a multiple of 4 of an aligned segment).
func f32At(b []byte, off int64, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[off])), n)
}

// QuantGemm runs products whose B is quantized: each as the gemm
// package's quantized product of A's dtype, B decoded to it while it is
// packed.
func (d *Device) QuantGemm(g device.Gemm) {
	device.CheckQuantGemm(g)
	if g.Batch == 0 || g.M == 0 || g.N == 0 {
		return
	}
	if g.HasBias() && (g.Bias.DType != device.F32 || g.A.DType == device.F64) {
		g = device.BiasFirst(d, g)
	}
	q := quants.Get().(*gemm.Quant)
	defer func() { *q = gemm.Quant{}; quants.Put(q) }()
	quantView(g.B, q)
	alpha, beta := float32(g.Alpha), float32(g.Beta)
	t := gemm.Options{Threads: d.threads}
	if g.HasBias() {
		t.Bias = f32s(g.Bias)[g.Bias.Offset:][:g.N]
	}
	for p := range g.Groups() * g.Batch {
		o, b := p/g.Batch, p%g.Batch
		oa := g.A.Offset + o*g.OuterStrideA + b*g.StrideA
		oc := g.C.Offset + o*g.OuterStrideC + b*g.StrideC
		switch g.A.DType {
		case device.F64:
			t.DgemmQ(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, f64s(g.A)[oa:], g.LDA, q, g.Beta, f64s(g.C)[oc:], g.LDC)
		case device.F32:
			t.SgemmQ(g.TransA, g.TransB, g.M, g.N, g.K, alpha, f32s(g.A)[oa:], g.LDA, q, beta, f32s(g.C)[oc:], g.LDC)
		case device.BF16, device.F16:
			a := u16s(g.A)[oa:]
			bf := g.A.DType == device.BF16
			switch {
			case g.C.DType == device.F32 && bf:
				t.GemmBF16Q(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, q, beta, f32s(g.C)[oc:], g.LDC)
			case g.C.DType == device.F32:
				t.GemmF16Q(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, q, beta, f32s(g.C)[oc:], g.LDC)
			case bf:
				t.GemmBF16ToQ(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, q, beta, u16s(g.C)[oc:], g.LDC)
			default:
				t.GemmF16ToQ(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, q, beta, u16s(g.C)[oc:], g.LDC)
			}
		}
	}
}

// Dequantize decodes rows [r0, r1) × columns [c0, c1) of src into dst,
// rows split over goroutines.
func (d *Device) Dequantize(dst, src device.View, r0, r1, c0, c1 int) {
	q := new(gemm.Quant)
	quantView(src, q)
	w := c1 - c0
	rows := r1 - r0
	parallelRange(d.threads, rows*w, func(s, e int) {
		for r := (s + w - 1) / w; r < min((e+w-1)/w, rows); r++ {
			at := dst.Offset + r*w
			switch dst.DType {
			case device.F32:
				q.DecodeF32(f32s(dst)[at:at+w], r0+r, c0)
			case device.F64:
				q.DecodeF64(f64s(dst)[at:at+w], r0+r, c0)
			case device.BF16:
				q.DecodeBF16(u16s(dst)[at:at+w], r0+r, c0)
			case device.F16:
				q.DecodeF16(u16s(dst)[at:at+w], r0+r, c0)
			default:
				panic("cpu: dequantizing to " + dst.DType.String())
			}
		}
	})
}

// Quantize writes src quantized into dst: chunks of whole blocks over
// goroutines (each block's codes depend on the block alone), then, for
// NF4, the double quantization of the absmaxes, which needs them all.
func (d *Device) Quantize(dst, src device.View) error {
	n := src.Len()
	b := dst.Buf.Host
	const span = 2048 // elements a goroutine converts at a time: one scratch row
	var (
		absmax []float32
		codes  []byte
		scales []float32
		nl     = device.NF4LayoutOf(n)
		il     = device.Int8LayoutOf(n)
	)
	if dst.DType == device.NF4 {
		absmax = make([]float32, nl.Blocks) // the double quantization takes them all
		codes = b[nl.CodesAt():nl.Bytes()]
	} else {
		codes = b[il.CodesAt():il.Bytes()]
		scales = f32At(b, il.AbsmaxAt(), il.Blocks)
	}
	var (
		mu    sync.Mutex
		first *device.NonFiniteError
	)
	parallelBlocks(d.threads, (n+span-1)/span, func(c0, c1 int) {
		sc := getScratch[float32]()
		defer putScratch(sc)
		for c := c0; c < c1; c++ {
			s, e := c*span, min((c+1)*span, n)
			x := loadRow(src, src.Offset+s, e-s, 1, sc, 0)
			var err error
			if dst.DType == device.NF4 {
				err = device.NF4Encode(codes[s/2:(e+1)/2], absmax[s/device.QuantBlock:], x, e == n)
			} else {
				err = device.Int8Encode(unsafe.Slice((*int8)(unsafe.Pointer(&codes[s])), e-s), scales[s/device.QuantBlock:], x)
			}
			if nf, ok := err.(*device.NonFiniteError); ok {
				mu.Lock()
				if first == nil || s+nf.Index < first.Index {
					first = &device.NonFiniteError{Index: s + nf.Index, Value: nf.Value}
				}
				mu.Unlock()
				return
			}
		}
	})
	if first != nil {
		return first
	}
	if dst.DType != device.NF4 {
		return nil
	}
	m := device.DynamicMap()
	p := &device.NF4Parts{Levels: device.NF4Levels(), Map: m, Nested: make([]float32, nl.Nested), AbsmaxCodes: make([]byte, nl.Blocks)}
	p.Offset = device.NF4Nest(p.AbsmaxCodes, p.Nested, absmax, &p.Map)
	return device.WriteNF4(d, dst.Buf, nl, p)
}
