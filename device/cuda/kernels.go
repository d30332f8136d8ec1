//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"math"
	"unsafe"

	"github.com/memfit/memfit/device/cuda/internal/cu"

	"github.com/memfit/memfit/device"
)

// This file implements device.Kernels with the kernels of kernels.cu and
// cuBLAS. Every method queues work on the compute stream and returns;
// AllFinite, and the index checks of Gather, ScatterAdd and CrossEntropy,
// wait for the GPU because their answer goes back to the host.

func isWide(views ...device.View) bool { return computeSuffix(views...) == sfx64 }

// Fill sets every element of dst to v.
func (d *Device) Fill(dst device.View, v float64) {
	g := newEw(dst.Shape, dst)
	sfx := sfx32
	// 16-bit fills go through the double kernel so that v is rounded once,
	// from its float64 value, as the CPU device does.
	if isWide(dst) || !dst.DType.IsFloat() || dst.DType.IsLowPrecision() {
		sfx = sfx64
	}
	d.launch("k_fill"+sfx, gridFor(g.n), new(args).ew(g).op(dst).f64(v))
}

// Copy copies src into dst, converting dtypes with round-to-nearest-even.
func (d *Device) Copy(dst, src device.View) {
	g := newEw(dst.Shape, dst, src)
	a := new(args).ew(g).op(dst).op(src)
	if dst.DType == src.DType {
		switch dst.DType.Size() {
		case 1:
			d.launch("k_copy1", gridFor(g.n), a)
		case 2:
			d.launch("k_copy2", gridFor(g.n), a)
		case 4:
			d.launch("k_copy4", gridFor(g.n), a)
		default:
			d.launch("k_copy8", gridFor(g.n), a)
		}
		return
	}
	sfx := sfx32
	if isWide(dst, src) || !dst.DType.IsFloat() || !src.DType.IsFloat() {
		sfx = sfx64
	}
	d.launch("k_convert"+sfx, gridFor(g.n), a)
}

// Unary computes dst = op(src).
func (d *Device) Unary(op device.UnaryOp, dst, src device.View, arg float64) {
	g := newEw(dst.Shape, dst, src)
	d.launch("k_unary"+computeSuffix(dst, src), gridFor(g.n), new(args).ew(g).op(dst).op(src).i64(int64(op)).f64(arg))
}

// UnaryBackward computes dx = dy·op'(x), reading x or y as
// device.UnaryNeeds says.
func (d *Device) UnaryBackward(op device.UnaryOp, dx, x, y, dy device.View, arg float64) {
	needX, needY := device.UnaryNeeds(op)
	in := dy
	if needX {
		in = x
	} else if needY {
		in = y
	}
	g := newEw(dx.Shape, dx, dy, in)
	d.launch("k_unary_bwd"+computeSuffix(dx, dy), gridFor(g.n), new(args).ew(g).op(dx).op(dy).op(in).i64(int64(op)).f64(arg))
}

// Binary computes dst = a op b with broadcasting through zero strides.
func (d *Device) Binary(op device.BinaryOp, dst, a, b device.View) {
	g := newEw(dst.Shape, dst, a, b)
	d.launch("k_binary"+computeSuffix(dst, a, b), gridFor(g.n), new(args).ew(g).op(dst).op(a).op(b).i64(int64(op)))
}

// MaskedFill writes value where mask is non-zero and src elsewhere.
func (d *Device) MaskedFill(dst, src, mask device.View, value float64) {
	g := newEw(dst.Shape, dst, src, mask)
	d.launch("k_masked_fill"+computeSuffix(dst, src), gridFor(g.n), new(args).ew(g).op(dst).op(src).op(mask).f64(value))
}

// CausalFill writes value above the diagonal of the last two dimensions.
func (d *Device) CausalFill(dst, src device.View, value float64) {
	r := len(dst.Shape)
	g := newEw(dst.Shape, dst, src)
	a := new(args).ew(g).op(dst).op(src).f64(value).i64(int64(dst.Shape[r-2])).i64(int64(dst.Shape[r-1]))
	d.launch("k_causal_fill"+computeSuffix(dst, src), gridFor(g.n), a)
}

// Dropout writes dst = src·keep/(1-p) with the CPU device's mask.
func (d *Device) Dropout(dst, src device.View, p float64, seed uint64) {
	g := newEw(dst.Shape, dst, src)
	a := new(args).ew(g).op(dst).op(src).f64(p).f64(1 / (1 - p)).u64(seed)
	d.launch("k_dropout"+computeSuffix(dst, src), gridFor(g.n), a)
}

