package tensor

import (
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/internal/plantrace"
	"github.com/memfit/memfit/memory"
)

// LMHeadChunkBytes is what one chunk of LinearCrossEntropy may cost: its
// logits and their gradient, which exist together while backward runs the
// cross-entropy's gradient. 32 MiB is 166 rows of a 50304-token vocabulary
// in bf16 (83 in f32): products of that height still keep the GEMM busy,
// and the chunk is a fraction of the [rows, vocab] logits it replaces
// (786 MiB in bf16 for GPT-2 small at batch 8).
const LMHeadChunkBytes = 32 << 20

// LMHeadCastBytes bounds the copy of the weight LinearCrossEntropy makes
// when autocast gives the products another dtype than the weight's: a
// larger cast goes in blocks of vocabulary rows of at most this size, cast
// again for each chunk of rows, so that the [V, D] copy (74 MiB in bf16
// for GPT-2's tied head) never exists whole. A smaller one is cast once.
const LMHeadCastBytes = 8 << 20

// LMHeadSumBytes bounds the F32 sum LinearCrossEntropy makes of a 16-bit
// weight's gradient (a weight whose own gradient is F32 takes the sum in
// place). A larger one is summed in parts of vocabulary rows, one pass
// over the chunks of rows each, every part rounded into the weight's
// gradient as soon as it is complete: the peak is then the 16-bit
// gradient and one part (Llama 3 8B's untied head: 2.94 GiB of the whole
// sum and its rounding, 1.96 GiB in two parts). Each pass after the first
// recomputes the chunks' logits (one product of the head's forward more)
// and takes the weight's gradient only.
const LMHeadSumBytes = 1 << 30

// lmHeadSumBytes is LMHeadSumBytes, smaller in tests.
var lmHeadSumBytes int64 = LMHeadSumBytes

// LinearCrossEntropyChunkRows is the number of rows LinearCrossEntropy
// takes per chunk for vocab classes in logits of dtype when it is not
// told: as many as keep a chunk's logits and their gradient within
// LMHeadChunkBytes, at least 1.
func LinearCrossEntropyChunkRows(vocab int, dtype DType) int {
	perRow := 2 * max(vocab, 1) * dtype.Size()
	return max(1, LMHeadChunkBytes/perRow)
}

