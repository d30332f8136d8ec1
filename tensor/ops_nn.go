package tensor

import (
	"math"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// toF32 returns x in F32 when autocast is on and x is 16-bit (ops that run
// in F32 under autocast), else x itself; release with s.release if != x.
func (s *Scope) f32Input(x *Tensor) *Tensor {
	if s.autocast != device.Invalid && x.dtype.IsLowPrecision() {
		return s.Cast(x, F32)
	}
	return x
}

func (s *Scope) softmax(name string, x *Tensor, log bool) *Tensor {
	dev := sameDevice(name, x)
	if !x.dtype.IsFloat() {
		panic(errorf(name, "%s is not a float tensor", x.describe()))
	}
	// The kernel computes in F32 (F64 for F64) whatever it reads or
	// writes. Under autocast a softmax keeps its 16-bit input's dtype for
	// the result — the probabilities feed a 16-bit product next, and saving
	// them rounded halves the largest activation of attention — while
	// log-softmax (feeding a loss) returns F32.
	outDT := x.dtype
	if log && s.autocast != device.Invalid && x.dtype.IsLowPrecision() {
		outDT = F32
	}
	c := x.packed(x.dtype, s.cat)
	defer c.Release()
	out := mustAlloc(dev, outDT, x.shape, s.cat)
	device.Softmax(dev, out.view(), c.view(), log)
	// The gradient is written in x's dtype: the kernel computes in F32 and
	// rounds once as it stores, the same bits as an F32 result cast after.
	inDT := x.dtype
	s.record(out, name, []*Tensor{x}, []*Tensor{out}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		y := saved[0]
		gc := g.packed(g.dtype, s.cat)
		defer gc.Release()
		dx := mustAlloc(g.st.dev, inDT, y.shape, s.cat)
		device.SoftmaxBackward(g.st.dev, dx.view(), y.view(), gc.view(), log)
		return []*Tensor{dx}
	})
	return s.own(out)
}

// Softmax normalises the last dimension into probabilities, computing in
// F32.
func (s *Scope) Softmax(x *Tensor) *Tensor { return s.softmax("softmax", x, false) }

// LogSoftmax returns log(softmax(x)) over the last dimension, computed
// stably in F32 (an F32 result under autocast).
func (s *Scope) LogSoftmax(x *Tensor) *Tensor { return s.softmax("log_softmax", x, true) }

// SoftmaxDim is Softmax over dimension dim (negative counts from the end).
// Another dimension than the last is moved there and back as transposed
// views, so the result is a view with x's shape whose dim is strided.
func (s *Scope) SoftmaxDim(x *Tensor, dim int) *Tensor {
	return s.alongLast("softmax", x, dim, s.Softmax)
}

// LogSoftmaxDim is LogSoftmax over dimension dim, as SoftmaxDim.
func (s *Scope) LogSoftmaxDim(x *Tensor, dim int) *Tensor {
	return s.alongLast("log_softmax", x, dim, s.LogSoftmax)
}

// alongLast applies a last-dimension op f along dim: a composition with
// two transposes, whose gradients are transposed views again (the row
// kernels pack what they read, once).
func (s *Scope) alongLast(op string, x *Tensor, dim int, f func(*Tensor) *Tensor) *Tensor {
	d := normAxis(op, dim, x.Dim())
	last := x.Dim() - 1
	if d == last {
		return f(x)
	}
	xt := s.Transpose(x, d, last)
	yt := f(xt)
	s.release(xt)
	y := s.Transpose(yt, d, last)
	s.release(yt)
	return y
}

