package devicetest

import (
	"math"

	"github.com/x448/float16"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"

	"github.com/memfit/memfit/device"
)

// The reference: what each kernel computes, in float64 on the host, from
// the inputs as the device holds them (already rounded to their dtype).
// Products go through gonum's blas64, sums, dot products and extrema
// through gonum's floats, and elementwise functions are written out in
// float64 here from their definitions (device.UnaryOp's comments, the
// capabilities' interfaces). Nothing here is shared with a device, so the
// CPU device is checked against it like any other.
//
// Where a kernel's contract fixes an intermediate rounding — a value that
// lives in a tensor of the tested dtype between two steps (a forward's
// output read by its backward, an 8-bit or 16-bit operand of a product) —
// the reference rounds there too (round); the final rounding to the
// result's dtype is the check's.

// round is v as a tensor of dtype dt holds it: floats rounded to nearest
// even (16-bit ones through float32, as kernels computing in F32 store
// them), integers truncated; encode and decode agree.
func round(dt device.DType, v float64) float64 {
	switch dt {
	case device.F32:
		return float64(float32(v))
	case device.F16:
		return float64(float16.Fromfloat32(float32(v)).Float32())
	case device.BF16:
		return float64(math.Float32frombits(uint32(bf16(float32(v))) << 16))
	case device.I32:
		return float64(int32(v))
	case device.I64:
		return float64(int64(v))
	case device.U8:
		return float64(uint8(v))
	}
	return v
}

// roundAll returns vs rounded to dt.
func roundAll(dt device.DType, vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = round(dt, v)
	}
	return out
}

// abs returns the absolute values of vs.
func abs(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = math.Abs(v)
	}
	return out
}

// general is the rows×cols matrix of vals at element off, ld apart.
func general(vals []float64, off, rows, cols, ld int) blas64.General {
	return blas64.General{Rows: rows, Cols: cols, Stride: ld, Data: vals[off:]}
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// gemmRef computes g on host copies of A, B, C and the bias (nil without
// one): C = Alpha·op(A)·op(B) + Beta·C (+ bias), group by group and
// product by product, LowerC's upper triangle zero. mag is the same
// product of the operands' absolute values: each element's Σ|terms|,
// which bounds how far the order of an accumulation may move it.
func gemmRef(g device.Gemm, a, b, c, bias []float64) (want, mag []float64) {
	want = append([]float64(nil), c...)
	mag = abs(c)
	absA, absB := abs(a), abs(b)
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = g.K, g.M
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = g.N, g.K
	}
	for o := range g.Groups() {
		for p := range g.Batch {
			oa := g.A.Offset + o*g.OuterStrideA + p*g.StrideA
			ob := g.B.Offset + o*g.OuterStrideB + p*g.StrideB
			oc := g.C.Offset + o*g.OuterStrideC + p*g.StrideC
			blas64.Gemm(trans(g.TransA), trans(g.TransB), g.Alpha, general(a, oa, ar, ac, g.LDA), general(b, ob, br, bc, g.LDB),
				g.Beta, general(want, oc, g.M, g.N, g.LDC))
			blas64.Gemm(trans(g.TransA), trans(g.TransB), math.Abs(g.Alpha), general(absA, oa, ar, ac, g.LDA), general(absB, ob, br, bc, g.LDB),
				math.Abs(g.Beta), general(mag, oc, g.M, g.N, g.LDC))
			for i := range g.M {
				row := oc + i*g.LDC
				if bias != nil {
					floats.Add(want[row:row+g.N], bias)
					floats.Add(mag[row:row+g.N], abs(bias))
				}
				if g.Triangle == device.LowerC {
					clear(want[row+i+1 : row+g.N])
					clear(mag[row+i+1 : row+g.N])
				}
			}
		}
	}
	return want, mag
}