// LinearCrossEntropy is CrossEntropy(Linear(x, w, b), targets, o) for x
// [..., D], w [V, D], b [V] (or nil) and integer targets with one per row
// of x, computed over chunks of chunkRows rows (0: as
// LinearCrossEntropyChunkRows says) so that the [rows, V] logits and
// their gradient never exist whole: a language model's head and loss in
// the memory of one chunk. Forward keeps only the per-row losses of each
// chunk; backward recomputes each chunk's logits, forms their gradient,
// adds its contributions to x's and w's gradients and releases the chunk
// before the next. Under autocast the products run in the autocast dtype
// as Linear's do, and the chunk's logits are rounded to it, so the loss
// and x's gradient are those of the composed ops; w's gradient is summed
// over the chunks in F32 (a leaf's gradient directly, so no [V, D]
// temporary exists either), where the composed path rounds it once to the
// autocast dtype. Ignore index, label smoothing and the reduction follow
// CrossEntropy.
func (s *Scope) LinearCrossEntropy(x, w, b, targets *Tensor, o CrossEntropyOptions, chunkRows int) *Tensor {
	const op = "linear_cross_entropy"
	dev := sameDevice(op, x, w, b, targets)
	if w.Dim() != 2 || x.Dim() < 1 || x.shape[x.Dim()-1] != w.shape[1] {
		panic(errorf(op, "input %s does not fit weight %s", x.describe(), w.describe()))
	}
	if b != nil && (b.Dim() != 1 || b.shape[0] != w.shape[0]) {
		panic(errorf(op, "bias %s does not fit weight %s", b.describe(), w.describe()))
	}
	in, vocab := w.shape[1], w.shape[0]
	rows := x.Len() / max(in, 1)
	if targets.Len() != rows || (targets.dtype != I32 && targets.dtype != I64) {
		panic(errorf(op, "targets %s must be integers, one per row of input %s", targets.describe(), x.describe()))
	}
	if chunkRows < 0 {
		panic(errorf(op, "%d rows per chunk", chunkRows))
	}
	x2 := s.Reshape(x, -1, in)
	defer s.release(x2)
	// x is cast as Linear casts it; w is not put in the scope's cache of
	// autocast weights, where a tied head's [V, D] copy would stay until
	// the scope closes (through the whole backward of the blocks): the
	// op casts it for its forward and again for its backward.
	target := promote(x2.dtype, w.dtype)
	if s.autocast != device.Invalid && x2.dtype.IsFloat() && w.dtype.IsFloat() && x2.dtype != F64 && w.dtype != F64 {
		target = s.autocast
	}
	cx := s.castTo(x2, target)
	if cx != x2 {
		defer s.release(cx)
	}
	cw := newHeadWeight(w, target)
	defer cw.release()
	if chunkRows == 0 {
		chunkRows = LinearCrossEntropyChunkRows(vocab, cx.dtype)
	}
	tc := targets.packed(targets.dtype, s.cat)
	defer tc.Release()
	ignore, scale := crossEntropyReduction(tc, o)
	smoothing, softcap := o.LabelSmoothing, o.Softcap
	if softcap != 0 && (!(softcap > 0) || math.IsInf(softcap, 0)) {
		panic(errorf(op, "softcap %v: want a finite number above 0", softcap))
	}

	perRow := mustAlloc(dev, accumDType(cx.dtype), []int{rows}, memory.Temporary)
	defer perRow.Release()
	for _, lo := range chunkStarts(dev, rows, chunkRows) {
		n := min(chunkRows, rows-lo)
		func() {
			logits := chunkLogits(cx, cw, b, lo, n, s)
			defer logits.Release()
			softcapInPlace(logits, o.Softcap)
			device.CrossEntropy(dev, rowRange(perRow, lo, n), logits.view(), rowRange(tc, lo, n), ignore, smoothing)
		}()
	}
	out := mustAlloc(dev, perRow.dtype, []int{}, s.cat)
	dev.Reduce(device.Sum, out.view(), perRow.view())
	dev.Unary(device.MulScalar, out.view(), out.view(), scale)

	cw.release() // before the node saves anything: backward casts again
	save := []*Tensor{cx, w, tc}
	if b != nil {
		save = append(save, b)
	}
	needX, needW, needB := cx.needsGrad(), w.needsGrad(), b != nil && b.needsGrad()
	// The edge goes to w itself, not to its autocast copy: w's gradient
	// is summed in F32 across chunks, and rounding it to 16 bits for the
	// copy's cast node to widen again would lose what that bought.
	s.record(out, op, []*Tensor{cx, w, b}, save, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sx, st := saved[0], saved[2]
		var sb *Tensor
		if len(saved) > 3 {
			sb = saved[3]
		}
		dev := g.st.dev
		sw := newHeadWeight(saved[1], target)
		defer sw.release()
		up := mustAlloc(dev, g.dtype, []int{rows}, memory.Temporary)
		defer up.Release()
		gv := g.view()
		gv.Shape, gv.Strides = []int{rows}, []int{0}
		dev.Unary(device.MulScalar, up.view(), gv, scale)

		var dx, dw, db *Tensor
		fresh := false
		defer func() {
			if r := recover(); r != nil {
				for _, t := range []*Tensor{dx, dw, db} {
					if t != nil {
						t.Release()
					}
				}
				panic(r)
			}
		}()
		if needW && !ownsGrad(w) && 4*int64(vocab)*int64(in) > lmHeadSumBytes {
			// A 16-bit weight's F32 sum, in parts.
			var wg, dp *Tensor // w's gradient in w's dtype; a part's F32 sum
			defer func() {
				if r := recover(); r != nil {
					wg.Release()
					dp.Release()
					panic(r)
				}
			}()
			for i, part := range sumParts(vocab, in, sw.rows) {
				dp = nil
				grads := func() {
					if needX && dx == nil {
						dx = mustAlloc(dev, sx.dtype, sx.shape, s.cat)
					}
					if dp == nil {
						dp, fresh = mustAlloc(dev, accumDType(w.dtype), []int{part[1], in}, s.cat), true
					}
				}
				for _, lo := range chunkStarts(dev, rows, chunkRows) {
					n := min(chunkRows, rows-lo)
					linearCrossEntropyChunkBackward(sx, sw, sb, st, up, &dx, &dp, &db, grads, &fresh, lo, n, ignore, smoothing, softcap, part[0], i == 0, s)
				}
				grads()
				if fresh {
					dev.Fill(dp.view(), 0)
				}
				if wg == nil {
					wg = mustAlloc(dev, w.dtype, w.shape, s.cat)
				}
				dst := rowsOf(wg, part[0], part[1])
				dev.Copy(dst.view(), dp.view()) // rounded as a whole cast rounds it
				dst.Release()
				dp.Release()
			}
			dw = wg
		} else {
			// dx and dw are made once the first chunk's logits are gone
			// (grads), so that with one chunk the peak is the composed
			// path's: logits and their gradient, then their gradient and
			// the products'.
			grads := func() {
				if needX && dx == nil {
					dx = mustAlloc(dev, sx.dtype, sx.shape, s.cat)
				}
				if needW && dw == nil {
					dw, fresh = gradInto(w, s)
				}
			}
			for _, lo := range chunkStarts(dev, rows, chunkRows) {
				n := min(chunkRows, rows-lo)
				linearCrossEntropyChunkBackward(sx, sw, sb, st, up, &dx, &dw, &db, grads, &fresh, lo, n, ignore, smoothing, softcap, 0, true, s)
			}
			grads()
			if dw != nil {
				if fresh { // no rows, so no chunk wrote it
					dev.Fill(dw.view(), 0)
				}
				dw.st.version.Add(1)
			}
		}
		if !needB && db != nil {
			db.Release()
			db = nil
		}
		return []*Tensor{dx, dw, db}
	})
	return s.own(out)
}

