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
// Products run in f32 (f64 for F64) on copies of one head's k and v, so
// 16-bit inputs are widened once per head.

// attnGeom is the [B, H, T, D] shape of one call.
type attnGeom struct{ b, h, t, d, br int }

func geomOf(q device.View) attnGeom {
	g := attnGeom{b: q.Shape[0], h: q.Shape[1], t: q.Shape[2], d: q.Shape[3]}
	g.br = min(device.AttentionBlock, g.t)
	return g
}

// headOffset is the element offset of head (b, h) of a [B, H, T, D] view.
func headOffset(v device.View, b, h int) int {
	return v.Offset + b*v.Strides[0] + h*v.Strides[1]
}

// floats views the bytes of a workspace as elements of T.
func floats[T float](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// gemm1 is a single-threaded product on T: the heads are the parallelism.
func gemm1[T float](ta, tb bool, m, n, k int, alpha float64, a []T, lda int, b []T, ldb int, beta float64, c []T, ldc int) {
	o := gemm.Options{Threads: 1}
	switch a := any(a).(type) {
	case []float32:
		o.Sgemm(ta, tb, m, n, k, float32(alpha), a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		o.Dgemm(ta, tb, m, n, k, alpha, a, lda, any(b).([]float64), ldb, beta, any(c).([]float64), ldc)
	}
}

// loadRows widens rows [r0, r0+m) of head (b, h) of v into dst (m×d).
func loadRows[T float](dst []T, v device.View, b, h, r0, m, d int) {
	off := headOffset(v, b, h)
	for r := range m {
		row := dst[r*d : (r+1)*d]
		if got := load(v, off+(r0+r)*v.Strides[2], d, 1, row); &got[0] != &row[0] {
			copy(row, got)
		}
	}
}

// storeRows writes src (m×d) into rows [r0, r0+m) of head (b, h) of v.
func storeRows[T float](v device.View, src []T, b, h, r0, m, d int) {
	off := headOffset(v, b, h)
	for r := range m {
		store(v, off+(r0+r)*v.Strides[2], 1, src[r*d:(r+1)*d])
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
	keep := 1 / (1 - a.Dropout)
	d.forHeads(g, ws, func(slot []byte, b, h int) {
		w := floats[T](slot)
		kw, w := w[:t*dim], w[t*dim:]
		vw, w := w[:t*dim], w[t*dim:]
		qw, w := w[:br*dim], w[br*dim:]
		ow, w := w[:br*dim], w[br*dim:]
		sc := w[:br*t]
		loadRows(kw, k, b, h, 0, t, dim)
		loadRows(vw, v, b, h, 0, t, dim)
		bh := b*g.h + h
		for i0 := 0; i0 < t; i0 += br {
			m := min(br, t-i0)
			n := i0 + m // keys of the block: those up to its last row
			loadRows(qw, q, b, h, i0, m, dim)
			gemm1(false, true, m, n, dim, a.Scale, qw, dim, kw, dim, 0, sc, t)
			for r := range m {
				i := i0 + r
				row := sc[r*t : r*t+n]
				live := row[:i+1]
				mx := rowMaxT(live)
				expShifted(live, mx)
				var sum float64
				for _, p := range live {
					sum += float64(p)
				}
				lses[bh*t+i] = T(mx + math.Log(sum))
				inv := 1 / sum
				base := uint64((bh*t + i) * t)
				for j, p := range live {
					switch {
					case a.Dropout > 0 && uniform01(a.Seed, base+uint64(j)) < a.Dropout:
						live[j] = 0
					case a.Dropout > 0:
						live[j] = T(float64(p) * inv * keep)
					default:
						live[j] = T(float64(p) * inv)
					}
				}
				clear(row[i+1:])
			}
			gemm1(false, false, m, dim, n, 1, sc, t, vw, dim, 0, ow, dim)
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
	keep := 1 / (1 - a.Dropout)
	d.forHeads(g, ws, func(slot []byte, b, h int) {
		w := floats[T](slot)
		kw, w := w[:t*dim], w[t*dim:]
		vw, w := w[:t*dim], w[t*dim:]
		qw, w := w[:br*dim], w[br*dim:]
		ow, w := w[:br*dim], w[br*dim:] // the block's dout
		sc, w := w[:br*t], w[br*t:]     // probabilities, then dropped ones
		dkw, w := w[:t*dim], w[t*dim:]
		dvw, w := w[:t*dim], w[t*dim:]
		dqw, w := w[:br*dim], w[br*dim:] // the block's out, then dq
		dpw := w[:br*t]                  // the probabilities' gradient, then the scores'
		clear(dkw)
		clear(dvw)
		loadRows(kw, k, b, h, 0, t, dim)
		loadRows(vw, v, b, h, 0, t, dim)
		bh := b*g.h + h
		var delta [device.AttentionBlock]float64
		for i0 := 0; i0 < t; i0 += br {
			m := min(br, t-i0)
			n := i0 + m
			loadRows(qw, q, b, h, i0, m, dim)
			loadRows(ow, dout, b, h, i0, m, dim)
			// Δᵢ = Σⱼ Pᵢⱼ·dPᵢⱼ = doutᵢ·outᵢ, with or without dropout.
			loadRows(dqw, out, b, h, i0, m, dim)
			for r := range m {
				var s float64
				for c := range dim {
					s += float64(ow[r*dim+c]) * float64(dqw[r*dim+c])
				}
				delta[r] = s
			}
			gemm1(false, true, m, n, dim, a.Scale, qw, dim, kw, dim, 0, sc, t)
			gemm1(false, true, m, n, dim, 1, ow, dim, vw, dim, 0, dpw, t)
			for r := range m {
				i := i0 + r
				p := sc[r*t : r*t+n]
				dp := dpw[r*t : r*t+n]
				expShifted(p[:i+1], float64(lses[bh*t+i]))
				base := uint64((bh*t + i) * t)
				for j := 0; j <= i; j++ {
					pij := float64(p[j])
					z := 1.0 // the dropout mask, scaled
					if a.Dropout > 0 {
						z = keep
						if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
							z = 0
						}
					}
					dp[j] = T(pij * (z*float64(dp[j]) - delta[r]))
					p[j] = T(pij * z)
				}
				clear(p[i+1:])
				clear(dp[i+1:])
			}
			gemm1(true, false, n, dim, m, 1, sc, t, ow, dim, 1, dvw, dim)
			gemm1(false, false, m, dim, n, a.Scale, dpw, t, kw, dim, 0, dqw, dim)
			gemm1(true, false, n, dim, m, a.Scale, dpw, t, qw, dim, 1, dkw, dim)
			storeRows(dq, dqw, b, h, i0, m, dim)
		}
		storeRows(dk, dkw, b, h, 0, t, dim)
		storeRows(dv, dvw, b, h, 0, t, dim)
	})
}
