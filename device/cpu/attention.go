package cpu

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu/gemm"
	"github.com/memfit/memfit/memory"
)

// Fused causal attention (device.AttentionKernels). Each (batch, head)
// pair is one unit of work, done by one goroutine from start to end, so
// results do not depend on scheduling. Within a head, query rows go in
// blocks of Br = device.AttentionBlock: the block's scores against the
// keys up to its last row (two products: see scores), normalised row by
// row in place, are multiplied by v; nothing of size T×T exists. Backward
// recomputes each block's probabilities from the saved log-sum-exps.
//
// With example boundaries or a sliding window (device.Attention.Starts) a
// block meets only the keys from the earliest start among its rows: the
// products below take their operands from that key, k0, so a block of a
// packed row whose examples all begin at or after its first row costs its
// diagonal square alone, and a block under a window of W keys meets
// W-1+Br of them, forward and backward (its dk and dv products too: they
// run over keys k0…, into the head's rows from k0); the rows that begin
// later mask the keys before their own start.
//
// Under a soft cap (device.Attention.Softcap) each row's live scores are
// capped, c·tanh(s/c), before its maximum is found (softcapRow); backward
// recomputes the cap and multiplies the scores' gradient by its
// derivative, element by element (softcapGrad). Without one the code is
// the code above, bit for bit.
//
// Grouped-query attention (k and v with KV < H heads): head h reads key
// and value head h/G, G = H/KV, in forward and backward alike, and a
// (batch, head) pair stays one unit of work. Its dk and dv are the head's
// partial sums; the G partials of a group are added in head order, each
// head adding its own after the head before it (forGroupHeads: workers
// take the pairs in order and wait their turn to add), so that dk of key
// head g is ((P₀ + P₁) + P₂) + … whatever the scheduling, P_j the f32
// (f64) partial of query head gG+j, computed as a head without groups
// computes its own. f32 and f64 sums accumulate in dk and dv in place
// (the group's first head writes its partial there), 16-bit ones in two
// f32 [T, D] accumulators of the workspace (device.GroupSumBytes), rounded
// to the dtype once, by the group's last head. Without groups (KV = H) the
// code is the code above, bit for bit.
//
// The products read q, k, v and dout where they lie (heads viewed in a
// fused projection, at its row stride), in their own dtype, as the
// composed path's products do; scores and probabilities are f32 (f64 for
// F64), and for 16-bit inputs the probabilities and their gradient are
// rounded to the input dtype for the products that take them, as the
// composed path stores them (backward rounds each row as it is finished,
// into buffers of their own, so that no pass re-reads the block).

// attnGeom is the [B, H, T, D] shape of one call, with its key and value
// heads (kv, dividing h) and the query heads of each (grp = h/kv).
type attnGeom struct{ b, h, t, d, br, kv, grp int }

