package tensor

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"slices"
)

// matrixOf describes the last two dimensions of t as a GEMM operand:
// transposed or not, with leading dimension ld. ok is false when neither
// dimension is unit-stride, so GEMM cannot read t as it is.
func matrixOf(t *Tensor) (trans bool, ld int, ok bool) {
	r := t.Dim()
	rows, cols := t.shape[r-2], t.shape[r-1]
	sr, sc := t.strides[r-2], t.strides[r-1]
	switch {
	case sc == 1 || cols == 1:
		trans, ld = false, max(sr, cols)
		if rows == 1 {
			ld = max(cols, 1)
		}
	case sr == 1 || rows == 1:
		trans, ld = true, max(sc, rows)
		if cols == 1 {
			ld = max(rows, 1)
		}
	default:
		return false, 0, false
	}
	return trans, ld, true
}

// batchStrides returns t's element strides over the batch dimensions
// batch (t's leading dimensions, or none: a matrix broadcast over the
// batch, stride 0).
func batchStrides(t *Tensor, batch []int) []int {
	st := make([]int, len(batch))
	if t.Dim()-2 == len(batch) {
		for i := range batch {
			if t.shape[i] > 1 {
				st[i] = t.strides[i]
			}
		}
	}
	return st
}

// gemmInto writes out = alpha·a·b + beta·out for a [B…, M, K], b [B…, K, N],
// out [B…, M, N] where a's or b's batch dimensions may be absent
// (broadcast). Batch dimensions that collapse into one stride for all
// three become one batched GEMM; otherwise (attention heads viewed inside
// a [B, T, H, D] tensor) one batched GEMM per index of the outer ones, so
// strided views are read in place. Only operands whose matrices have no
// unit stride are packed first.
func gemmInto(out, a, b *Tensor, alpha, beta float64, scratch *Scope) {
	gemmIntoTri(out, a, b, alpha, beta, device.Full, scratch)
}

// gemmIntoTri is gemmInto with a declared triangular structure of each
// matrix (device.Triangle).
func gemmIntoTri(out, a, b *Tensor, alpha, beta float64, tri device.Triangle, scratch *Scope) {
	gemmWith(out, a, b, alpha, beta, tri, nil, scratch)
}