// Random fills dst from dist with the CPU device's draws.
func (d *Device) Random(dst device.View, dist device.Distribution, lo, hi float64, seed uint64) {
	g := newEw(dst.Shape, dst)
	d.launch("k_random", gridFor(g.n), new(args).ew(g).op(dst).i64(int64(dist)).f64(lo).f64(hi).u64(seed))
}

// AllFinite reports whether src holds no inf or NaN. It waits for the GPU.
func (d *Device) AllFinite(src device.View) bool {
	if !src.DType.IsFloat() {
		return true
	}
	g := newEw(src.Shape, src)
	if g.n == 0 {
		return true
	}
	d.must("cuMemsetD32Async", d.w.do(func() error { return d.memset(d.scratch, 0, 1) }))
	d.launch("k_all_finite", gridFor(g.n), new(args).ew(g).op(src).u64(uint64(d.scratch)))
	var bad int32
	d.must("cuMemcpyDtoH", d.w.do(func() error { return d.readBack(unsafe.Pointer(&bad), d.scratch, 4) }))
	return bad == 0
}

// Reduce reduces src over the dimensions where dst has size 1 (or which dst
// lacks at the front).
func (d *Device) Reduce(op device.ReduceOp, dst, src device.View) {
	if src.Len() == 0 {
		id := 0.0
		switch op {
		case device.Max:
			id = math.Inf(-1)
		case device.Min:
			id = math.Inf(1)
		}
		d.Fill(dst, id)
		return
	}
	g := newRed(dst, src)
	sfx := computeSuffix(dst, src)
	a := new(args).red(g).op(dst).op(src).i64(int64(op))
	kernel, p := reducePlan(g, accBytes(sfx))
	if kernel != "k_reduce_cols" {
		d.launch(kernel+sfx, p.grid, a)
		return
	}
	d.launch(kernel+sfx, p.grid, a.i64(p.chunk).u64(uint64(d.partials)))
	if p.slices > 1 {
		d.launch("k_reduce_cols_combine"+sfx, gridFor(g.nout), new(args).red(g).op(dst).i64(int64(op)).i64(p.slices).u64(uint64(d.partials)))
	}
}

// accBytes is the size of the type a kernel of suffix sfx computes in.
func accBytes(sfx string) int64 {
	if sfx == sfx64 {
		return 8
	}
	return 4
}

// Gemm runs C = Alpha·op(A)·op(B) + Beta·C (+ Bias) through cuBLAS.
func (d *Device) Gemm(g device.Gemm) {
	if g.Batch == 0 || g.M == 0 || g.N == 0 {
		return
	}
	if g.Outer > 1 {
		for o := range g.Outer {
			d.Gemm(g.Group(o))
		}
		return
	}
	bg, err := colMajor(g, d.cfg.allowTF32)
	if err != nil {
		panic(err)
	}
	done := false
	if d.cfg.biasEpilogue && epilogueBias(g) {
		// cuBLASLt adds the bias in the product's epilogue: no pass
		// writing it into C, C not read.
		bg.bias = g.Bias
		err := d.w.do(func() error { return d.gemm(g, bg) })
		if !errors.Is(err, cu.ErrNoEpilogue) {
			d.must("cublasLtMatmul", err)
			done = true
		}
		bg.bias = device.View{}
	}
	if !done {
		// cuBLAS's plain products add no bias: it goes into C first.
		if g.HasBias() {
			g = device.BiasFirst(d, g)
			bg.beta = g.Beta
		}
		op := "cublasGemmEx"
		if bg.batch > 1 {
			op = "cublasGemmStridedBatchedEx"
		}
		d.must(op, d.w.do(func() error { return d.gemm(g, bg) }))
	}
	if g.Triangle == device.LowerC {
		// cuBLAS computes all of C; LowerC promises zeros above the
		// diagonal. (LowerA and UpperA are computed in full: the zeros
		// they declare add nothing.)
		c := g.C
		c.Shape = []int{g.Batch, g.M, g.N}
		c.Strides = []int{g.StrideC, g.LDC, 1}
		d.CausalFill(c, c, 0)
	}
}

func lastDim(v device.View) int { return v.Shape[len(v.Shape)-1] }

func rowsOf(v device.View) (rows, n int) {
	n = lastDim(v)
	if n == 0 {
		return 0, 0
	}
	return v.Len() / n, n
}