// LayerNorm normalises the trailing dimensions of x that gamma's shape
// names (PyTorch's normalized_shape; usually just the last, gamma [D]) to
// zero mean and unit variance, then scales by gamma and shifts by beta
// (beta has gamma's shape). It computes in F32 and saves x, the per-row
// mean and 1/std.
func (s *Scope) LayerNorm(x, gamma, beta *Tensor, eps float64) *Tensor {
	dev := sameDevice("layer_norm", x, gamma, beta)
	if k := gamma.Dim(); k > 1 {
		if k > x.Dim() || !slices.Equal(x.shape[x.Dim()-k:], gamma.shape) || !slices.Equal(beta.shape, gamma.shape) {
			panic(errorf("layer_norm", "gamma %v and beta %v must be the trailing shape of %s", gamma.shape, beta.shape, x.describe()))
		}
		// Several trailing dimensions are one row of their product: the
		// same kernel on reshaped views.
		rows := slices.Clone(x.shape[:x.Dim()-k+1])
		rows[len(rows)-1] = numel(gamma.shape)
		x2, g2, b2 := s.Reshape(x, rows...), s.Reshape(gamma, rows[len(rows)-1]), s.Reshape(beta, rows[len(rows)-1])
		y2 := s.LayerNorm(x2, g2, b2, eps)
		for _, t := range []*Tensor{x2, g2, b2} {
			s.release(t)
		}
		y := s.Reshape(y2, x.shape...)
		s.release(y2)
		return y
	}
	d := x.shape[x.Dim()-1]
	if gamma.Dim() != 1 || gamma.shape[0] != d || beta.Dim() != 1 || beta.shape[0] != d {
		panic(errorf("layer_norm", "gamma %v and beta %v must be [%d] for %s", gamma.shape, beta.shape, d, x.describe()))
	}
	// Statistics and normalisation run in F32 whatever x's dtype. Under
	// autocast the result is rounded to the autocast dtype: its consumer is
	// a 16-bit product, which would otherwise make a 16-bit copy of it.
	outDT := x.dtype
	if s.autocast != device.Invalid && x.dtype != F64 {
		outDT = s.autocast
	}
	c := x.packed(x.dtype, s.cat)
	defer c.Release()
	rows := x.Len() / max(d, 1)
	statDT := accumDType(x.dtype)
	mean := mustAlloc(dev, statDT, []int{rows}, s.cat)
	rstd := mustAlloc(dev, statDT, []int{rows}, s.cat)
	out := mustAlloc(dev, outDT, x.shape, s.cat)
	// Under autocast an F32 input is saved rounded to the autocast dtype:
	// backward recomputes x̂ = (x-mean)·rstd from it with an error of about
	// |x̂|·2⁻⁹ (the mean and 1/std stay F32), and the F32 residual stream
	// it came from is freed as soon as the next residual add consumes it.
	// The kernel writes the copy as it reads x (no pass of its own).
	saveX, xc := c, device.View{}
	if s.grad && outDT != x.dtype && (x.needsGrad() || gamma.needsGrad()) {
		saveX = mustAlloc(dev, outDT, x.shape, s.cat)
		defer saveX.Release()
		xc = saveX.view()
	}
	device.LayerNorm(dev, out.view(), xc, mean.view(), rstd.view(), c.view(), gamma.view(), beta.view(), eps)
	inDT := x.dtype // dx in x's dtype, rounded once (see softmax)
	s.record(out, "layer_norm", []*Tensor{x, gamma, beta}, []*Tensor{saveX, mean, rstd, gamma}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sx, sm, sr, sg := saved[0], saved[1], saved[2], saved[3]
		dev := g.st.dev
		gc := g.packed(g.dtype, s.cat)
		defer gc.Release()
		dx := mustAlloc(dev, inDT, sx.shape, s.cat)
		dgamma := mustAlloc(dev, sg.dtype, sg.shape, s.cat)
		dbeta := mustAlloc(dev, sg.dtype, sg.shape, s.cat)
		dev.Fill(dgamma.view(), 0)
		dev.Fill(dbeta.view(), 0)
		device.LayerNormBackward(dev, dx.view(), dgamma.view(), dbeta.view(), gc.view(), sx.view(), sm.view(), sr.view(), sg.view())
		return []*Tensor{dx, dgamma, dbeta}
	})
	mean.Release()
	rstd.Release()
	return s.own(out)
}