// gemmWith is gemmIntoTri adding bias (nil: none; else beta must be 0) to
// every row of each product.
func gemmWith(out, a, b *Tensor, alpha, beta float64, tri device.Triangle, bias *Tensor, scratch *Scope) {
	dev := out.st.dev
	ta, lda, ok := matrixOf(a)
	if !ok {
		a = a.packed(a.dtype, scratch.cat)
		defer a.Release()
		ta, lda, _ = matrixOf(a)
	}
	tb, ldb, ok := matrixOf(b)
	if !ok {
		b = b.packed(b.dtype, scratch.cat)
		defer b.Release()
		tb, ldb, _ = matrixOf(b)
	}
	r := out.Dim()
	m, n := out.shape[r-2], out.shape[r-1]
	k := a.shape[a.Dim()-1]
	ldc := n
	if m > 1 {
		ldc = out.strides[r-2]
	}
	if n > 1 && out.strides[r-1] != 1 || ldc < n {
		panic(errorf("matmul", "result %s has no unit column stride", out.describe()))
	}

	// Merge batch dimensions (dropping size-1 ones) wherever all three
	// operands step uniformly across them.
	batch := out.shape[:r-2]
	sa, sb, sc := batchStrides(a, batch), batchStrides(b, batch), batchStrides(out, batch)
	var size []int
	var str [][3]int
	for i, d := range batch {
		if d == 1 {
			continue
		}
		cur := [3]int{sa[i], sb[i], sc[i]}
		if j := len(size) - 1; j >= 0 && str[j][0] == cur[0]*d && str[j][1] == cur[1]*d && str[j][2] == cur[2]*d {
			size[j] *= d
			str[j] = cur
			continue
		}
		size = append(size, d)
		str = append(str, cur)
	}
	g := device.Gemm{
		TransA: ta, TransB: tb,
		M: m, N: n, K: k, Batch: 1,
		Alpha: alpha, Beta: beta,
		A: a.view(), B: b.view(), C: out.view(),
		LDA: lda, LDB: ldb, LDC: ldc,
		Triangle: tri,
	}
	if b.dtype.IsQuantized() && tb {
		// A quantized B is described as stored: op(B) is its transpose.
		r := b.Dim()
		g.B.Shape = []int{b.shape[r-1], b.shape[r-2]}
		g.B.Strides = []int{b.shape[r-2], 1}
	}
	if bias != nil {
		if !bias.IsContiguous() {
			bias = bias.packed(bias.dtype, scratch.cat)
			defer bias.Release()
		}
		g.Bias = bias.view()
	}
	if len(size) == 0 {
		runGemm(dev, g)
		return
	}
	// The innermost run is the batch, the next the groups; any further
	// ones are looped over here.
	last := len(size) - 1
	g.Batch = size[last]
	g.StrideA, g.StrideB, g.StrideC = str[last][0], str[last][1], str[last][2]
	if last == 0 {
		runGemm(dev, g)
		return
	}
	g.Outer = size[last-1]
	g.OuterStrideA, g.OuterStrideB, g.OuterStrideC = str[last-1][0], str[last-1][1], str[last-1][2]
	outer := numel(size[:last-1])
	base := [3]int{g.A.Offset, g.B.Offset, g.C.Offset}
	for o := 0; o < outer; o++ {
		off := base
		for i, rem := last-2, o; i >= 0; i-- {
			idx := rem % size[i]
			rem /= size[i]
			for j := range off {
				off[j] += idx * str[i][j]
			}
		}
		g.A.Offset, g.B.Offset, g.C.Offset = off[0], off[1], off[2]
		runGemm(dev, g)
	}
}

// runGemm runs g on dev: the quantized product when B is a quantized
// weight.
func runGemm(dev device.Device, g device.Gemm) {
	if g.B.DType.IsQuantized() {
		device.QuantGemm(dev, g)
		return
	}
	dev.Gemm(g)
}

// autocastPair casts matmul operands to the scope's autocast dtype (weights
// through the per-scope cache) or, outside autocast, to a common dtype.
func (s *Scope) autocastPair(a, b *Tensor) (*Tensor, *Tensor, func()) {
	target := promote(a.dtype, b.dtype)
	if s.autocast != device.Invalid && a.dtype.IsFloat() && b.dtype.IsFloat() && a.dtype != F64 && b.dtype != F64 {
		target = s.autocast
	}
	ca, cb := s.castTo(a, target), s.castTo(b, target)
	return ca, cb, func() {
		if ca != a {
			s.release(ca)
		}
		if cb != b {
			s.release(cb)
		}
	}
}

// gradOperand returns the tensor a product records as its input for an
// operand autocast gave it as cast: orig itself when the product can
// write orig's gradient in orig's dtype from the 16-bit operands (an F32
// C under 16-bit A and B, which device.Gemm takes), so that no pass casts
// the gradient back and it is never rounded to 16 bits; else cast, whose
// node casts the gradient back.
func gradOperand(orig, cast *Tensor) *Tensor {
	if cast != orig && orig.dtype == F32 && cast.dtype.IsLowPrecision() {
		return orig
	}
	return cast
}

// autocastBias returns the bias a product of dtype adds: under autocast
// an F32 bias cast to the product's 16-bit dtype once per scope, beside
// the weight (autocast's cache), as PyTorch's autocast casts it, so that
// a device adds it in the product's epilogue (cuBLASLt's takes a bias of
// C's dtype only) instead of a pass writing the F32 bias into the 16-bit
// C for the product to accumulate onto; else b. Only the forward reads
// the cast: the bias's gradient is the output gradient's column sums,
// made in F32 whatever the bias was added as.
func (s *Scope) autocastBias(b *Tensor, dtype DType) *Tensor {
	if b == nil || s.autocast == device.Invalid || !dtype.IsLowPrecision() || b.dtype != F32 {
		return b
	}
	return s.castTo(b, dtype)
}