// Softmax computes softmax or log-softmax over the last dimension.
func (d *Device) Softmax(dst, src device.View, log bool) {
	rows, n := rowsOf(src)
	d.launch("k_softmax"+computeSuffix(dst, src), rowsGrid(rows), new(args).i64(int64(rows)).i64(int64(n)).op(dst).op(src).i64(flag(log)))
}

// SoftmaxBackward computes dx from the forward output y and dy.
func (d *Device) SoftmaxBackward(dx, y, dy device.View, log bool) {
	rows, n := rowsOf(y)
	d.launch("k_softmax_bwd"+computeSuffix(dx, y, dy), rowsGrid(rows), new(args).i64(int64(rows)).i64(int64(n)).op(dx).op(y).op(dy).i64(flag(log)))
}

// LayerNorm normalises the rows of x and writes mean and rstd, and x
// converted into xc unless xc is the zero View (a null Op the kernel
// skips).
func (d *Device) LayerNorm(y, xc, mean, rstd, x, gamma, beta device.View, eps float64) {
	rows, n := rowsOf(x)
	a := new(args).i64(int64(rows)).i64(int64(n)).op(y).op(xc).op(mean).op(rstd).op(x).op(gamma).op(beta).f64(eps)
	d.launch("k_layernorm"+computeSuffix(y, x), rowsGrid(rows), a)
}

// LayerNormBackward writes dx and adds the parameter gradients into dgamma
// and dbeta (either may be an empty view).
func (d *Device) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma device.View) {
	rows, n := rowsOf(x)
	sfx := computeSuffix(dx, x)
	d.launch("k_layernorm_bwd_dx"+sfx, rowsGrid(rows), new(args).i64(int64(rows)).i64(int64(n)).op(dx).op(dy).op(x).op(mean).op(rstd).op(gamma))
	if dgamma.Buf.Block == nil && dbeta.Buf.Block == nil {
		return
	}
	d.layerNormParams(rows, n, sfx, dgamma, dbeta, dy, x, mean, rstd)
}

// layerNormParams adds layer norm's column sums into dgamma and dbeta
// (either may be an empty view): two sums per column, split over the rows
// as a bias gradient is (colsSplit).
func (d *Device) layerNormParams(rows, n int, sfx string, dgamma, dbeta, dy, x, mean, rstd device.View) {
	p := colsSplit(int64(n), int64(rows), 2*accBytes(sfx))
	d.launch("k_layernorm_bwd_param"+sfx, p.grid, new(args).i64(int64(rows)).i64(int64(n)).op(dgamma).op(dbeta).op(dy).op(x).op(mean).op(rstd).
		i64(p.chunk).u64(uint64(d.partials)))
	if p.slices > 1 {
		d.launch("k_layernorm_bwd_param_combine"+sfx, gridFor(int64(n)), new(args).i64(int64(n)).i64(p.slices).op(dgamma).op(dbeta).u64(uint64(d.partials)))
	}
}

// checkIndex panics with a *device.IndexError when an index of idx lies
// outside [0, limit) (ignore exempt when useIgnore). It waits for the GPU.
func (d *Device) checkIndex(what string, idx device.View, limit int, ignore int64, useIgnore bool) {
	n := idx.Len()
	if n == 0 {
		return
	}
	bad := d.scratch + 8
	d.must("cuMemsetD32Async", d.w.do(func() error { return d.memset(bad, 0xffffffff, 2) }))
	d.launch("k_check_index", gridFor(int64(n)), new(args).i64(int64(n)).op(idx).i64(int64(limit)).i64(ignore).i64(flag(useIgnore)).u64(uint64(bad)))
	var at uint64
	d.must("cuMemcpyDtoH", d.w.do(func() error { return d.readBack(unsafe.Pointer(&at), bad, 8) }))
	if at == math.MaxUint64 {
		return
	}
	var t int64
	size := int64(idx.DType.Size())
	p := cu.DevicePtr(idx.Buf.Block.Ptr()) + cu.DevicePtr((int64(idx.Offset)+int64(at))*size)
	d.must("cuMemcpyDtoH", d.w.do(func() error { return d.readBack(unsafe.Pointer(&t), p, size) }))
	if idx.DType == device.I32 {
		t = int64(int32(t))
	}
	panic(&device.IndexError{Op: what, Index: t, Limit: limit, At: int(at)})
}

// Gather copies the rows of table selected by idx into dst.
func (d *Device) Gather(dst, table, idx device.View) {
	vocab, dim := table.Shape[0], table.Shape[1]
	d.checkIndex("embedding", idx, vocab, 0, false)
	n := idx.Len()
	d.launch("k_gather", gridFor(int64(n)*int64(dim)), new(args).i64(int64(n)).i64(int64(dim)).op(dst).op(table).op(idx))
}