// Embedding looks up rows of table [V, D] for integer indices of any shape;
// the result has shape idx.shape + [D].
func (s *Scope) Embedding(table, idx *Tensor) *Tensor {
	dev := sameDevice("embedding", table, idx)
	if table.Dim() != 2 {
		panic(errorf("embedding", "table %s must be 2-D", table.describe()))
	}
	if idx.dtype != I32 && idx.dtype != I64 {
		panic(errorf("embedding", "indices %s must be i32 or i64", idx.describe()))
	}
	ic := idx.packed(idx.dtype, s.cat)
	defer ic.Release()
	tc := table.packed(table.dtype, s.cat)
	defer tc.Release()
	shape := append(append([]int(nil), idx.shape...), table.shape[1])
	out := mustAlloc(dev, table.dtype, shape, s.cat)
	defer releaseOnPanic(out)()
	dev.Gather(out.view(), tc.view(), ic.view())
	tshape := table.shape
	s.record(out, "embedding", []*Tensor{table}, []*Tensor{ic}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		gc := g.packed(g.dtype, s.cat)
		defer gc.Release()
		// A parameter's rows are added into its gradient itself: a
		// [V, D] temporary of zeros would be the largest tensor of a
		// language model's backward.
		var dt *Tensor
		fresh := true
		if ownsGrad(table) {
			dt, fresh = gradInto(table, s)
		} else {
			dt = mustAlloc(g.st.dev, g.dtype, tshape, s.cat)
		}
		if fresh {
			g.st.dev.Fill(dt.view(), 0)
		}
		g.st.dev.ScatterAdd(dt.view(), saved[0].view(), gc.view())
		dt.st.version.Add(1)
		return []*Tensor{dt}
	})
	return s.own(out)
}

// Conv2dOptions are the stride, zero padding, dilation and groups of a
// convolution, and the stride, padding and divisor of a pool. Stride, Pad
// and Dilation apply to both axes; a non-zero per-axis field (StrideH,
// PadW, ...) overrides them on its axis. Zero values are PyTorch's
// defaults: stride 1 (k for pools), no padding, dilation 1, one group,
// and averages that count padded positions.
type Conv2dOptions struct {
	Stride, Pad, Dilation int
	StrideH, StrideW      int
	PadH, PadW            int
	DilationH, DilationW  int
	// Groups splits input and output channels into that many independent
	// convolutions (both divisible by it); the weight is [OC, C/Groups,
	// KH, KW]. 0 means 1.
	Groups int
	// ExcludePad makes AvgPool2d divide each window's sum by the number of
	// input positions it covers rather than by k·k (PyTorch's
	// count_include_pad=False).
	ExcludePad bool
}

// axes resolves the per-axis stride, padding and dilation (stride 0 means
// defStride).
func (o Conv2dOptions) axes(defStride int) (sh, sw, ph, pw, dh, dw int) {
	or := func(axis, both, def int) int {
		switch {
		case axis != 0:
			return axis
		case both != 0:
			return both
		}
		return def
	}
	return or(o.StrideH, o.Stride, defStride), or(o.StrideW, o.Stride, defStride),
		or(o.PadH, o.Pad, 0), or(o.PadW, o.Pad, 0),
		or(o.DilationH, o.Dilation, 1), or(o.DilationW, o.Dilation, 1)
}

func convGeom(op string, x *Tensor, kh, kw int, o Conv2dOptions, defStride int) device.ConvGeom {
	if x.Dim() != 4 {
		panic(errorf(op, "input %s must be N×C×H×W", x.describe()))
	}
	sh, sw, ph, pw, dh, dw := o.axes(defStride)
	if sh < 1 || sw < 1 || ph < 0 || pw < 0 || dh < 1 || dw < 1 {
		panic(errorf(op, "stride %dx%d, padding %dx%d and dilation %dx%d must be positive (padding >= 0)", sh, sw, ph, pw, dh, dw))
	}
	g := device.ConvGeom{N: x.shape[0], C: x.shape[1], H: x.shape[2], W: x.shape[3], KH: kh, KW: kw,
		StrideH: sh, StrideW: sw, PadH: ph, PadW: pw}
	if dh != 1 || dw != 1 {
		g.DilationH, g.DilationW = dh, dw
	}
	g.OH = (g.H+2*g.PadH-dh*(kh-1)-1)/sh + 1
	g.OW = (g.W+2*g.PadW-dw*(kw-1)-1)/sw + 1
	if g.OH <= 0 || g.OW <= 0 {
		panic(errorf(op, "window %dx%d (dilation %dx%d) does not fit input %s with padding %dx%d", kh, kw, dh, dw, x.describe(), ph, pw))
	}
	return g
}