// castTo returns t in dtype: t itself, a cached cast of a leaf (reused by
// every product in the scope, as autocast's weight cache), or a new cast.
func (s *Scope) castTo(t *Tensor, dtype DType) *Tensor {
	if t.dtype == dtype {
		return t
	}
	if t.node == nil && s.track && !t.st.evictable {
		h := s.owning() // a WithModes view shares its owner's cache
		key := castKey{t, dtype}
		if c, ok := h.casts[key]; ok && c.version == t.Version() {
			return c.t.share2()
		} else if ok {
			c.t.Release() // the leaf changed (an optimizer step): cast again
		}
		c := s.With(Category(memory.Temporary)).Cast(t, dtype)
		c.owner = nil
		if h.casts == nil {
			h.casts = map[castKey]cachedCast{}
		}
		h.casts[key] = cachedCast{c, t.Version()}
		return c.share2()
	}
	return s.Cast(t, dtype)
}

// share2 is share keeping the autograd node (a second owner of the same
// result): used to hand out cached casts.
func (t *Tensor) share2() *Tensor {
	c := t.share()
	if t.node != nil {
		t.node.retain()
		c.node = t.node
	}
	return c
}

// MatMul returns the matrix product of the last two dimensions of a and b,
// batched over leading dimensions, which broadcast as torch.matmul's do
// (size 1 or absent on one side; [2,1,7,5] × [3,5,3] is [2,3,7,3]). A 1-D
// a is a row vector and a 1-D b a column vector, whose dimension is
// dropped from the result (two 1-D operands give their dot product, a
// scalar). Under autocast both operands are cast to the low-precision
// dtype and products accumulate in F32. b may be a quantized frozen matrix
// (quant.go), read in a's dtype; a quantized a is refused.
func (s *Scope) MatMul(a, b *Tensor) *Tensor { return s.matMul(a, b, 1) }

// ScaledMatMul is alpha·MatMul(a, b) as one product: the scale rides on
// the GEMM (as attention's 1/√d does), so no scaled copy of an operand is
// made or kept for backward.
func (s *Scope) ScaledMatMul(a, b *Tensor, alpha float64) *Tensor { return s.matMul(a, b, alpha) }