// reduceRef reduces x (of shape) into out's shape, which has size 1 on
// the reduced dimensions and may omit leading ones (reduced too); mag is
// each result's Σ|terms| and n the most terms of one.
func reduceRef(op device.ReduceOp, x []float64, shape, out []int) (want, mag []float64, n int) {
	lead := len(shape) - len(out)
	terms := make([][]float64, count(out))
	st := contiguous(out)
	for e, v := range x {
		at, rest := 0, e
		for i := len(shape) - 1; i >= 0; i-- {
			k := rest % shape[i]
			rest /= shape[i]
			if j := i - lead; j >= 0 && out[j] == shape[i] {
				at += k * st[j]
			}
		}
		terms[at] = append(terms[at], v)
	}
	want, mag = make([]float64, len(terms)), make([]float64, len(terms))
	for i, ts := range terms {
		switch op {
		case device.Sum:
			want[i] = floats.Sum(ts)
		case device.Max:
			want[i] = floats.Max(ts)
		case device.Min:
			want[i] = floats.Min(ts)
		}
		mag[i] = floats.Norm(ts, 1)
		n = max(n, len(ts))
	}
	return want, mag, n
}

const sqrt2OverPi = 0.7978845608028654 // √(2/π), GPT-2's GELU

func normalCDF(x float64) float64 { return 0.5 * (1 + math.Erf(x/math.Sqrt2)) }

// unaryRef is op(x) (arg: the scalar operand).
func unaryRef(op device.UnaryOp, x, arg float64) float64 {
	switch op {
	case device.Neg:
		return -x
	case device.Exp:
		return math.Exp(x)
	case device.Log:
		return math.Log(x)
	case device.Sqrt:
		return math.Sqrt(x)
	case device.Tanh:
		return math.Tanh(x)
	case device.Sigmoid:
		return 1 / (1 + math.Exp(-x))
	case device.Relu:
		return max(x, 0)
	case device.Gelu:
		return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+0.044715*x*x*x)))
	case device.Abs:
		return math.Abs(x)
	case device.Square:
		return x * x
	case device.Recip:
		return 1 / x
	case device.PowScalar:
		return math.Pow(x, arg)
	case device.AddScalar:
		return x + arg
	case device.MulScalar:
		return x * arg
	case device.GeluErf:
		return x * normalCDF(x)
	}
	panic("devicetest: no reference for unary op " + op.String())
}

// unaryGradRef is dy·op'(x), from x or from y = op(x) as stored (rounded
// to its dtype) where device.UnaryNeeds says the kernel reads y.
func unaryGradRef(op device.UnaryOp, x, y, dy, arg float64) float64 {
	switch op {
	case device.Neg:
		return -dy
	case device.Exp:
		return dy * y
	case device.Log:
		return dy / x
	case device.Sqrt:
		return dy * 0.5 / y
	case device.Tanh:
		return dy * (1 - y*y)
	case device.Sigmoid:
		return dy * y * (1 - y)
	case device.Relu:
		if y > 0 {
			return dy
		}
		return 0
	case device.Gelu:
		t := math.Tanh(sqrt2OverPi * (x + 0.044715*x*x*x))
		du := sqrt2OverPi * (1 + 3*0.044715*x*x)
		return dy * (0.5*(1+t) + 0.5*x*(1-t*t)*du)
	case device.Abs:
		switch {
		case x > 0:
			return dy
		case x < 0:
			return -dy
		}
		return 0
	case device.Square:
		return 2 * x * dy
	case device.Recip:
		return -dy * y * y
	case device.PowScalar:
		return dy * arg * math.Pow(x, arg-1)
	case device.AddScalar:
		return dy
	case device.MulScalar:
		return dy * arg
	case device.GeluErf:
		return dy * (normalCDF(x) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi))
	}
	panic("devicetest: no reference for the gradient of " + op.String())
}

// binaryRef is a op b.
func binaryRef(op device.BinaryOp, a, b float64) float64 {
	switch op {
	case device.Add:
		return a + b
	case device.Sub:
		return a - b
	case device.Mul:
		return a * b
	case device.Div:
		return a / b
	case device.Maximum:
		return max(a, b)
	case device.Minimum:
		return min(a, b)
	case device.Equal:
		if a == b {
			return 1
		}
		return 0
	}
	panic("devicetest: no reference for binary op " + op.String())
}