// Conv2d convolves x [N, C, H, W] with w [OC, C, KH, KW] and adds b [OC]
// (may be nil), through im2col and one batched GEMM. The column buffer is a
// temporary: backward rebuilds it from the saved input instead of keeping
// it.
func (s *Scope) Conv2d(x, w, b *Tensor, o Conv2dOptions) *Tensor {
	if o.Groups > 1 {
		return s.groupedConv2d(x, w, b, o)
	}
	if o.Groups < 0 {
		panic(errorf("conv2d", "groups %d < 0", o.Groups))
	}
	dev := sameDevice("conv2d", x, w, b)
	if w.Dim() != 4 || x.Dim() != 4 || w.shape[1] != x.shape[1] {
		panic(errorf("conv2d", "weight %s does not fit input %s", w.describe(), x.describe()))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(errorf("conv2d", "bias %s does not fit weight %s", b.describe(), w.describe()))
	}
	g := convGeom("conv2d", x, w.shape[2], w.shape[3], o, 1)
	cx, cw, done := s.autocastPair(x, w)
	defer done()
	xc := cx.packed(cx.dtype, s.cat)
	defer xc.Release()
	oc, ckk, ohw := w.shape[0], g.C*g.KH*g.KW, g.OH*g.OW
	col := mustAlloc(dev, cx.dtype, []int{g.N, ckk, ohw}, memory.Temporary)
	dev.Im2Col(col.view(), xc.view(), g)
	w2 := viewOf(cw, []int{oc, ckk}, []int{ckk, 1}, 0)
	if !cw.IsContiguous() {
		panic(errorf("conv2d", "weight %s is not contiguous", w.describe()))
	}
	w2.offset = cw.offset
	out := mustAlloc(dev, cx.dtype, []int{g.N, oc, g.OH, g.OW}, s.cat)
	out3 := viewOf(out, []int{g.N, oc, ohw}, []int{oc * ohw, ohw, 1}, 0)
	beta := 0.0
	if b != nil {
		bv := b.view()
		bv.Shape, bv.Strides = out3.shape, []int{0, b.strides[0], 0}
		dev.Copy(out3.view(), bv)
		beta = 1
	}
	gemmInto(out3, w2, col, 1, beta, s)
	out3.Release()
	col.Release()
	w2.Release()
	needX, needW, needB := cx.needsGrad(), cw.needsGrad(), b != nil && b.needsGrad()
	s.record(out, "conv2d", []*Tensor{cx, cw, b}, []*Tensor{xc, cw}, func(s *Scope, gy *Tensor, saved []*Tensor) []*Tensor {
		sx, sw := saved[0], saved[1]
		dev := gy.st.dev
		gc := gy.packed(gy.dtype, s.cat)
		defer gc.Release()
		g3 := viewOf(gc, []int{g.N, oc, ohw}, []int{oc * ohw, ohw, 1}, gc.offset)
		defer g3.Release()
		w2 := viewOf(sw, []int{oc, ckk}, []int{ckk, 1}, sw.offset)
		defer w2.Release()
		var dx, dw, db *Tensor
		if needW {
			col := mustAlloc(dev, sx.dtype, []int{g.N, ckk, ohw}, memory.Temporary)
			dev.Im2Col(col.view(), sx.view(), g)
			dw = mustAlloc(dev, gy.dtype, sw.shape, s.cat)
			dw2 := viewOf(dw, []int{oc, ckk}, []int{ckk, 1}, 0)
			// Sum over images of g_n · col_nᵀ, one image at a time so that
			// the accumulation order is fixed.
			for n := 0; n < g.N; n++ {
				gn := viewOf(g3, []int{oc, ohw}, []int{ohw, 1}, g3.offset+n*oc*ohw)
				cn := viewOf(col, []int{ohw, ckk}, []int{1, ohw}, n*ckk*ohw)
				gemmInto(dw2, gn, cn, 1, float64(min(n, 1)), s)
				gn.Release()
				cn.Release()
			}
			dw2.Release()
			col.Release()
		}
		if needX {
			dcol := mustAlloc(dev, gy.dtype, []int{g.N, ckk, ohw}, memory.Temporary)
			wt := transposeView(w2)
			gemmInto(dcol, wt, g3, 1, 0, s)
			wt.Release()
			dx = mustAlloc(dev, gy.dtype, sx.shape, s.cat)
			dev.Col2Im(dx.view(), dcol.view(), g)
			dcol.Release()
		}
		if needB {
			db = s.reduce(device.Sum, g3, []int{0, 2}, false, 1, accumDType(gy.dtype))
		}
		return []*Tensor{dx, dw, db}
	})
	return s.own(out)
}

