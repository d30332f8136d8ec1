package cpu

import (
	"math"
	"sync"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu/gemm"
	"github.com/memfit/memfit/memory"
)

// Fused causal attention (device.AttentionKernels). Each (batch, head)
// pair is one unit of work, done by one goroutine from start to end, so
// results do not depend on scheduling. Within a head, query rows go in
// blocks of Br = device.AttentionBlock: the block's scores against the
// keys up to its last row are one product, normalised row by row in
// place, and multiplied by v; nothing of size T×T exists. Backward
// recomputes each block's probabilities from the saved log-sum-exps.
//
// The products read q, k, v and dout where they lie (heads viewed in a
// fused projection, at its row stride), in their own dtype, as the
// composed path's products do; scores and probabilities are f32 (f64 for
// F64), and for 16-bit inputs the probabilities and their gradient are
// rounded to the input dtype before the products that take them, as the
// composed path stores them.

// attnGeom is the [B, H, T, D] shape of one call.
type attnGeom struct{ b, h, t, d, br int }

func geomOf(q device.View) attnGeom {
	g := attnGeom{b: q.Shape[0], h: q.Shape[1], t: q.Shape[2], d: q.Shape[3]}
	g.br = min(device.AttentionBlock, g.t)
	return g
}

// floats views the bytes of a workspace as elements of T.
func floats[T float | uint16](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// rows is a matrix operand: rows of a buffer of one dtype, ld elements
// apart, the first at element off.
type rows struct {
	buf     []byte
	dt      device.DType
	off, ld int
}

// headRows are rows r0… of head (b, h) of a [B, H, T, D] view.
func headRows(v device.View, b, h, r0 int) rows {
	return rows{buf: v.Buf.Host, dt: v.DType, off: v.Offset + b*v.Strides[0] + h*v.Strides[1] + r0*v.Strides[2], ld: v.Strides[2]}
}

func (r rows) f32() []float32 { return floats[float32](r.buf)[r.off:] }
func (r rows) f64() []float64 { return floats[float64](r.buf)[r.off:] }
func (r rows) u16() []uint16  { return floats[uint16](r.buf)[r.off:] }

// product computes c = alpha·op(a)·op(b) + beta·c on one thread (the
// heads are the parallelism); a and b share a dtype, c is T (f32 for
// every dtype but F64).
func product[T float](ta, tb bool, m, n, k int, alpha float64, a, b rows, beta float64, c []T, ldc int) {
	o := gemm.Options{Threads: 1}
	switch a.dt {
	case device.F64:
		o.Dgemm(ta, tb, m, n, k, alpha, a.f64(), a.ld, b.f64(), b.ld, beta, any(c).([]float64), ldc)
	case device.F32:
		o.Sgemm(ta, tb, m, n, k, float32(alpha), a.f32(), a.ld, b.f32(), b.ld, float32(beta), any(c).([]float32), ldc)
	case device.BF16:
		o.GemmBF16(ta, tb, m, n, k, float32(alpha), a.u16(), a.ld, b.u16(), b.ld, float32(beta), any(c).([]float32), ldc)
	case device.F16:
		o.GemmF16(ta, tb, m, n, k, float32(alpha), a.u16(), a.ld, b.u16(), b.ld, float32(beta), any(c).([]float32), ldc)
	}
}

// operand returns m rows of n elements of src (ld apart) as an operand of
// dtype dt: src itself when dt is T's dtype, else rounded into to.
func operand[T float](src []T, m, n, ld int, dt device.DType, to []byte) rows {
	var z T
	if _, wide := any(z).(float64); (wide && dt == device.F64) || (!wide && dt == device.F32) {
		return rows{buf: unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), len(src)*int(unsafe.Sizeof(z))), dt: dt, ld: ld}
	}
	v := device.View{Buf: device.Buffer{Host: to}, DType: dt}
	for r := range m {
		store(v, r*ld, 1, src[r*ld:r*ld+n])
	}
	return rows{buf: to, dt: dt, ld: ld}
}

// loadRows widens m rows of d elements of head (b, h) of v, from row r0,
// into dst (m×d).
func loadRows[T float](dst []T, v device.View, b, h, r0, m, d int) {
	o := headRows(v, b, h, r0)
	for r := range m {
		row := dst[r*d : (r+1)*d]
		if got := load(v, o.off+r*o.ld, d, 1, row); &got[0] != &row[0] {
			copy(row, got)
		}
	}
}