// ScatterAdd adds the rows of src into the rows of dst selected by idx
// (atomically: the order of additions to a repeated row varies).
func (d *Device) ScatterAdd(dst, idx, src device.View) {
	vocab, dim := dst.Shape[0], dst.Shape[1]
	d.checkIndex("embedding backward", idx, vocab, 0, false)
	n := idx.Len()
	d.launch("k_scatter_add"+computeSuffix(dst, src), gridFor(int64(n)*int64(dim)), new(args).i64(int64(n)).i64(int64(dim)).op(dst).op(idx).op(src))
}

// Im2Col lays each receptive field of x out as a column of col.
func (d *Device) Im2Col(col, x device.View, g device.ConvGeom) {
	n := int64(g.N) * int64(g.C) * int64(g.KH) * int64(g.KW) * int64(g.OH) * int64(g.OW)
	d.launch("k_im2col"+computeSuffix(col, x), gridFor(n), new(args).conv(g).op(col).op(x))
}

// Col2Im sums columns back into image positions (dx is overwritten).
func (d *Device) Col2Im(dx, col device.View, g device.ConvGeom) {
	n := int64(g.N) * int64(g.C) * int64(g.H) * int64(g.W)
	d.launch("k_col2im"+computeSuffix(dx, col), gridFor(n), new(args).conv(g).op(dx).op(col))
}

// Pool applies max or average pooling.
func (d *Device) Pool(op device.PoolOp, y, argmax, x device.View, g device.ConvGeom) {
	n := int64(g.N) * int64(g.C) * int64(g.OH) * int64(g.OW)
	d.launch("k_pool"+computeSuffix(y, x), gridFor(n), new(args).conv(g).i64(int64(op)).op(y).op(argmax).op(x))
}

// PoolBackward routes dy back to the inputs each window read.
func (d *Device) PoolBackward(op device.PoolOp, dx, argmax, dy device.View, g device.ConvGeom) {
	n := int64(g.N) * int64(g.C) * int64(g.H) * int64(g.W)
	d.launch("k_pool_bwd"+computeSuffix(dx, dy), gridFor(n), new(args).conv(g).i64(int64(op)).op(dx).op(argmax).op(dy))
}

// CrossEntropy writes one loss per row of logits.
func (d *Device) CrossEntropy(loss, logits, targets device.View, ignore int, smoothing float64) {
	rows, c := rowsOf(logits)
	d.checkIndex("cross entropy target", targets, c, int64(ignore), true)
	a := new(args).i64(int64(rows)).i64(int64(c)).op(loss).op(logits).op(targets).i64(int64(ignore)).f64(smoothing)
	d.launch("k_xent"+computeSuffix(loss, logits), rowsGrid(rows), a)
}

// CrossEntropyBackward writes dlogits given one upstream gradient per row.
func (d *Device) CrossEntropyBackward(dlogits, logits, targets, dloss device.View, ignore int, smoothing float64) {
	rows, c := rowsOf(logits)
	d.checkIndex("cross entropy target", targets, c, int64(ignore), true)
	a := new(args).i64(int64(rows)).i64(int64(c)).op(dlogits).op(logits).op(targets).op(dloss).i64(int64(ignore)).f64(smoothing)
	d.launch("k_xent_bwd"+computeSuffix(dlogits, logits), rowsGrid(rows), a)
}

func gradScale(s float64) float64 {
	if s == 0 {
		return 1
	}
	return s
}

// AdamStep applies one Adam or AdamW update in place.
func (d *Device) AdamStep(param, grad, m, v device.View, h device.AdamHyper) {
	n := int64(param.Len())
	a := new(args).i64(n).op(param).op(grad).op(m).op(v).
		f64(h.LR).f64(h.Beta1).f64(h.Beta2).f64(h.Eps).f64(h.WeightDecay).i64(flag(h.Decoupled)).
		f64(h.LR / h.BiasCorrection1).f64(math.Sqrt(h.BiasCorrection2)).f64(gradScale(h.GradScale))
	d.launch("k_adam", gridFor(n), a)
}