// groupedConv2d is a convolution in o.Groups independent groups of
// channels, composed of one ungrouped convolution per group and a concat
// (so every device has it without a kernel of its own). Each group's input
// is copied once, as an ungrouped convolution copies a strided input, and
// the group outputs are alive beside the concatenated result until it is
// made.
func (s *Scope) groupedConv2d(x, w, b *Tensor, o Conv2dOptions) *Tensor {
	sameDevice("conv2d", x, w, b)
	gs := o.Groups
	if x.Dim() != 4 || w.Dim() != 4 || x.shape[1]%gs != 0 || w.shape[0]%gs != 0 || w.shape[1]*gs != x.shape[1] {
		panic(errorf("conv2d", "weight %s does not fit input %s in %d groups (want [OC, C/%d, KH, KW] with C and OC divisible by %d)", w.describe(), x.describe(), gs, gs, gs))
	}
	o.Groups = 0
	cg, og := x.shape[1]/gs, w.shape[0]/gs
	ys := make([]*Tensor, gs)
	for i := range gs {
		xi, wi := s.Narrow(x, 1, i*cg, cg), s.Narrow(w, 0, i*og, og)
		var bi *Tensor
		if b != nil {
			bi = s.Narrow(b, 0, i*og, og)
		}
		ys[i] = s.Conv2d(xi, wi, bi, o)
		s.release(xi)
		s.release(wi)
		if bi != nil {
			s.release(bi)
		}
	}
	out := s.Concat(1, ys...)
	for _, y := range ys {
		s.release(y)
	}
	return out
}

func (s *Scope) pool(op device.PoolOp, name string, x *Tensor, k int, o Conv2dOptions) *Tensor {
	dev := sameDevice(name, x)
	if o.Dilation > 1 || o.DilationH > 1 || o.DilationW > 1 || o.Groups > 1 {
		panic(errorf(name, "pools take no dilation or groups"))
	}
	g := convGeom(name, x, k, k, o, k)
	xc := x.packed(x.dtype, s.cat)
	defer xc.Release()
	out := mustAlloc(dev, x.dtype, []int{g.N, g.C, g.OH, g.OW}, s.cat)
	var argmax *Tensor
	var av device.View
	if op == device.MaxPool {
		argmax = mustAlloc(dev, I32, out.shape, s.cat)
		defer argmax.Release()
		av = argmax.view()
	}
	dev.Pool(op, out.view(), av, xc.view(), g)
	var save []*Tensor
	if argmax != nil {
		save = []*Tensor{argmax}
	}
	xshape := x.shape
	s.record(out, name, []*Tensor{x}, save, func(s *Scope, gy *Tensor, saved []*Tensor) []*Tensor {
		gc := gy.packed(gy.dtype, s.cat)
		defer gc.Release()
		var am device.View
		if len(saved) > 0 {
			am = saved[0].view()
		}
		dx := mustAlloc(gy.st.dev, gy.dtype, xshape, s.cat)
		gy.st.dev.PoolBackward(op, dx.view(), am, gc.view(), g)
		return []*Tensor{dx}
	})
	return s.own(out)
}