func geomOf(q, k device.View) attnGeom {
	g := attnGeom{b: q.Shape[0], h: q.Shape[1], t: q.Shape[2], d: q.Shape[3], kv: k.Shape[1]}
	g.br = min(device.AttentionBlock, g.t)
	g.grp = g.h / g.kv
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

// at is the operand r without its first i rows and j columns.
func (r rows) at(i, j int) rows {
	r.off += i*r.ld + j
	return r
}

func (r rows) f32() []float32 { return floats[float32](r.buf)[r.off:] }
func (r rows) f64() []float64 { return floats[float64](r.buf)[r.off:] }
func (r rows) u16() []uint16  { return floats[uint16](r.buf)[r.off:] }

// product computes c = alpha·op(a)·op(b) + beta·c on one thread (the
// heads are the parallelism); a and b share a dtype, c is T (f32 for
// every dtype but F64). tri lets the square products of a block's
// diagonal skip what the causal mask zeroes.
func product[T float](tri gemm.Triangle, ta, tb bool, m, n, k int, alpha float64, a, b rows, beta float64, c []T, ldc int) {
	o := gemm.Options{Threads: 1, Triangle: tri}
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

// The products of a block of m query rows from row i0 meet keys 0…n-1,
// n = i0+m: the past keys (j < i0), which every row of the block sees,
// and the block's diagonal square (i0 <= j < n), of which the causal mask
// keeps the lower triangle. Each product is split there so that the
// square goes through the GEMM's triangular options and skips what the
// mask zeroes: at T = 256 and Br = 128 a third of the multiply-adds,
// less the tiles the diagonal crosses.

// scores writes c[:, :n] = alpha·a·bᵀ for a's m rows against b's n rows
// (rows of b past the diagonal give zeros). Splitting C's columns does
// not change any element's sum.
func scores[T float](c []T, ldc, i0, m, d int, alpha float64, a, b rows) {
	product(gemm.Full, false, true, m, i0, d, alpha, a, b, 0, c, ldc)
	product(gemm.LowerC, false, true, m, m, d, alpha, a, b.at(i0, 0), 0, c[i0:], ldc)
}

// alongKeys computes c = alpha·p·b + beta·c, p (m×n) the block's
// probabilities or their gradient, zero above the diagonal, and b the
// head's rows 0…n-1 (d columns). The sum over the keys is split into the
// past and the square, so that it rounds twice, deterministically.
func alongKeys[T float](c []T, ldc, i0, m, d int, alpha float64, p, b rows, beta float64) {
	product(gemm.Full, false, false, m, d, i0, alpha, p, b, beta, c, ldc)
	product(gemm.LowerA, false, false, m, d, m, alpha, p.at(0, i0), b.at(i0, 0), 1, c, ldc)
}

// perKey accumulates c[:n] += alpha·pᵀ·b into the head's per-key rows, p
// as alongKeys and b the block's m rows. Splitting C's rows does not
// change any element's sum.
func perKey[T float](c []T, ldc, i0, m, d int, alpha float64, p, b rows) {
	product(gemm.Full, true, false, i0, d, m, alpha, p, b, 1, c, ldc)
	product(gemm.UpperA, true, false, m, d, m, alpha, p.at(0, i0), b, 1, c[i0*ldc:], ldc)
}

// blockOperand is a block's rows src (ld apart) as a product's operand
// of dtype dt: src itself when dt is T's dtype (rounded false), else the
// 16-bit buffer to, which roundRow fills.
func blockOperand[T float](src []T, ld int, dt device.DType, to []byte) (op rows, rounded bool) {
	var z T
	if _, wide := any(z).(float64); (wide && dt == device.F64) || (!wide && dt == device.F32) {
		return rows{buf: unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), len(src)*int(unsafe.Sizeof(z))), dt: dt, ld: ld}, false
	}
	return rows{buf: to, dt: dt, ld: ld}, true
}

// roundRow writes row r of a rounded blockOperand from src.
func roundRow[T float](op rows, r int, src []T) {
	store(device.View{Buf: device.Buffer{Host: op.buf}, DType: op.dt}, op.off+r*op.ld, 1, src)
}

// direct reports whether the kernels' T is v's dtype: the products then
// write v's rows in place (at its row stride) instead of a block of
// scratch that storeRows copies out.
func direct[T float](v device.View) bool {
	var z T
	_, wide := any(z).(float64)
	return (wide && v.DType == device.F64) || (!wide && v.DType == device.F32)
}