// rowsOf splits x into rows of n.
func rowsOf(x []float64, n int) [][]float64 {
	out := make([][]float64, len(x)/n)
	for r := range out {
		out[r] = x[r*n : (r+1)*n]
	}
	return out
}

// softmaxRef is the softmax (log-softmax) of each row of n.
func softmaxRef(x []float64, n int, log bool) []float64 {
	y := make([]float64, len(x))
	for r, row := range rowsOf(x, n) {
		lse := floats.LogSumExp(row)
		for j, v := range row {
			if log {
				y[r*n+j] = v - lse
			} else {
				y[r*n+j] = math.Exp(v - lse)
			}
		}
	}
	return y
}

// softmaxGradRef is softmax's backward from the stored forward result y:
// dx = y·(dy - Σ dy·y), or for log-softmax dx = dy - exp(y)·Σ dy.
func softmaxGradRef(y, dy []float64, n int, log bool) []float64 {
	dx := make([]float64, len(y))
	ys, gs := rowsOf(y, n), rowsOf(dy, n)
	for r := range ys {
		for j := range n {
			if log {
				dx[r*n+j] = gs[r][j] - math.Exp(ys[r][j])*floats.Sum(gs[r])
			} else {
				dx[r*n+j] = ys[r][j] * (gs[r][j] - floats.Dot(gs[r], ys[r]))
			}
		}
	}
	return dx
}

// layerNormRef normalises rows of n: y = (x-mean)·rstd·gamma + beta,
// rstd = 1/√(var+eps) with the biased variance.
func layerNormRef(x, gamma, beta []float64, n int, eps float64) (y, mean, rstd []float64) {
	y = make([]float64, len(x))
	for r, row := range rowsOf(x, n) {
		mu := floats.Sum(row) / float64(n)
		c := append([]float64(nil), row...)
		floats.AddConst(-mu, c)
		rs := 1 / math.Sqrt(floats.Dot(c, c)/float64(n)+eps)
		for j := range n {
			y[r*n+j] = c[j]*rs*gamma[j] + beta[j]
		}
		mean, rstd = append(mean, mu), append(rstd, rs)
	}
	return y, mean, rstd
}

// layerNormGradRef is layer norm's backward from the stored mean and
// rstd: dx = rstd·(ĝ - mean(ĝ) - x̂·mean(ĝ·x̂)) with ĝ = dy·gamma and
// x̂ = (x-mean)·rstd; dgamma and dbeta (their values before, added to)
// gain Σ_rows dy·x̂ and Σ_rows dy. mag bounds dgamma's and dbeta's sums.
func layerNormGradRef(dy, x, mean, rstd, gamma, dgamma, dbeta []float64, n int) (dx, dg, db, dgMag, dbMag []float64) {
	dx = make([]float64, len(x))
	dg, db = append([]float64(nil), dgamma...), append([]float64(nil), dbeta...)
	dgMag, dbMag = abs(dgamma), abs(dbeta)
	gs := rowsOf(dy, n)
	for r, row := range rowsOf(x, n) {
		xh, gh := make([]float64, n), make([]float64, n)
		for j := range n {
			xh[j] = (row[j] - mean[r]) * rstd[r]
			gh[j] = gs[r][j] * gamma[j]
			dg[j] += gs[r][j] * xh[j]
			dgMag[j] += math.Abs(gs[r][j] * xh[j])
			db[j] += gs[r][j]
			dbMag[j] += math.Abs(gs[r][j])
		}
		a, b := floats.Sum(gh)/float64(n), floats.Dot(gh, xh)/float64(n)
		for j := range n {
			dx[r*n+j] = rstd[r] * (gh[j] - a - xh[j]*b)
		}
	}
	return dx, dg, db, dgMag, dbMag
}