// sumParts cuts a [vocab, in] weight's F32 gradient sum into parts of at
// most lmHeadSumBytes, as {first row, rows}: whole blocks of the weight's
// blockRows rows each where the weight is cast in blocks.
func sumParts(vocab, in, blockRows int) [][2]int {
	rowBytes := 4 * int64(max(in, 1))
	per := max(1, int(lmHeadSumBytes/rowBytes))
	if blockRows < vocab {
		per = max(blockRows, per/blockRows*blockRows)
	}
	var out [][2]int
	for v0 := 0; v0 < vocab; v0 += per {
		out = append(out, [2]int{v0, min(per, vocab-v0)})
	}
	return out
}

// linearCrossEntropyChunkBackward adds rows [lo, lo+n)'s contributions to
// *dw (written while *fresh, which it then clears, else added to), which
// holds the weight's gradient from vocabulary row v0 on (as many rows as
// it has), and, with first, to *dx (the rows themselves) and *db (made on
// the first chunk when there is a bias); grads makes *dx and *dw, where
// wanted, once the chunk's logits are released.
func linearCrossEntropyChunkBackward(sx *Tensor, sw *headWeight, sb, st, up *Tensor, dx, dw, db **Tensor, grads func(), fresh *bool, lo, n int, ignore int, smoothing, softcap float64, dv0 int, first bool, s *Scope) {
	dev := sx.st.dev
	logits := chunkLogits(sx, sw, sb, lo, n, s)
	defer logits.Release()
	softcapInPlace(logits, softcap)
	dl := mustAlloc(dev, logits.dtype, logits.shape, memory.Temporary)
	defer dl.Release()
	device.CrossEntropyBackward(dev, dl.view(), logits.view(), rowRange(st, lo, n), rowRange(up, lo, n), ignore, smoothing)
	if softcap != 0 {
		// Through the cap: d(c·tanh(z/c))/dz = 1 - (capped/c)², formed
		// in the capped logits' place, which nothing reads after.
		lv := logits.view()
		dev.Unary(device.MulScalar, lv, lv, 1/softcap)
		dev.Binary(device.Mul, lv, lv, lv)
		dev.Unary(device.MulScalar, lv, lv, -1)
		dev.Unary(device.AddScalar, lv, lv, 1)
		dev.Binary(device.Mul, dl.view(), dl.view(), lv)
	}
	logits.Release() // before the products: a chunk's peak is its logits and their gradient
	grads()
	// Over the weight's vocabulary blocks: dx's rows sum the blocks'
	// products, dw's rows of a block are that block's alone.
	for v0 := 0; v0 < sw.vocab; v0 += sw.rows {
		vn := min(sw.rows, sw.vocab-v0)
		if first && *dx != nil {
			wb := sw.block(v0, vn)
			dlb := colsOf(dl, v0, vn)
			rx := rowsOf(*dx, lo, n)
			beta := 1.0
			if v0 == 0 {
				beta = 0
			}
			gemmInto(rx, dlb, wb, 1, beta, s)
			rx.Release()
			dlb.Release()
			wb.Release()
		}
		// The block's rows of *dw, where *dw has them.
		a := max(v0, dv0)
		z := v0 + vn
		if *dw != nil {
			z = min(z, dv0+(*dw).shape[0])
		}
		if *dw != nil && a < z {
			beta := 1.0
			if *fresh {
				beta = 0 // a new gradient: the first chunk writes it
			}
			dlb := colsOf(dl, a, z-a)
			rx := rowsOf(sx, lo, n)
			dwb := rowsOf(*dw, a-dv0, z-a)
			dlt := transposeView(dlb)
			gemmInto(dwb, dlt, rx, 1, beta, s)
			dlt.Release()
			dwb.Release()
			rx.Release()
			dlb.Release()
		}
	}
	if *dw != nil {
		*fresh = false
	}
	if !first {
		return
	}
	if sb != nil {
		part := s.reduce(device.Sum, dl, []int{0}, false, 1, accumDType(dl.dtype))
		if *db == nil {
			*db = part
			return
		}
		dev.Binary(device.Add, (*db).view(), (*db).view(), part.view())
		part.Release()
	}
}