// storeRows writes src (m×d) into rows r0… of head (b, h) of v.
func storeRows[T float](v device.View, src []T, b, h, r0, m, d int) {
	o := headRows(v, b, h, r0)
	for r := range m {
		store(v, o.off+r*o.ld, 1, src[r*d:(r+1)*d])
	}
}

// expShifted writes e^(x[j]-shift) over x in place.
func expShifted[T float](x []T, shift float64) {
	if x32, ok := any(x).([]float32); ok {
		s := float32(shift)
		for j := expShiftVector(x32, x32, s); j < len(x32); j++ {
			x32[j] = exp32(x32[j] - s)
		}
		return
	}
	for j, v := range x {
		x[j] = T(math.Exp(float64(v) - shift))
	}
}

// sumT is the sum of a row (f32 rows as the softmax kernel sums them).
func sumT[T float](x []T) float64 {
	if x32, ok := any(x).([]float32); ok {
		return float64(rowSum(x32))
	}
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s
}

// scaleT multiplies a row by f.
func scaleT[T float](x []T, f T) {
	if x32, ok := any(x).([]float32); ok {
		rowScale(x32, float32(f))
		return
	}
	for j := range x {
		x[j] *= f
	}
}

// rowMaxT is the largest element of a non-empty row.
func rowMaxT[T float](x []T) float64 {
	if x32, ok := any(x).([]float32); ok {
		return float64(rowMax(x32))
	}
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	return m
}

// forHeads runs f for every (batch, head) pair: slot s (of
// device.AttentionSlots at most) takes heads s, s+slots, … with its own
// share of the workspace, and the device's threads take the slots.
func (d *Device) forHeads(g attnGeom, ws []byte, f func(slot []byte, b, h int)) {
	heads := g.b * g.h
	slots := min(heads, device.AttentionSlots)
	per := len(ws) / slots
	workers := min(d.threads, slots)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := w; s < slots; s += workers {
				mine := ws[s*per : (s+1)*per]
				for bh := s; bh < heads; bh += slots {
					f(mine, bh/g.h, bh%g.h)
				}
			}
		}()
	}
	wg.Wait()
}

// workspace takes the call's temporaries from the device's allocator,
// so that the plan, the report and an out-of-memory error see them.
func (d *Device) workspace(bytes int64) device.Buffer {
	buf, err := d.Alloc(bytes, memory.Temporary)
	if err != nil {
		panic(err)
	}
	return buf
}

// split cuts n elements of T off the front of b.
func split[T float](b []byte, n int) ([]T, []byte) {
	var z T
	k := n * int(unsafe.Sizeof(z))
	return floats[T](b[:k]), b[k:]
}

// CausalAttention writes out and lse (see device.AttentionKernels).
func (d *Device) CausalAttention(out, lse, q, k, v device.View, a device.Attention) {
	ws := d.workspace(device.AttentionWorkspace(q.Shape, q.DType, false))
	defer d.Free(ws)
	if q.DType == device.F64 {
		attentionForward[float64](d, ws.Host, out, lse, q, k, v, a)
		return
	}
	attentionForward[float32](d, ws.Host, out, lse, q, k, v, a)
}

func attentionForward[T float](d *Device, ws []byte, out, lse, q, k, v device.View, a device.Attention) {
	g := geomOf(q)
	t, dim, br := g.t, g.d, g.br
	lses := floats[T](lse.Buf.Host)[lse.Offset:]
	keep := T(1 / (1 - a.Dropout))
	d.forHeads(g, ws, func(slot []byte, b, h int) {
		sc, rest := split[T](slot, br*t) // the block's scores, then probabilities
		ow, rest := split[T](rest, br*dim)
		p16 := rest // the probabilities in q's dtype, when 16-bit
		bh := b*g.h + h
		for i0 := 0; i0 < t; i0 += br {
			m := min(br, t-i0)
			n := i0 + m // keys of the block: those up to its last row
			product(false, true, m, n, dim, a.Scale, headRows(q, b, h, i0), headRows(k, b, h, 0), 0, sc, t)
			for r := range m {
				i := i0 + r
				row := sc[r*t : r*t+n]
				live := row[:i+1]
				mx := rowMaxT(live)
				expShifted(live, mx)
				sum := sumT(live)
				lses[bh*t+i] = T(mx + math.Log(sum))
				// As the softmax kernel normalises: the same bits in f32.
				scaleT(live, T(1/sum))
				if a.Dropout > 0 {
					base := uint64((bh*t + i) * t)
					for j := range live {
						if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
							live[j] = 0
						} else {
							live[j] *= keep
						}
					}
				}
				clear(row[i+1:])
			}
			p := operand(sc, m, n, t, q.DType, p16)
			product(false, false, m, dim, n, 1, p, headRows(v, b, h, 0), 0, ow, dim)
			storeRows(out, ow, b, h, i0, m, dim)
		}
	})
}