// crossEntropyRef is each row's loss against its target with label
// smoothing s: -(1-s)·logp[t] - s/C·Σ logp; ignored rows 0.
func crossEntropyRef(logits, targets []float64, n, ignore int, s float64) []float64 {
	loss := make([]float64, len(targets))
	logp := softmaxRef(logits, n, true)
	for r, t := range targets {
		if int(t) == ignore {
			continue
		}
		row := logp[r*n : (r+1)*n]
		loss[r] = -(1-s)*row[int(t)] - s/float64(n)*floats.Sum(row)
	}
	return loss
}

// crossEntropyGradRef is dloss·(softmax - (1-s)·onehot - s/C) per row;
// ignored rows 0.
func crossEntropyGradRef(logits, targets, dloss []float64, n, ignore int, s float64) []float64 {
	g := make([]float64, len(logits))
	p := softmaxRef(logits, n, false)
	for r, t := range targets {
		if int(t) == ignore {
			continue
		}
		for j := range n {
			q := s / float64(n)
			if j == int(t) {
				q += 1 - s
			}
			g[r*n+j] = dloss[r] * (p[r*n+j] - q)
		}
	}
	return g
}

// gatherRef copies rows of dim selected by idx.
func gatherRef(table, idx []float64, dim int) []float64 {
	var out []float64
	for _, t := range idx {
		out = append(out, table[int(t)*dim:(int(t)+1)*dim]...)
	}
	return out
}

// scatterAddRef adds row i of src into row idx[i] of grad in index order,
// each sum stored in dt as the kernel stores it row by row.
func scatterAddRef(dt device.DType, grad, idx, src []float64, dim int) []float64 {
	out := append([]float64(nil), grad...)
	for i, t := range idx {
		row := out[int(t)*dim : (int(t)+1)*dim]
		for j := range row {
			row[j] = round(dt, row[j]+src[i*dim+j])
		}
	}
	return out
}

// convTaps calls f for every tap (n, c, kh, kw, oh, ow) of g that reads
// inside the image: col is its element of Im2Col's [N, C·KH·KW, OH·OW]
// and at its input element of the NCHW x.
func convTaps(g device.ConvGeom, f func(col, at int)) {
	dh, dw := g.Dilation()
	for n := range g.N {
		for c := range g.C {
			for kh := range g.KH {
				for kw := range g.KW {
					row := (c*g.KH+kh)*g.KW + kw
					for oh := range g.OH {
						for ow := range g.OW {
							ih, iw := oh*g.StrideH-g.PadH+kh*dh, ow*g.StrideW-g.PadW+kw*dw
							if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
								continue
							}
							col := ((n*g.C*g.KH*g.KW+row)*g.OH+oh)*g.OW + ow
							f(col, ((n*g.C+c)*g.H+ih)*g.W+iw)
						}
					}
				}
			}
		}
	}
}

// im2colRef lays out each receptive field of x as a column (zero where a
// tap falls in the padding).
func im2colRef(x []float64, g device.ConvGeom) []float64 {
	col := make([]float64, g.N*g.C*g.KH*g.KW*g.OH*g.OW)
	convTaps(g, func(c, at int) { col[c] = x[at] })
	return col
}

// col2imRef sums columns back into the image (Im2Col's adjoint); n is
// the most taps one input element receives.
func col2imRef(col []float64, g device.ConvGeom) (dx, mag []float64, n int) {
	dx = make([]float64, g.N*g.C*g.H*g.W)
	mag = make([]float64, len(dx))
	hits := make([]int, len(dx))
	convTaps(g, func(c, at int) {
		dx[at] += col[c]
		mag[at] += math.Abs(col[c])
		hits[at]++
	})
	for _, h := range hits {
		n = max(n, h)
	}
	return dx, mag, n
}