// castWeight returns w in dtype: a new handle on w, or a copy counted as
// memory.Temporary and not recorded (LinearCrossEntropy's node stands for
// it in the graph).
func castWeight(w *Tensor, dtype DType) *Tensor {
	if w.dtype == dtype {
		return w.share()
	}
	c := mustAlloc(w.st.dev, dtype, w.shape, memory.Temporary)
	w.st.dev.Copy(c.view(), w.view())
	return c
}

// chunkLogits returns rows [lo, lo+n) of x·wᵀ + b as a new temporary in
// x's dtype, computed as Linear computes them (the product adding the
// bias), block of vocabulary by block, so a chunk's logits are the
// composed path's rows.
func chunkLogits(x *Tensor, w *headWeight, b *Tensor, lo, n int, s *Scope) *Tensor {
	dev := x.st.dev
	out := mustAlloc(dev, x.dtype, []int{n, w.vocab}, memory.Temporary)
	defer releaseOnPanic(out)()
	rx := rowsOf(x, lo, n)
	for v0 := 0; v0 < w.vocab; v0 += w.rows {
		vn := min(w.rows, w.vocab-v0)
		wb := w.block(v0, vn)
		wt := transposeView(wb)
		ob := colsOf(out, v0, vn)
		var bb *Tensor // the block's bias
		if b != nil {
			bb = b.share()
			bb.shape, bb.strides = []int{vn}, []int{b.strides[0]}
			bb.offset += v0 * b.strides[0]
		}
		gemmWith(ob, rx, wt, 1, 0, device.Full, bb, s)
		if bb != nil {
			bb.Release()
		}
		ob.Release()
		wt.Release()
		wb.Release()
	}
	rx.Release()
	return out
}

// rowsOf views rows [lo, lo+n) of a 2-D tensor.
func rowsOf(t *Tensor, lo, n int) *Tensor {
	shape := []int{n, t.shape[1]}
	return viewOf(t, shape, append([]int(nil), t.strides...), t.offset+lo*t.strides[0])
}

