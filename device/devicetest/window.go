package devicetest

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
)

// Sliding windows and soft-capped scores of fused attention: a window of
// W keys is device.Attention.Starts with row i starting at max(its
// example's start, i-W+1) (windowStarts, the reference's own), and a soft
// cap c turns each score s into c·tanh(s/c) before the mask and the
// softmax (device.Attention.Softcap). Each configuration runs forward and
// backward and is checked against attentionRef. The rows are 150 tokens:
// two of the CPU's blocks of device.AttentionBlock, and a multiple of no
// tile of the tiled kernels, so that windows cross block and tile
// boundaries and end inside a tile; heads of 8 elements, and of 64, 80,
// 128 (the tiled kernels' two tile sizes) and 256 (longer than they take:
// the slot kernels).
func init() {
	cases = append(cases, kcase{"AttentionWindow", append(floatTypes, device.F64), func(e *env, dt device.DType) {
		for _, c := range attentionWindowConfigs {
			attentionWindowCase(e, dt, c)
		}
	}})
}

// attentionWindowConfig is one call of the case: the shape (kv heads of
// keys and values, 0: h), the window (0: none), the examples packed in
// each row (nil: one per row), the scale, the soft cap (0: none) and
// dropout.
type attentionWindowConfig struct {
	name     string
	b, h, t  int
	d, kv    int
	window   int
	segments [][]int
	scale    float64
	softcap  float64
	dropout  float64
}

// windowSegments packs rows of 150 tokens: examples that end inside a
// window, at the CPU's first block's end and across it.
var windowSegments = [][]int{{37, 91, 22}, {60, 90}}

var attentionWindowConfigs = []attentionWindowConfig{
	{name: "window 24", b: 2, h: 2, t: 150, d: 8, window: 24, scale: 0.35},
	{name: "window 40 with examples, dropout", b: 2, h: 2, t: 150, d: 8, window: 40, segments: windowSegments, scale: 0.35, dropout: 0.25},
	{name: "window 1", b: 1, h: 2, t: 150, d: 8, window: 1, scale: 0.35},
	{name: "window 149 with examples", b: 2, h: 1, t: 150, d: 8, window: 149, segments: windowSegments, scale: 0.35},
	{name: "soft cap", b: 2, h: 2, t: 150, d: 8, scale: 1.5, softcap: 2},
	{name: "soft cap, dropout", b: 1, h: 2, t: 150, d: 8, scale: 1.5, softcap: 2, dropout: 0.25},
	{name: "soft cap, window 33 with examples, dropout", b: 2, h: 2, t: 150, d: 8, window: 33, segments: windowSegments, scale: 1.5, softcap: 1.5, dropout: 0.25},
	{name: "heads of 64, soft cap, window 50", b: 1, h: 1, t: 150, d: 64, window: 50, scale: 0.25, softcap: 1},
	{name: "heads of 80, soft cap, window 70 with examples", b: 2, h: 1, t: 150, d: 80, window: 70, segments: windowSegments, scale: 0.2, softcap: 1},
	{name: "heads of 128, window 65", b: 1, h: 1, t: 150, d: 128, window: 65, scale: 0.15},
	{name: "heads of 128, soft cap", b: 1, h: 1, t: 150, d: 128, scale: 0.15, softcap: 1.2},
	{name: "heads of 256, soft cap, window 30 with examples", b: 2, h: 1, t: 150, d: 256, window: 30, segments: windowSegments, scale: 0.1, softcap: 1},
}

// windowStarts are the starts of rows of t tokens (b of them) under a
// window of w keys (0: none) and the examples of segments (nil: one per
// row): max(the example's start, i-w+1), at least 0.
func windowStarts(segments [][]int, b, t, w int) []int32 {
	st := make([]int32, b*t)
	if segments != nil {
		copy(st, segStarts(segments, t))
	}
	for r := range b {
		for i := range t {
			if w > 0 && i-w+1 > int(st[r*t+i]) {
				st[r*t+i] = int32(i - w + 1)
			}
		}
	}
	return st
}