// poolRef pools KH×KW windows of each plane (no padding: the windows the
// cases use lie inside the image). argmax is the first largest element's
// position in its plane, in row-major order.
func poolRef(op device.PoolOp, x []float64, g device.ConvGeom) (y, argmax []float64) {
	for nc := range g.N * g.C {
		for oh := range g.OH {
			for ow := range g.OW {
				var win []float64
				var at []int
				for kh := range g.KH {
					for kw := range g.KW {
						p := (oh*g.StrideH+kh)*g.W + ow*g.StrideW + kw
						win, at = append(win, x[nc*g.H*g.W+p]), append(at, p)
					}
				}
				if op == device.MaxPool {
					i := floats.MaxIdx(win)
					y, argmax = append(y, win[i]), append(argmax, float64(at[i]))
				} else {
					y, argmax = append(y, floats.Sum(win)/float64(g.KH*g.KW)), append(argmax, 0)
				}
			}
		}
	}
	return y, argmax
}

// poolGradRef routes dy back: to each window's argmax, or spread evenly
// over an average's window.
func poolGradRef(op device.PoolOp, argmax, dy []float64, g device.ConvGeom) []float64 {
	dx := make([]float64, g.N*g.C*g.H*g.W)
	plane := g.H * g.W
	for o, v := range dy {
		nc, r := o/(g.OH*g.OW), o%(g.OH*g.OW)
		if op == device.MaxPool {
			dx[nc*plane+int(argmax[o])] += v
			continue
		}
		oh, ow := r/g.OW, r%g.OW
		for kh := range g.KH {
			for kw := range g.KW {
				dx[nc*plane+(oh*g.StrideH+kh)*g.W+ow*g.StrideW+kw] += v / float64(g.KH*g.KW)
			}
		}
	}
	return dx
}

// splitmix64 and uniform01 are the counter-based generator of the
// Kernels contract (Dropout, Random, attention's dropout): element i of
// a draw under seed is a pure function of (seed, i), the same on every
// device.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func uniform01(seed, i uint64) float64 {
	return float64(splitmix64(seed^splitmix64(i))>>11) / (1 << 53)
}

// dropoutRef drops element i where uniform01(seed, i) < p and scales the
// rest by 1/(1-p).
func dropoutRef(x []float64, p float64, seed uint64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		if uniform01(seed, uint64(i)) >= p {
			y[i] = v / (1 - p)
		}
	}
	return y
}

// randomRef draws n elements: uniform on [a, b), or normal with mean a
// and deviation b by Box-Muller on draws 2i and 2i+1.
func randomRef(n int, dist device.Distribution, a, b float64, seed uint64) []float64 {
	y := make([]float64, n)
	for i := range y {
		if dist == device.Uniform {
			y[i] = a + (b-a)*uniform01(seed, uint64(i))
			continue
		}
		u1, u2 := uniform01(seed, 2*uint64(i)), uniform01(seed, 2*uint64(i)+1)
		y[i] = a + b*math.Sqrt(-2*math.Log(1-u1))*math.Cos(2*math.Pi*u2)
	}
	return y
}

// attentionShape is [B, H, T, D], with kv heads of keys and values (0:
// H; else dividing H: query head h reads key head h/(H/kv)).
type attentionShape struct{ b, h, t, d, kv int }

// kvHeads is the heads of keys and values.
func (s attentionShape) kvHeads() int {
	if s.kv == 0 {
		return s.h
	}
	return s.kv
}

// keyOffset is the first element of the key and value head that query
// head (b, h) reads in contiguous [B, KV, T, D] keys or values.
func (s attentionShape) keyOffset(b, h int) int {
	kv := s.kvHeads()
	return ((b*kv + h/(s.h/kv)) * s.t) * s.d
}