// MaxPool2d takes the maximum of each k×k window (stride defaults to k).
// It saves the I32 position of each maximum, not the input.
func (s *Scope) MaxPool2d(x *Tensor, k int, o Conv2dOptions) *Tensor {
	return s.pool(device.MaxPool, "max_pool2d", x, k, o)
}

// AvgPool2d averages each k×k window (stride defaults to k); it saves
// nothing. Padded positions count as zeros in the divisor k·k unless
// o.ExcludePad, which divides by the positions inside the input.
func (s *Scope) AvgPool2d(x *Tensor, k int, o Conv2dOptions) *Tensor {
	y := s.pool(device.AvgPool, "avg_pool2d", x, k, o)
	g := convGeom("avg_pool2d", x, k, k, o, k)
	if !o.ExcludePad || (g.PadH == 0 && g.PadW == 0) {
		return y
	}
	if 2*g.PadH > k || 2*g.PadW > k {
		panic(errorf("avg_pool2d", "padding %dx%d is more than half the window %d (a window could cover no input)", g.PadH, g.PadW, k))
	}
	// Composed rather than a kernel option, so every device has it: the
	// k·k average times k·k/count, a constant [OH, OW] map of the window
	// sizes, which backward multiplies into the gradient too.
	covered := func(o, stride, pad, size int) float64 {
		lo := o*stride - pad
		return float64(min(lo+k, size) - max(lo, 0))
	}
	f := make([]float64, g.OH*g.OW)
	for oh := range g.OH {
		for ow := range g.OW {
			f[oh*g.OW+ow] = float64(k*k) / (covered(oh, g.StrideH, g.PadH, g.H) * covered(ow, g.StrideW, g.PadW, g.W))
		}
	}
	f64, err := FromFloat64(x.st.dev, f, []int{g.OH, g.OW}, memory.Temporary)
	if err != nil {
		panic(err)
	}
	scale := f64.packed(x.dtype, memory.Temporary)
	f64.Release()
	out := s.Mul(y, scale)
	scale.Release()
	s.release(y)
	return out
}

// Reduction says how a loss combines per-example values.
type Reduction uint8

// Reductions of a loss.
const (
	MeanReduction Reduction = iota
	SumReduction
)

// DefaultIgnoreIndex is the target value a cross-entropy ignores unless
// told otherwise: PyTorch's ignore_index default.
const DefaultIgnoreIndex = -100

// Ignore names the target value a cross-entropy skips. Its zero value
// means DefaultIgnoreIndex, so that zero-valued options behave as
// PyTorch's defaults and can never ignore class 0 by accident; IgnoreIndex
// names another value.
type Ignore struct {
	index int
	set   bool
}

// IgnoreIndex makes targets equal to i the ignored ones.
func IgnoreIndex(i int) Ignore { return Ignore{index: i, set: true} }

// Index returns the ignored target value.
func (g Ignore) Index() int {
	if !g.set {
		return DefaultIgnoreIndex
	}
	return g.index
}

// CrossEntropyOptions configure CrossEntropy. The zero value is PyTorch's
// default: ignore targets equal to -100, no smoothing, mean reduction.
type CrossEntropyOptions struct {
	// Ignore is the target value that contributes nothing to the loss,
	// to the count a mean divides by, or to the gradient.
	Ignore         Ignore
	LabelSmoothing float64
	Reduction      Reduction
	// Softcap, when above 0, caps the logits softly before the softmax,
	// c·tanh(z/c) (Gemma 2's final_logit_softcapping), and the gradient
	// goes through the cap.
	Softcap float64
}