// rowRange is elements [lo, lo+n) of a contiguous 1-D tensor as a
// device view.
func rowRange(t *Tensor, lo, n int) device.View {
	v := t.view()
	v.Offset += lo
	v.Shape, v.Strides = []int{n}, []int{1}
	return v
}

// crossEntropyReduction returns the ignored target of o and the factor
// the summed per-row losses are multiplied by: 1 for a sum, 1/(targets
// not ignored) for the mean. CrossEntropy and LinearCrossEntropy both
// use it.
func crossEntropyReduction(tc *Tensor, o CrossEntropyOptions) (ignore int, scale float64) {
	ignore = o.Ignore.Index()
	scale = 1.0
	if o.Reduction == MeanReduction {
		n := tc.Len() // a plan's targets hold no values to count
		if device.StoresValues(tc.st.dev) {
			n = 0
			for _, t := range tc.Int64s() {
				if t != int64(ignore) {
					n++
				}
			}
		}
		scale = 1 / float64(max(n, 1))
	}
	return ignore, scale
}

// headWeight is the head's weight as the products take it: w itself when
// no cast is needed, else w cast to the products' dtype, whole when that
// copy fits in LMHeadCastBytes and otherwise in blocks of vocabulary rows
// cast on demand.
type headWeight struct {
	w     *Tensor // the weight, [V, D]
	dtype DType   // the products' dtype
	whole *Tensor // w in dtype, when it is cast once (or w shared)
	rows  int     // vocabulary rows per block
	vocab int
}

func newHeadWeight(w *Tensor, dtype DType) *headWeight {
	h := &headWeight{w: w, dtype: dtype, vocab: w.shape[0]}
	rowBytes := max(w.shape[1], 1) * dtype.Size()
	if w.dtype == dtype || int64(h.vocab)*int64(rowBytes) <= LMHeadCastBytes {
		h.whole = castWeight(w, dtype)
		h.rows = max(h.vocab, 1)
		return h
	}
	h.rows = max(1, LMHeadCastBytes/rowBytes)
	return h
}

// block returns vocabulary rows [v0, v0+n) of the weight in the products'
// dtype; the caller releases it.
func (h *headWeight) block(v0, n int) *Tensor {
	if h.whole != nil {
		return rowsOf(h.whole, v0, n)
	}
	src := rowsOf(h.w, v0, n)
	defer src.Release()
	return castWeight(src, h.dtype)
}

func (h *headWeight) release() {
	if h.whole != nil {
		h.whole.Release()
		h.whole = nil
	}
}

// colsOf views columns [lo, lo+n) of a 2-D tensor.
func colsOf(t *Tensor, lo, n int) *Tensor {
	shape := []int{t.shape[0], n}
	return viewOf(t, shape, append([]int(nil), t.strides...), t.offset+lo*t.strides[1])
}

// softcapInPlace caps a chunk's logits softly, c·tanh(z/c), as
// Scope.Softcap does (0: no cap).
func softcapInPlace(logits *Tensor, c float64) {
	if c == 0 {
		return
	}
	dev, lv := logits.st.dev, logits.view()
	dev.Unary(device.MulScalar, lv, lv, 1/c)
	dev.Unary(device.Tanh, lv, lv, 0)
	dev.Unary(device.MulScalar, lv, lv, c)
}

// chunkStarts are the first rows of the chunks a pass over rows rows in
// chunks of chunkRows runs on dev: every chunk's on a device that stores
// values; on one that stores none (a plan) the first two chunks' and the
// last's. Chunks of one height allocate alike: the first makes what
// persists over them (the gradients it adds into), the second is every
// later one of its height in the steady state after, the last may be
// shorter; so the plan's peaks are those of the whole pass (train's
// TestPlanSkipsRepeatsExactly), in a time that does not grow with the
// tokens.
func chunkStarts(dev device.Device, rows, chunkRows int) []int {
	var out []int
	n := (rows + chunkRows - 1) / chunkRows
	for i := 0; i < n; i++ {
		if !device.StoresValues(dev) && !plantrace.Every() && i >= 2 && i < n-1 {
			continue
		}
		out = append(out, i*chunkRows)
	}
	return out
}