func (s *Scope) matMul(a, b *Tensor, alpha float64) *Tensor {
	sameDevice("matmul", a, b)
	if a.dtype.IsQuantized() || b.dtype.IsQuantized() && b.Dim() != 2 {
		panic(errorf("matmul", "%s × %s: a quantized weight is MatMul's second operand, a matrix", a.describe(), b.describe()))
	}
	if a.Dim() < 1 || b.Dim() < 1 {
		panic(errorf("matmul", "operands need 1 or more dimensions: %s, %s", a.describe(), b.describe()))
	}
	if a.shape[a.Dim()-1] != b.shape[max(b.Dim()-2, 0)] {
		panic(errorf("matmul", "inner dimensions differ: %s × %s", a.describe(), b.describe()))
	}
	// Vectors are one-row or one-column matrices (views), and the
	// broadcast batch dimensions expanded views with zero strides: the
	// product below reads both in place, and the views' backward sums the
	// gradients back to the operands' shapes.
	if a.Dim() == 1 || b.Dim() == 1 {
		a2, b2 := a, b
		if a.Dim() == 1 {
			a2 = s.Unsqueeze(a, 0)
		}
		if b.Dim() == 1 {
			b2 = s.Unsqueeze(b, 1)
		}
		r := s.matMul(a2, b2, alpha)
		n := r.Dim()
		shape := slices.Clone(r.shape[:n-2])
		if a.Dim() != 1 {
			shape = append(shape, r.shape[n-2])
		}
		if b.Dim() != 1 {
			shape = append(shape, r.shape[n-1])
		}
		out := s.Reshape(r, shape...)
		for _, t := range []*Tensor{a2, b2, r} {
			if t != a && t != b {
				s.release(t)
			}
		}
		return out
	}
	ab, bb := a.shape[:a.Dim()-2], b.shape[:b.Dim()-2]
	if len(ab) > 0 && len(bb) > 0 && !slices.Equal(ab, bb) {
		batch := broadcastShapes("matmul", ab, bb)
		ae := s.Expand(a, append(slices.Clone(batch), a.shape[a.Dim()-2:]...)...)
		be := s.Expand(b, append(slices.Clone(batch), b.shape[b.Dim()-2:]...)...)
		out := s.matMul(ae, be, alpha)
		s.release(ae)
		s.release(be)
		return out
	}
	// A weight applied to a batch of rows is one big product, not a batch.
	if b.Dim() == 2 && a.Dim() > 2 {
		k := a.shape[a.Dim()-1]
		a2 := s.Reshape(a, -1, k)
		o2 := s.matMul(a2, b, alpha)
		shape := append(append([]int(nil), a.shape[:a.Dim()-1]...), b.shape[1])
		out := s.Reshape(o2, shape...)
		s.release(a2)
		s.release(o2)
		return out
	}
	if b.dtype.IsQuantized() {
		return s.quantMatMul(a, b, alpha)
	}
	ca, cb, done := s.autocastPair(a, b)
	defer done()
	batch := ab
	if len(bb) > 0 {
		batch = bb
	}
	shape := append(append([]int(nil), batch...), a.shape[a.Dim()-2], b.shape[b.Dim()-1])
	out := mustAlloc(ca.st.dev, ca.dtype, shape, s.cat)
	gemmInto(out, ca, cb, alpha, 0, s)
	aShape, bShape := ca.shape, cb.shape
	// As Linear's: an operand autocast cast gets its gradient in its own
	// dtype from the product.
	ga, gb := gradOperand(a, ca), gradOperand(b, cb)
	castA, castB := ga != ca, gb != cb
	needA, needB := ga.needsGrad(), gb.needsGrad()
	s.record(out, "matmul", []*Tensor{ga, gb}, []*Tensor{ca, cb}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sa, sb := saved[0], saved[1]
		var da, db *Tensor
		// dA = g·Bᵀ, dB = Aᵀ·g, summed over broadcast batches.
		if needA {
			dt := g.dtype
			if castA {
				dt = F32
			}
			bt := transposeView(sb)
			full := mustAlloc(g.st.dev, dt, append(append([]int(nil), g.shape[:g.Dim()-1]...), aShape[len(aShape)-1]), s.cat)
			gemmInto(full, g, bt, alpha, 0, s)
			bt.Release()
			da = s.sumTo(full, aShape)
			full.Release()
		}
		if needB {
			dt := g.dtype
			if castB {
				dt = F32
			}
			at := transposeView(sa)
			full := mustAlloc(g.st.dev, dt, append(append([]int(nil), g.shape[:g.Dim()-2]...), bShape[len(bShape)-2], g.shape[g.Dim()-1]), s.cat)
			gemmInto(full, at, g, alpha, 0, s)
			at.Release()
			db = s.sumTo(full, bShape)
			full.Release()
		}
		return []*Tensor{da, db}
	})
	return s.own(out)
}

// transposeView swaps the last two dimensions without recording.
func transposeView(t *Tensor) *Tensor {
	r := t.Dim()
	shape := append([]int(nil), t.shape...)
	strides := append([]int(nil), t.strides...)
	shape[r-2], shape[r-1] = shape[r-1], shape[r-2]
	strides[r-2], strides[r-1] = strides[r-1], strides[r-2]
	v := t.share()
	v.shape, v.strides = shape, strides
	return v
}