// CausalAttentionBackward writes dq, dk and dv (see
// device.AttentionKernels).
func (d *Device) CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	ws := d.workspace(device.AttentionWorkspace(q.Shape, q.DType, true))
	defer d.Free(ws)
	if q.DType == device.F64 {
		attentionBackward[float64](d, ws.Host, dq, dk, dv, dout, out, lse, q, k, v, a)
		return
	}
	attentionBackward[float32](d, ws.Host, dq, dk, dv, dout, out, lse, q, k, v, a)
}

func attentionBackward[T float](d *Device, ws []byte, dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	g := geomOf(q)
	t, dim, br := g.t, g.d, g.br
	lses := floats[T](lse.Buf.Host)[lse.Offset:]
	keep := T(1 / (1 - a.Dropout))
	d.forHeads(g, ws, func(slot []byte, b, h int) {
		sc, rest := split[T](slot, br*t)   // probabilities, then dropped ones
		dpw, rest := split[T](rest, br*t)  // the probabilities' gradient, then the scores'
		dkw, rest := split[T](rest, t*dim) // the head's dk and dv
		dvw, rest := split[T](rest, t*dim)
		dqw, rest := split[T](rest, br*dim) // the block's out, then its dq
		dow, rest := split[T](rest, br*dim) // the block's dout
		p16 := rest                         // 16-bit operands, when q is 16-bit
		clear(dkw)
		clear(dvw)
		bh := b*g.h + h
		var delta [device.AttentionBlock]T
		for i0 := 0; i0 < t; i0 += br {
			m := min(br, t-i0)
			n := i0 + m
			// Δᵢ = Σⱼ Pᵢⱼ·dPᵢⱼ = doutᵢ·outᵢ, with or without dropout.
			loadRows(dqw, out, b, h, i0, m, dim)
			loadRows(dow, dout, b, h, i0, m, dim)
			for r := range m {
				var s float64
				for c := range dim {
					s += float64(dow[r*dim+c]) * float64(dqw[r*dim+c])
				}
				delta[r] = T(s)
			}
			qr, dor := headRows(q, b, h, i0), headRows(dout, b, h, i0)
			product(false, true, m, n, dim, a.Scale, qr, headRows(k, b, h, 0), 0, sc, t)
			product(false, true, m, n, dim, 1, dor, headRows(v, b, h, 0), 0, dpw, t)
			for r := range m {
				i := i0 + r
				p := sc[r*t : r*t+n]
				dp := dpw[r*t : r*t+n]
				expShifted(p[:i+1], float64(lses[bh*t+i]))
				dl := delta[r]
				if a.Dropout == 0 {
					// dSᵢⱼ = Pᵢⱼ·(dPᵢⱼ - Δᵢ): the softmax gradient's row
					// kernel (the same two roundings as the loop).
					j0 := 0
					if p32, ok := any(p[:i+1]).([]float32); ok {
						j0 = softmaxGradVector(any(dp[:i+1]).([]float32), p32, any(dp[:i+1]).([]float32), float32(dl))
					}
					for j := j0; j <= i; j++ {
						dp[j] = p[j] * (dp[j] - dl)
					}
				} else {
					// dP = dP'·z and the dropped probabilities P' = P·z,
					// z the mask over (1-p).
					base := uint64((bh*t + i) * t)
					for j, pij := range p[:i+1] {
						z := keep
						if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
							z = 0
						}
						dp[j] = pij * (z*dp[j] - dl)
						p[j] = pij * z
					}
				}
				clear(p[i+1:])
				clear(dp[i+1:])
			}
			// dv += P'ᵀ·dout; dq = scale·dS·k; dk += scale·dSᵀ·q.
			product(true, false, n, dim, m, 1, operand(sc, m, n, t, q.DType, p16), dor, 1, dvw, dim)
			ds := operand(dpw, m, n, t, q.DType, p16)
			product(false, false, m, dim, n, a.Scale, ds, headRows(k, b, h, 0), 0, dqw, dim)
			product(true, false, n, dim, m, a.Scale, ds, qr, 1, dkw, dim)
			storeRows(dq, dqw, b, h, i0, m, dim)
		}
		storeRows(dk, dkw, b, h, 0, t, dim)
		storeRows(dv, dvw, b, h, 0, t, dim)
	})
}