// Softcap returns c·tanh(x/c): x capped softly to (-c, c), as Gemma 2
// caps its logits and attention scores. c must be above 0.
func (s *Scope) Softcap(x *Tensor, c float64) *Tensor {
	if !(c > 0) || math.IsInf(c, 0) {
		panic(errorf("softcap", "cap %v of %s: want a finite number above 0", c, x.describe()))
	}
	a := s.MulScalar(x, 1/c)
	t := s.Tanh(a)
	s.release(a)
	out := s.MulScalar(t, c)
	s.release(t)
	return out
}

// CrossEntropy is the fused, stable softmax cross-entropy of logits
// [..., C] against integer targets [...]. The mean is over targets that are
// not ignored. It saves only the logits (and targets): the softmax is
// recomputed in backward.
func (s *Scope) CrossEntropy(logits, targets *Tensor, o CrossEntropyOptions) *Tensor {
	dev := sameDevice("cross_entropy", logits, targets)
	if o.Softcap != 0 {
		capped := s.Softcap(logits, o.Softcap)
		defer s.release(capped)
		o.Softcap = 0
		return s.CrossEntropy(capped, targets, o)
	}
	c := logits.shape[logits.Dim()-1]
	rows := logits.Len() / max(c, 1)
	if targets.Len() != rows || (targets.dtype != I32 && targets.dtype != I64) {
		panic(errorf("cross_entropy", "targets %s must be integers, one per row of logits %s", targets.describe(), logits.describe()))
	}
	// The kernel computes in F32 whatever the logits' dtype, so 16-bit
	// logits are saved as they are rather than as an F32 copy.
	in := logits
	lc := in.packed(in.dtype, s.cat)
	defer lc.Release()
	tc := targets.packed(targets.dtype, s.cat)
	defer tc.Release()
	ignore, scale := crossEntropyReduction(tc, o)
	dt := accumDType(in.dtype)
	perRow := mustAlloc(dev, dt, []int{rows}, memory.Temporary)
	defer releaseOnPanic(perRow)()
	device.CrossEntropy(dev, perRow.view(), lc.view(), tc.view(), ignore, o.LabelSmoothing)
	out := mustAlloc(dev, dt, []int{}, s.cat)
	dev.Reduce(device.Sum, out.view(), perRow.view())
	dev.Unary(device.MulScalar, out.view(), out.view(), scale)
	perRow.Release()
	smoothing := o.LabelSmoothing
	s.record(out, "cross_entropy", []*Tensor{in}, []*Tensor{lc, tc}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sl, st := saved[0], saved[1]
		dev := g.st.dev
		up := mustAlloc(dev, g.dtype, []int{rows}, memory.Temporary)
		gv := g.view()
		gv.Shape, gv.Strides = []int{rows}, []int{0}
		dev.Unary(device.MulScalar, up.view(), gv, scale)
		dx := mustAlloc(dev, sl.dtype, sl.shape, s.cat)
		device.CrossEntropyBackward(dev, dx.view(), sl.view(), st.view(), up.view(), ignore, smoothing)
		up.Release()
		return []*Tensor{dx}
	})
	return s.own(out)
}

// MSE is the mean squared error between a and b, which must have the same
// shape (F32 under autocast).
func (s *Scope) MSE(a, b *Tensor) *Tensor {
	sameDevice("mse", a, b)
	if !slices.Equal(a.shape, b.shape) {
		panic(errorf("mse", "shapes %v and %v differ (broadcasting a loss is almost always a bug)", a.shape, b.shape))
	}
	fa, fb := s.f32Input(a), s.f32Input(b)
	d := s.Sub(fa, fb)
	sq := s.Mul(d, d)
	out := s.Mean(sq, false)
	for _, t := range []*Tensor{d, sq} {
		s.release(t)
	}
	if fa != a {
		s.release(fa)
	}
	if fb != b {
		s.release(fb)
	}
	return out
}

// releaseOnPanic returns a function for defer that releases ts if the
// surrounding op panics (an index error from a kernel), so a failed op
// leaks nothing.
func releaseOnPanic(ts ...*Tensor) func() {
	return func() {
		if r := recover(); r != nil {
			for _, t := range ts {
				t.Release()
			}
			panic(r)
		}
	}
}