// Linear returns x·wᵀ + b for x [..., in], w [out, in] and b [out] (b may be
// nil): the product adds the bias itself (device.Gemm's Bias), so the
// layer makes one activation, not two, and no pass copies b into it.
// w may be a quantized frozen weight (NF4, Int8; quant.go): the product
// then computes in x's dtype (after autocast), dequantizing w as it reads
// it, and backward gives x and b their gradients.
func (s *Scope) Linear(x, w, b *Tensor) *Tensor {
	sameDevice("linear", x, w, b)
	if w.Dim() != 2 || x.Dim() < 1 || x.shape[x.Dim()-1] != w.shape[1] {
		panic(errorf("linear", "input %s does not fit weight %s", x.describe(), w.describe()))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(errorf("linear", "bias %s does not fit weight %s", b.describe(), w.describe()))
	}
	if x.dtype.IsQuantized() || b != nil && b.dtype.IsQuantized() {
		panic(errorf("linear", "input %s or its bias is quantized: only the weight may be", x.describe()))
	}
	if w.dtype.IsQuantized() {
		return s.quantLinear(x, w, b)
	}
	in, outDim := w.shape[1], w.shape[0]
	x2 := s.Reshape(x, -1, in)
	defer s.release(x2)
	cx, cw, done := s.autocastPair(x2, w)
	defer done()
	rows := x2.shape[0]
	bias := s.autocastBias(b, cx.dtype)
	if bias != b {
		defer s.release(bias)
	}
	out := mustAlloc(cx.st.dev, cx.dtype, []int{rows, outDim}, s.cat)
	wt := transposeView(cw)
	gemmWith(out, cx, wt, 1, 0, device.Full, bias, s)
	wt.Release()
	// An operand autocast cast gets its gradient in its own dtype straight
	// from the product (gradOperand): an F32 weight's gradient is summed
	// in F32 and never rounded to 16 bits on its way.
	gx, gw := gradOperand(x2, cx), gradOperand(w, cw)
	castX, castW := gx != cx, gw != cw
	needX, needW, needB := gx.needsGrad(), gw.needsGrad(), b != nil && b.needsGrad()
	sums := s.rows // the weight's and bias's sums over rows, when summed over tiles (rowsums.go)
	s.record(out, "linear", []*Tensor{gx, gw, b}, []*Tensor{cx, cw}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sx, sw := saved[0], saved[1]
		dev := g.st.dev
		var dx, dw, db *Tensor
		if needX {
			// Skipped below the lowest trainable layer: nothing wants it.
			dt := g.dtype
			if castX {
				dt = F32
			}
			dx = mustAlloc(dev, dt, sx.shape, s.cat)
			gemmInto(dx, g, sw, 1, 0, s)
		}
		if needW {
			dt := g.dtype
			if castW {
				dt = F32
			}
			gt := transposeView(g)
			switch {
			case sums.has(w):
				sums.product(s, w, gt, sx, dt, castW)
			case castW && inPlace(w, dt):
				// Added into the F32 gradient the weight has (Beta 1):
				// no temporary of its size, no pass adding one.
				dw = w.grad.share()
				gemmInto(dw, gt, sx, 1, 1, s)
				dw.st.version.Add(1)
			default:
				dw = mustAlloc(dev, dt, sw.shape, s.cat)
				gemmInto(dw, gt, sx, 1, 0, s)
			}
			gt.Release()
		}
		switch {
		case needB && sums.has(b):
			sums.columns(s, b, g, accumDType(g.dtype))
		case needB:
			db = s.reduce(device.Sum, g, []int{0}, false, 1, accumDType(g.dtype))
		}
		return []*Tensor{dx, dw, db}
	})
	shape := append(append([]int(nil), x.shape[:x.Dim()-1]...), outDim)
	res := s.Reshape(out, shape...)
	out.Release()
	return res
}