// attentionProbs are head (b, h)'s probabilities P (T×T, zero outside
// each row's keys), as dropped and scaled (kept: P' = P·z, z the mask
// over 1-p), each row's log-sum-exp and, under a soft cap c, the
// derivative of the cap at each score, 1 − tanh²(s/c) (1 without one).
// Query i sees keys starts…i (starts nil: 0…i).
func attentionProbs(s attentionShape, q, k []float64, a device.Attention, starts []int32, b, h int) (p, kept, z, lse, dcap []float64) {
	t, d := s.t, s.d
	o, ok := ((b*s.h+h)*t)*d, s.keyOffset(b, h)
	p, kept, z, dcap = make([]float64, t*t), make([]float64, t*t), make([]float64, t*t), make([]float64, t*t)
	lse = make([]float64, t)
	scores := make([]float64, t)
	for i := range t {
		lo := 0
		if starts != nil {
			lo = int(starts[b*t+i])
		}
		// The scores of the keys the row sees (dot products: the
		// causal half of q·kᵀ), capped by c·tanh(s/c) under a soft cap.
		row := scores[:i+1-lo]
		for j := range row {
			row[j] = a.Scale * floats.Dot(q[o+i*d:o+(i+1)*d], k[ok+(lo+j)*d:ok+(lo+j+1)*d])
			dcap[i*t+lo+j] = 1
			if c := a.Softcap; c != 0 {
				th := math.Tanh(row[j] / c)
				row[j], dcap[i*t+lo+j] = c*th, 1-th*th
			}
		}
		lse[i] = floats.LogSumExp(row)
		for j := lo; j <= i; j++ {
			p[i*t+j] = math.Exp(row[j-lo] - lse[i])
			z[i*t+j] = 1 / (1 - a.Dropout)
			if a.Dropout > 0 && uniform01(a.Seed, uint64(((b*s.h+h)*t+i)*t+j)) < a.Dropout {
				z[i*t+j] = 0
			}
			kept[i*t+j] = p[i*t+j] * z[i*t+j]
		}
	}
	return p, kept, z, lse, dcap
}

// attentionRef is causal attention on contiguous [B, H, T, D] q, k and v
// of dtype dt, forward and backward: out = P'·v and each row's
// log-sum-exp; then from out (as stored, rounded to dt) and dout, with
// dP' = dout·vᵀ and Δᵢ = doutᵢ·outᵢ, dS = P·(z·dP' - Δ) (times the soft
// cap's derivative 1 − tanh²(s/c) under one), dq = scale·dS·k,
// dk = scale·dSᵀ·q and dv = P'ᵀ·dout. For 16-bit inputs P' and dS are
// rounded to dt before the products that take them, as the kernels and
// the composed path (whose probabilities are tensors of dt) take them.
// With grouped heads (s.kv < s.h) k, v, dk and dv are [B, KV, T, D], query
// head h reading key head h/(H/KV), and dk and dv sum their group's heads
// (exactly: in float64).
func attentionRef(dt device.DType, s attentionShape, q, k, v, dout []float64, a device.Attention, starts []int32) (out, lse, dq, dk, dv []float64) {
	t, d := s.t, s.d
	out, dq, dk, dv = make([]float64, len(q)), make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	ds := make([]float64, t*t)
	for b := range s.b {
		for h := range s.h {
			p, kept, z, l, dcap := attentionProbs(s, q, k, a, starts, b, h)
			lse = append(lse, l...)
			o, ok := ((b*s.h+h)*t)*d, s.keyOffset(b, h)
			kept = roundLow(dt, kept)
			blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, general(kept, 0, t, t, t), general(v, ok, t, d, d), 0, general(out, o, t, d, d))
			stored := roundAll(dt, out[o:o+t*d])
			clear(ds)
			for i := range t {
				g := dout[o+i*d : o+(i+1)*d]
				delta := floats.Dot(g, stored[i*d:(i+1)*d])
				for j := 0; j <= i; j++ {
					if p[i*t+j] != 0 { // dP' = dout·vᵀ where P is
						ds[i*t+j] = p[i*t+j] * (z[i*t+j]*floats.Dot(g, v[ok+j*d:ok+(j+1)*d]) - delta) * dcap[i*t+j]
					}
				}
			}
			ds = roundLow(dt, ds)
			blas64.Gemm(blas.NoTrans, blas.NoTrans, a.Scale, general(ds, 0, t, t, t), general(k, ok, t, d, d), 0, general(dq, o, t, d, d))
			// dk and dv add the group's heads (beta 1 over zeros).
			blas64.Gemm(blas.Trans, blas.NoTrans, a.Scale, general(ds, 0, t, t, t), general(q, o, t, d, d), 1, general(dk, ok, t, d, d))
			blas64.Gemm(blas.Trans, blas.NoTrans, 1, general(kept, 0, t, t, t), general(dout, o, t, d, d), 1, general(dv, ok, t, d, d))
		}
	}
	return out, lse, dq, dk, dv
}