func attentionWindowCase(e *env, dt device.DType, c attentionWindowConfig) {
	e.t.Helper()
	for _, d := range e.devs {
		if device.AttentionOf(d) == nil {
			e.t.Skipf("fused attention: %s lacks it (the tensor package composes it otherwise)", d.Name())
		}
	}
	b, h, t, d, nkv := c.b, c.h, c.t, c.d, c.kv
	if nkv == 0 {
		nkv = h
	}
	sh := attentionShape{b: b, h: h, t: t, d: d, kv: nkv}
	acc := device.F32
	if dt == device.F64 {
		acc = device.F64
	}
	// Heads viewed inside a fused projection [B, T, (H + 2·KV)·D], as the
	// Attention case's (the queries' H heads, then the keys' KV and the
	// values' KV: [B, T, 3, H, D] without groups).
	w := (h + 2*nkv) * d
	at := []int{0, h * d, (h + nkv) * d}
	count := []int{h, nkv, nkv}
	qkv := e.tensor(dt, []int{b * t * w}, e.random(b*t*w, -1, 1))
	view := func(v device.View, i int) device.View {
		v.Offset += at[i]
		v.Shape = []int{b, count[i], t, d}
		v.Strides = []int{t * w, d, w, 1}
		return v
	}
	heads := func(i int) []float64 {
		out := make([]float64, 0, b*count[i]*t*d)
		for bi := range b {
			for hi := range count[i] {
				for ti := range t {
					o := (bi*t+ti)*w + at[i] + hi*d
					out = append(out, qkv.vals[o:o+d]...)
				}
			}
		}
		return out
	}
	q, k, v := heads(0), heads(1), heads(2)
	out := e.tensor(dt, []int{b, h, t, d}, nil)
	lse := e.tensor(acc, []int{b, h, t}, nil)
	dout := e.tensor(dt, []int{b, h, t, d}, e.random(b*h*t*d, -1, 1))
	dq := e.tensor(dt, []int{b, h, t, d}, nil)
	dk := e.tensor(dt, []int{b, nkv, t, d}, nil)
	dv := e.tensor(dt, []int{b, nkv, t, d}, nil)
	a := device.Attention{Scale: c.scale, Dropout: c.dropout, Seed: 5, Softcap: c.softcap}
	if c.window > 0 || c.segments != nil {
		a.Starts = windowStarts(c.segments, b, t, c.window)
	}
	e.each(func(dev device.Device, s func(*operand) device.View) {
		ker := device.AttentionOf(dev)
		qv, kv, vv := view(s(qkv), 0), view(s(qkv), 1), view(s(qkv), 2)
		a := a
		a.Tiled = device.AttentionTiled(dev, dt, d) // as the tensor package calls them
		// Each call takes a.Workspace bytes of temporaries (grouped
		// heads' sums included) and gives them back.
		mem := dev.Memory()
		for _, backward := range []bool{false, true} {
			mem.ResetPeak()
			base := mem.Stats().Requested.Current
			if backward {
				ker.CausalAttentionBackward(s(dq), s(dk), s(dv), s(dout), s(out), s(lse), qv, kv, vv, a)
			} else {
				ker.CausalAttention(s(out), s(lse), qv, kv, vv, a)
			}
			st := mem.Stats()
			if got, want := st.Requested.Peak-base, a.Workspace(qv.Shape, nkv, dt, backward); got != want || st.Requested.Current != base {
				e.t.Errorf("%s (%s): backward %v took %d bytes of workspace (%d kept), want a.Workspace's %d", c.name, dev.Name(), backward, got, st.Requested.Current-base, want)
			}
		}
	})
	if e.values {
		wout, wlse, wdq, wdk, wdv := attentionRef(dt, sh, q, k, v, dout.vals, a, a.Starts)
		tol := Tolerance(dt)
		e.check(fmt.Sprintf("attention (%s)", c.name), out, wout, tol)
		e.check(fmt.Sprintf("log-sum-exp (%s)", c.name), lse, wlse, Tolerance(acc))
		var magQ, magK []float64
		n := 0
		if c.window == 1 {
			// Each query sees itself alone: its probability is 1, and
			// dS = dP - Δ = dout·v - dout·out is 0 but for the rounding
			// of the two sums (the exact dq and dk of f32 and f64 inputs
			// are 0, their RMS no scale): bound it as a sum of 2·D terms
			// of magnitude |dout|·|v|, times scale·|k| (dq) or
			// scale·|q| (dk).
			magQ, magK, n = make([]float64, len(q)), make([]float64, len(k)), 2*d
			for r := range b * h * t {
				bi, hi, ti := r/(h*t), r/t%h, r%t
				kr := sh.keyOffset(bi, hi) + ti*d // the row of k and v it reads
				var m float64
				for e := range d {
					m += 2 * math.Abs(dout.vals[r*d+e]*v[kr+e])
				}
				for e := range d {
					magQ[r*d+e] = c.scale * m * math.Abs(k[kr+e])
					magK[kr+e] += c.scale * m * math.Abs(q[r*d+e]) // a group's heads add
				}
			}
			n *= h / nkv
		}
		e.checkSum(fmt.Sprintf("dq (%s)", c.name), dq, wdq, magQ, n, 2*tol)
		e.checkSum(fmt.Sprintf("dk (%s)", c.name), dk, wdk, magK, n, 2*tol)
		e.check(fmt.Sprintf("dv (%s)", c.name), dv, wdv, 2*tol)
	}
}