// headC is rows r0… of head (b, h) of v as a product's C: elements and
// row stride. v's dtype is T's (direct).
func headC[T float](v device.View, b, h, r0 int) ([]T, int) {
	r := headRows(v, b, h, r0)
	return floats[T](r.buf)[r.off:], r.ld
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

// dotT is the dot product of two rows (f32 ones as the softmax
// gradient's kernel sums y·dy).
func dotT[T float](a, b []T) float64 {
	if a32, ok := any(a).([]float32); ok {
		return float64(rowDot(a32, any(b).([]float32)))
	}
	var s float64
	for i, v := range a {
		s += float64(v) * float64(b[i])
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

// softcapRow caps a row of scores softly in place: c·tanh(s/c)
// (device.Attention.Softcap), computed in float64 and rounded once.
func softcapRow[T float](x []T, c float64) {
	for j, v := range x {
		x[j] = T(c * math.Tanh(float64(v)/c))
	}
}

// softcapGrad is backward's row under a soft cap: from the raw scores s
// (in p) and dP (in dp) of one row's keys, it writes the dropped
// probabilities P' = P·z into p and the raw scores' gradient
// dS = P·(z·dP − Δ)·(1 − tanh²(s/c)) into dp, P = exp(c·tanh(s/c) − lse)
// and z the dropout factor of element base+j: the rows without a cap
// take the vector kernels above instead. Each element is computed in
// float64 and rounded once.
func softcapGrad[T float](p, dp []T, a device.Attention, lse, delta float64, base uint64) {
	c, keep := a.Softcap, 1/(1-a.Dropout)
	for j, s := range p {
		th := math.Tanh(float64(s) / c)
		pij := math.Exp(c*th - lse)
		z := 1.0
		if a.Dropout > 0 {
			z = keep
			if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
				z = 0
			}
		}
		dp[j] = T(pij * (z*float64(dp[j]) - delta) * (1 - th*th))
		p[j] = T(pij * z)
	}
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

// forGroupHeads runs work for every (batch, head) pair, as forHeads,
// and then add for each in the pairs' order: worker w (of at most
// device.AttentionSlots, slot w of the workspace its own) takes the next
// pair not yet taken, runs work, waits until add has run for every pair
// before it, and runs add. Pairs are taken in order, so the pair whose
// turn it is has been taken by a worker that is not waiting: no worker
// waits forever. An interrupted work still runs its add (the results are
// being abandoned) so that the others' turns come.
func (d *Device) forGroupHeads(g attnGeom, ws []byte, work, add func(slot []byte, b, h int)) {
	heads := g.b * g.h
	slots := min(heads, device.AttentionSlots)
	per := len(ws) / slots
	workers := min(d.threads, slots)
	var (
		next atomic.Int64
		mu   sync.Mutex
		turn int
		wg   sync.WaitGroup
	)
	cond := sync.NewCond(&mu)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := ws[w*per : (w+1)*per]
			for {
				bh := int(next.Add(1) - 1)
				if bh >= heads {
					return
				}
				work(mine, bh/g.h, bh%g.h)
				mu.Lock()
				for turn != bh {
					cond.Wait()
				}
				mu.Unlock()
				add(mine, bh/g.h, bh%g.h)
				mu.Lock()
				turn++
				cond.Broadcast()
				mu.Unlock()
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

// segStarts returns a's starts, read in place, and the slots' share of
// the call's workspace ws: what follows the bytes a.Workspace counts for
// the starts' device copy, which the CPU does not need.
func segStarts(ws []byte, a device.Attention, shape []int) ([]int32, []byte) {
	return a.Starts, ws[a.StartsBytes(shape):]
}

// keyStart is the first key the block of m rows from row i0 of batch row
// b meets: the earliest start among its rows (0 without starts). Starts
// are at most their row, so it is at most i0.
func keyStart(starts []int32, b, t, i0, m int) int {
	if starts == nil {
		return 0
	}
	k0 := i0
	for _, s := range starts[b*t+i0 : b*t+i0+m] {
		k0 = min(k0, int(s))
	}
	return k0
}

// rowStart is the first key row i of batch row b attends.
func rowStart(starts []int32, b, t, i int) int {
	if starts == nil {
		return 0
	}
	return int(starts[b*t+i])
}

// split cuts n elements of T off the front of b.
func split[T float](b []byte, n int) ([]T, []byte) {
	var z T
	k := n * int(unsafe.Sizeof(z))
	return floats[T](b[:k]), b[k:]
}

// checkUntiled panics for a call marked tiled: the CPU's kernels are slot
// kernels (it lacks device.CapTiledAttention), so a caller that set Tiled
// did not ask device.AttentionTiled.
func checkUntiled(a device.Attention) {
	if a.Tiled {
		panic("cpu: attention: a call marked Tiled: the CPU's kernels hold a block's scores per slot (device.AttentionTiled is false here)")
	}
}

// CausalAttention writes out and lse (see device.AttentionKernels).
func (d *Device) CausalAttention(out, lse, q, k, v device.View, a device.Attention) {
	a.Check(q.Shape, k.Shape, v.Shape)
	checkUntiled(a)
	ws := d.workspace(a.Workspace(q.Shape, k.Shape[1], q.DType, false))
	defer d.Free(ws)
	if q.DType == device.F64 {
		attentionForward[float64](d, ws.Host, out, lse, q, k, v, a)
		return
	}
	attentionForward[float32](d, ws.Host, out, lse, q, k, v, a)
}

func attentionForward[T float](d *Device, ws []byte, out, lse, q, k, v device.View, a device.Attention) {
	g := geomOf(q, k)
	t, dim, br := g.t, g.d, g.br
	lses := floats[T](lse.Buf.Host)[lse.Offset:]
	keep := T(1 / (1 - a.Dropout))
	starts, ws := segStarts(ws, a, q.Shape)
	d.forHeads(g, ws, func(slot []byte, b, h int) {
		sc, rest := split[T](slot, br*t) // the block's scores, then probabilities
		ow, rest := split[T](rest, br*dim)
		p, round := blockOperand(sc, t, q.DType, rest) // the probabilities in q's dtype
		bh, hk := b*g.h+h, h/g.grp                     // hk: the key and value head
		for i0 := 0; i0 < t; i0 += br {
			if d.mem.Interrupted() != nil {
				// The computation is being abandoned (Allocator.Interrupt):
				// the next op's allocation says so; a long context's
				// blocks are not worth finishing.
				return
			}
			m := min(br, t-i0)
			n := i0 + m // keys of the block: those up to its last row
			// from k0: column c of the block's rows is key k0+c, and
			// the products see the past keys as i0-k0 of them.
			k0 := keyStart(starts, b, t, i0, m)
			scores(sc, t, i0-k0, m, dim, a.Scale, headRows(q, b, h, i0), headRows(k, b, hk, k0))
			for r := range m {
				i := i0 + r
				lo := rowStart(starts, b, t, i)
				row := sc[r*t : r*t+n-k0]
				live := row[lo-k0 : i+1-k0]
				if a.Softcap != 0 {
					softcapRow(live, a.Softcap)
				}
				mx := rowMaxT(live)
				expShifted(live, mx)
				sum := sumT(live)
				lses[bh*t+i] = T(mx + math.Log(sum))
				// As the softmax kernel normalises: the same bits in f32.
				scaleT(live, T(1/sum))
				if a.Dropout > 0 {
					base := uint64((bh*t+i)*t + lo)
					for j := range live {
						if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
							live[j] = 0
						} else {
							live[j] *= keep
						}
					}
				}
				clear(row[:lo-k0])
				clear(row[i+1-k0:])
			}
			if round {
				for r := range m {
					roundRow(p, r, sc[r*t:r*t+n-k0])
				}
			}
			if direct[T](out) {
				c, ldc := headC[T](out, b, h, i0)
				alongKeys(c, ldc, i0-k0, m, dim, 1, p, headRows(v, b, hk, k0), 0)
				continue
			}
			alongKeys(ow, dim, i0-k0, m, dim, 1, p, headRows(v, b, hk, k0), 0)
			storeRows(out, ow, b, h, i0, m, dim)
		}
	})
}

// CausalAttentionBackward writes dq, dk and dv (see
// device.AttentionKernels).
func (d *Device) CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	a.Check(q.Shape, k.Shape, v.Shape)
	checkUntiled(a)
	ws := d.workspace(a.Workspace(q.Shape, k.Shape[1], q.DType, true))
	defer d.Free(ws)
	if q.DType == device.F64 {
		attentionBackward[float64](d, ws.Host, dq, dk, dv, dout, out, lse, q, k, v, a)
		return
	}
	attentionBackward[float32](d, ws.Host, dq, dk, dv, dout, out, lse, q, k, v, a)
}

// bwdSlot is a slot's share of backward's workspace: a block's
// probabilities (sc) and their gradient (dpw), a head's dk and dv
// accumulators, a block's dq rows (or a row of out), a row of dout, and
// for 16-bit inputs (rest) the block's rounded probabilities and
// gradient.
type bwdSlot[T float] struct {
	sc, dpw, dkw, dvw, dqw, dow []T
	rest                        []byte
}

func bwdSlotOf[T float](slot []byte, g attnGeom) (s bwdSlot[T]) {
	t, dim, br := g.t, g.d, g.br
	s.sc, slot = split[T](slot, br*t)
	s.dpw, slot = split[T](slot, br*t)
	s.dkw, slot = split[T](slot, t*dim)
	s.dvw, slot = split[T](slot, t*dim)
	s.dqw, slot = split[T](slot, br*dim)
	s.dow, s.rest = split[T](slot, dim)
	return s
}

// addTo adds src to dst element by element: dst[i] + src[i].
func addTo[T float](dst, src []T) {
	for i, x := range src {
		dst[i] += x
	}
}

func attentionBackward[T float](d *Device, ws []byte, dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	g := geomOf(q, k)
	t, dim, br := g.t, g.d, g.br
	lses := floats[T](lse.Buf.Host)[lse.Offset:]
	keep := T(1 / (1 - a.Dropout))
	starts, ws := segStarts(ws, a, q.Shape)
	// A group's sums of 16-bit dk and dv (device.GroupSumBytes), in
	// front of the slots.
	var sumK, sumV []T
	if device.GroupSumBytes(q.Shape, g.kv, q.DType, true) > 0 {
		sumK, ws = split[T](ws, t*dim)
		sumV, ws = split[T](ws, t*dim)
	}
	// work computes the dq of head (b, h) and its dk and dv, over the
	// rows of key and value head h/G: into dk and dv themselves where
	// inPlace allows it and their dtype is T's (cleared first), else into
	// the slot's accumulators (which store or add moves on).
	work := func(slot []byte, b, h int, inPlace bool) (inDK, inDV bool) {
		w := bwdSlotOf[T](slot, g)
		sc, dpw, dqw, dow, rest := w.sc, w.dpw, w.dqw, w.dow, w.rest
		hk := h / g.grp
		// P' and dS as the products take them: in q's dtype, rounded
		// from sc and dpw, when 16-bit (rest is then their two buffers).
		pr, round := blockOperand(sc, t, q.DType, rest[:len(rest)/2])
		dsr, _ := blockOperand(dpw, t, q.DType, rest[len(rest)/2:])
		// dk and dv accumulate over the blocks: in place when their
		// dtype is T's (cleared first), else in scratch stored at the end.
		dkc, dkld, dvc, dvld := w.dkw, dim, w.dvw, dim
		inDK, inDV = inPlace && direct[T](dk), inPlace && direct[T](dv)
		if inDK {
			dkc, dkld = headC[T](dk, b, hk, 0)
		}
		if inDV {
			dvc, dvld = headC[T](dv, b, hk, 0)
		}
		for r := range t {
			clear(dkc[r*dkld : r*dkld+dim])
			clear(dvc[r*dvld : r*dvld+dim])
		}
		bh := b*g.h + h
		var delta [device.AttentionBlock]T
		for i0 := 0; i0 < t; i0 += br {
			if d.mem.Interrupted() != nil {
				// The computation is being abandoned (Allocator.Interrupt):
				// the next op's allocation says so; a long context's
				// blocks are not worth finishing.
				return inDK, inDV
			}
			m := min(br, t-i0)
			n := i0 + m
			k0 := keyStart(starts, b, t, i0, m) // as in forward
			// Δᵢ = Σⱼ Pᵢⱼ·dPᵢⱼ = doutᵢ·outᵢ, with or without dropout. load
			// widens 16-bit rows into the scratch rows and reads f32 ones
			// in place.
			qr, dor, outr := headRows(q, b, h, i0), headRows(dout, b, h, i0), headRows(out, b, h, i0)
			for r := range m {
				ov := load(out, outr.off+r*outr.ld, dim, 1, dqw[:dim])
				gv := load(dout, dor.off+r*dor.ld, dim, 1, dow[:dim])
				delta[r] = T(dotT(gv, ov))
			}
			scores(sc, t, i0-k0, m, dim, a.Scale, qr, headRows(k, b, hk, k0))
			scores(dpw, t, i0-k0, m, dim, 1, dor, headRows(v, b, hk, k0))
			for r := range m {
				i := i0 + r
				lo := rowStart(starts, b, t, i)
				prow := sc[r*t : r*t+n-k0]
				dprow := dpw[r*t : r*t+n-k0]
				p, dp := prow[lo-k0:i+1-k0], dprow[lo-k0:i+1-k0] // keys lo…i
				dl := delta[r]
				switch {
				case a.Softcap != 0:
					// Through the cap, element by element.
					softcapGrad(p, dp, a, float64(lses[bh*t+i]), float64(dl), uint64((bh*t+i)*t+lo))
				case a.Dropout == 0:
					expShifted(p, float64(lses[bh*t+i]))
					// dSᵢⱼ = Pᵢⱼ·(dPᵢⱼ - Δᵢ): the softmax gradient's row
					// kernel (the same two roundings as the loop).
					j0 := 0
					if p32, ok := any(p).([]float32); ok {
						j0 = softmaxGradVector(any(dp).([]float32), p32, any(dp).([]float32), float32(dl))
					}
					for j := j0; j < len(p); j++ {
						dp[j] = p[j] * (dp[j] - dl)
					}
				default:
					expShifted(p, float64(lses[bh*t+i]))
					// dP = dP'·z and the dropped probabilities P' = P·z,
					// z the mask over (1-p).
					base := uint64((bh*t+i)*t + lo)
					for j, pij := range p {
						z := keep
						if uniform01(a.Seed, base+uint64(j)) < a.Dropout {
							z = 0
						}
						dp[j] = pij * (z*dp[j] - dl)
						p[j] = pij * z
					}
				}
				clear(prow[:lo-k0])
				clear(dprow[:lo-k0])
				clear(prow[i+1-k0:])
				clear(dprow[i+1-k0:])
				if round {
					roundRow(pr, r, prow)
					roundRow(dsr, r, dprow)
				}
			}
			// dv += P'ᵀ·dout; dq = scale·dS·k; dk += scale·dSᵀ·q, over
			// the keys from k0.
			perKey(dvc[k0*dvld:], dvld, i0-k0, m, dim, 1, pr, dor)
			perKey(dkc[k0*dkld:], dkld, i0-k0, m, dim, a.Scale, dsr, qr)
			if direct[T](dq) {
				c, ldc := headC[T](dq, b, h, i0)
				alongKeys(c, ldc, i0-k0, m, dim, a.Scale, dsr, headRows(k, b, hk, k0), 0)
				continue
			}
			alongKeys(dqw, dim, i0-k0, m, dim, a.Scale, dsr, headRows(k, b, hk, k0), 0)
			storeRows(dq, dqw, b, h, i0, m, dim)
		}
		return inDK, inDV
	}
	if g.grp == 1 {
		d.forHeads(g, ws, func(slot []byte, b, h int) {
			inDK, inDV := work(slot, b, h, true)
			w := bwdSlotOf[T](slot, g)
			if !inDK {
				storeRows(dk, w.dkw, b, h, 0, t, dim)
			}
			if !inDV {
				storeRows(dv, w.dvw, b, h, 0, t, dim)
			}
		})
		return
	}
	// Grouped heads: the group's first head writes f32 (f64) partials in
	// place, and every later one adds its own after it; 16-bit partials
	// go through sumK and sumV, stored by the group's last head.
	d.forGroupHeads(g, ws, func(slot []byte, b, h int) {
		work(slot, b, h, h%g.grp == 0)
	}, func(slot []byte, b, h int) {
		w := bwdSlotOf[T](slot, g)
		hk, j := h/g.grp, h%g.grp
		for _, x := range []struct {
			dst       device.View
			part, sum []T
		}{{dk, w.dkw, sumK}, {dv, w.dvw, sumV}} {
			if direct[T](x.dst) {
				if j == 0 {
					continue // the partial is in place
				}
				c, ld := headC[T](x.dst, b, hk, 0)
				for r := range t {
					addTo(c[r*ld:r*ld+dim], x.part[r*dim:(r+1)*dim])
				}
				continue
			}
			if x.sum == nil {
				panic("cpu: attention: grouped 16-bit heads without the workspace's group sums (device.GroupSumBytes)")
			}
			if j == 0 {
				copy(x.sum, x.part)
			} else {
				addTo(x.sum, x.part)
			}
			if j == g.grp-1 {
				storeRows(x.dst, x.sum, b, hk, 0, t, dim)
			}
		}
	})
}