// CausalScores returns alpha·q·kᵀ for q and k [..., T, D] with every
// element above the diagonal of each T×T matrix set to fill (−Inf for
// attention): causal attention's masked scores as one op. The product
// computes only the lower triangles, and so does backward, which passes
// no gradient through the filled elements.
func (s *Scope) CausalScores(q, k *Tensor, alpha, fill float64) *Tensor {
	dev := sameDevice("causal_scores", q, k)
	if q.Dim() < 2 || !slices.Equal(q.shape, k.shape) {
		panic(errorf("causal_scores", "q %s and k %s must both be [..., T, D]", q.describe(), k.describe()))
	}
	cq, ck, done := s.autocastPair(q, k)
	defer done()
	r := q.Dim()
	shape := append(append([]int(nil), q.shape[:r-1]...), q.shape[r-2])
	out := mustAlloc(dev, cq.dtype, shape, s.cat)
	kt := transposeView(ck)
	gemmIntoTri(out, cq, kt, alpha, 0, device.LowerC, s)
	kt.Release()
	if fill != 0 {
		device.CausalFill(dev, out.view(), out.view(), fill)
	}
	needQ, needK := cq.needsGrad(), ck.needsGrad()
	s.record(out, "causal_scores", []*Tensor{cq, ck}, []*Tensor{cq, ck}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sq, sk := saved[0], saved[1]
		dev := g.st.dev
		// The gradient of the filled elements is zero; the products
		// below skip them. A gradient nothing else holds is masked in
		// place.
		gm := g.share()
		defer func() { gm.Release() }()
		if g.st.refs.Load() == 2 { // g and gm
			g.st.version.Add(1)
		} else {
			gm.Release()
			gm = mustAlloc(dev, g.dtype, g.shape, s.cat)
		}
		device.CausalFill(dev, gm.view(), g.view(), 0)
		var dq, dk *Tensor
		if needQ {
			dq = mustAllocLike(dev, g.dtype, sq, s.cat)
			gemmIntoTri(dq, gm, sk, alpha, 0, device.LowerA, s)
		}
		if needK {
			dk = mustAllocLike(dev, g.dtype, sk, s.cat)
			gt := transposeView(gm)
			gemmIntoTri(dk, gt, sq, alpha, 0, device.UpperA, s)
			gt.Release()
		}
		return []*Tensor{dq, dk}
	})
	return s.own(out)
}

// CausalMatMul returns p·v for p [..., T, T], zero above the diagonal of
// each matrix (causal attention's probabilities, as Softmax makes them
// from CausalScores), and v [..., T, D]. The product skips p's zeros, and
// p's elements above the diagonal receive a zero gradient.
func (s *Scope) CausalMatMul(p, v *Tensor) *Tensor {
	dev := sameDevice("causal_matmul", p, v)
	r := p.Dim()
	if r < 2 || v.Dim() != r || p.shape[r-1] != p.shape[r-2] || !slices.Equal(p.shape[:r-1], v.shape[:r-1]) {
		panic(errorf("causal_matmul", "p %s must be [..., T, T] and v %s [..., T, D]", p.describe(), v.describe()))
	}
	cp, cv, done := s.autocastPair(p, v)
	defer done()
	// Laid out as v: heads viewed inside [B, T, H, D] give a result whose
	// heads join back into [B, T, H·D] without a copy.
	out := mustAllocLike(dev, cp.dtype, cv, s.cat)
	gemmIntoTri(out, cp, cv, 1, 0, device.LowerA, s)
	needP, needV := cp.needsGrad(), cv.needsGrad()
	s.record(out, "causal_matmul", []*Tensor{cp, cv}, []*Tensor{cp, cv}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sp, sv := saved[0], saved[1]
		dev := g.st.dev
		var dp, dv *Tensor
		if needP {
			dp = mustAlloc(dev, g.dtype, sp.shape, s.cat)
			vt := transposeView(sv)
			gemmIntoTri(dp, g, vt, 1, 0, device.LowerC, s)
			vt.Release()
		}
		if needV {
			dv = mustAllocLike(dev, g.dtype, sv, s.cat)
			pt := transposeView(sp)
			gemmIntoTri(dv, pt, g, 1, 0, device.UpperA, s)
			pt.Release()
		}
		return []*Tensor{dp, dv}
	})
	return s.own(out)
}