// roundLow rounds vs to dt in place when dt is a 16-bit type.
func roundLow(dt device.DType, vs []float64) []float64 {
	if dt.IsLowPrecision() {
		for i, v := range vs {
			vs[i] = round(dt, v)
		}
	}
	return vs
}

// adamRef is one Adam/AdamW update (device.AdamHyper's definition).
func adamRef(p, g, m, v []float64, h device.AdamHyper) (p2, m2, v2 []float64) {
	p2, m2, v2 = make([]float64, len(p)), make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		gi := g[i] * h.GradScale
		if !h.Decoupled {
			gi += h.WeightDecay * p[i]
		}
		m2[i] = h.Beta1*m[i] + (1-h.Beta1)*gi
		v2[i] = h.Beta2*v[i] + (1-h.Beta2)*gi*gi
		pi := p[i]
		if h.Decoupled {
			pi -= h.LR * h.WeightDecay * p[i]
		}
		p2[i] = pi - h.LR*(m2[i]/h.BiasCorrection1)/(math.Sqrt(v2[i]/h.BiasCorrection2)+h.Eps)
	}
	return p2, m2, v2
}

// sgdRef is one SGD update (device.SGDHyper's definition).
func sgdRef(p, g, buf []float64, h device.SGDHyper) (p2, buf2 []float64) {
	p2, buf2 = make([]float64, len(p)), append([]float64(nil), buf...)
	for i := range p {
		gi := g[i]*h.GradScale + h.WeightDecay*p[i]
		if h.Momentum != 0 {
			if h.FirstStep {
				buf2[i] = gi
			} else {
				buf2[i] = h.Momentum*buf[i] + (1-h.Dampening)*gi
			}
			if h.Nesterov {
				gi += h.Momentum * buf2[i]
			} else {
				gi = buf2[i]
			}
		}
		p2[i] = p[i] - h.LR*gi
	}
	return p2, buf2
}

// adam8bitRef is one 8-bit Adam step by its definition,
// device.Adam8bitBlock, block after block (F32 arithmetic: the kernels
// must give these bits).
func adam8bitRef(p, g, m, v, ms, vs []float64, h device.AdamHyper) (p2, m2, v2, ms2, vs2 []float64) {
	n := len(p)
	pf, gf := make([]float32, n), make([]float32, n)
	mc, vc := make([]uint8, n), make([]uint8, n)
	for i := range n {
		pf[i], gf[i], mc[i], vc[i] = float32(p[i]), float32(g[i]), uint8(m[i]), uint8(v[i])
	}
	work := make([]float32, 2*device.Quant8Block)
	for blk := range device.Quant8Blocks(n) {
		lo, hi := blk*device.Quant8Block, min((blk+1)*device.Quant8Block, n)
		sm, sv := float32(ms[blk]), float32(vs[blk])
		device.Adam8bitBlock(pf[lo:hi], gf[lo:hi], mc[lo:hi], vc[lo:hi], &sm, &sv, h, work)
		ms2, vs2 = append(ms2, float64(sm)), append(vs2, float64(sv))
	}
	for i := range n {
		p2, m2, v2 = append(p2, float64(pf[i])), append(m2, float64(mc[i])), append(v2, float64(vc[i]))
	}
	return p2, m2, v2, ms2, vs2
}

// stochasticRoundRef rounds src to bf16 by its definition,
// device.StochasticBF16 with the bits of element offset+i.
func stochasticRoundRef(src []float64, seed uint64, offset int64) []float64 {
	out := make([]float64, len(src))
	for i, x := range src {
		bits := device.StochasticBF16(float32(x), device.StochasticBF16Bits(seed, uint64(offset)+uint64(i)))
		out[i] = float64(math.Float32frombits(uint32(bits) << 16))
	}
	return out
}