// args lays out the launch: the AdamMulti struct, then the scalars as
// k_adam takes them.
func (t *adamTable) args(h device.AdamHyper) *args {
	a := new(args)
	a.begin()
	a.words = append(a.words, uint64(t.count))
	for _, col := range [][adamMulti]int64{t.start, t.n} {
		for _, x := range col {
			a.words = append(a.words, uint64(x))
		}
	}
	for _, col := range [][adamMulti]uint64{t.p, t.g, t.m, t.v} {
		a.words = append(a.words, col[:]...)
	}
	return a.f64(h.LR).f64(h.Beta1).f64(h.Beta2).f64(h.Eps).f64(h.WeightDecay).i64(flag(h.Decoupled)).
		f64(h.LR / h.BiasCorrection1).f64(math.Sqrt(h.BiasCorrection2)).f64(gradScale(h.GradScale))
}

// AdamSteps is device.AdamGroupStepper: the contiguous f32 tensors go
// into tables of k_adam_multi, one launch for up to adamMulti of them
// (a model's biases and norms would take a launch each, longer to start
// than to run); any other tensor gets its k_adam launch. Both compute
// adam_elem, so the bits are AdamStep's.
func (d *Device) AdamSteps(params, grads, ms, vs []device.View, h device.AdamHyper) {
	var t adamTable
	flush := func() {
		if t.count > 0 {
			d.launch("k_adam_multi", int(t.blocks), t.args(h))
		}
		t = adamTable{}
	}
	for i, p := range params {
		g, m, v := grads[i], ms[i], vs[i]
		n := int64(p.Len())
		if n == 0 {
			continue
		}
		blocks := (n + adamChunk - 1) / adamChunk
		if blocks > adamMaxBlocks || !multiAdam(p, g, m, v) {
			d.AdamStep(p, g, m, v, h)
			continue
		}
		if t.count == adamMulti || t.blocks+blocks > adamMaxBlocks {
			flush()
		}
		k := t.count
		t.start[k], t.n[k] = t.blocks, n
		t.p[k], t.g[k], t.m[k], t.v[k] = uint64(addr(p)), uint64(addr(g)), uint64(addr(m)), uint64(addr(v))
		t.count++
		t.blocks += blocks
	}
	flush()
}

// multiAdam reports whether k_adam_multi can take these views: all F32
// and contiguous, with storage.
func multiAdam(views ...device.View) bool {
	for _, v := range views {
		if v.DType != device.F32 || !v.Contiguous() || v.Buf.Block == nil {
			return false
		}
	}
	return true
}

var _ device.AdamGroupStepper = (*Device)(nil)

// Adam8bitStep applies one 8-bit Adam update (device.Adam8bitStepper):
// kernels.cu's k_adam8bit, one thread block per block of quantized state,
// bit for bit device.Adam8bitBlock.
func (d *Device) Adam8bitStep(param, grad, m, v, mScale, vScale device.View, h device.AdamHyper) {
	n := int64(param.Len())
	c := device.NewAdam8bitConsts(h)
	deqS, deqU := device.Quant8DequantFactors()
	kS, kU := device.Quant8Factors(1, 1)
	a := new(args).i64(n).op(param).op(grad).op(m).op(v).op(mScale).op(vScale)
	a.begin() // struct Adam8: every field a double holding an F32 exactly
	for _, f := range []float32{c.GradScale, c.WD, c.Decay, c.Beta1, c.OneMinusBeta1, c.Beta2, c.OneMinusBeta2,
		c.StepSize, c.InvSqrtBC2, c.Eps, deqS, deqU, kS, kU} {
		a.words = append(a.words, math.Float64bits(float64(f)))
	}
	d.launch("k_adam8bit", int(min(int64(device.Quant8Blocks(int(n))), maxGrid)), a)
}

var _ device.Adam8bitStepper = (*Device)(nil)

// StochasticRoundBF16 is device.StochasticRounder (kernels.cu's k_sr_bf16).
func (d *Device) StochasticRoundBF16(dst, src device.View, seed uint64, offset int64) {
	n := int64(src.Len())
	d.launch("k_sr_bf16", gridFor(n), new(args).i64(n).op(dst).op(src).u64(seed).i64(offset))
}

var _ device.StochasticRounder = (*Device)(nil)

// SGDStep applies one SGD update in place.
func (d *Device) SGDStep(param, grad, momentum device.View, h device.SGDHyper) {
	n := int64(param.Len())
	a := new(args).i64(n).op(param).op(grad).op(momentum).
		f64(h.LR).f64(h.Momentum).f64(h.Dampening).f64(h.WeightDecay).i64(flag(h.Nesterov)).i64(flag(h.FirstStep)).f64(gradScale(h.GradScale))
	d.launch("k_sgd", gridFor(n), a)
}
