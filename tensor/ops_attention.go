package tensor

import (
	"math"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// CausalAttention returns dropout(softmax(scale·q·kᵀ, causal))·v for q, k
// and v [B, H, T, D] (heads of a fused projection viewed in place, say):
// causal multi-head attention (k and v may have fewer heads, KV dividing
// H: grouped-query attention, as Attention says). Dropout applies to the
// probabilities when dropout > 0, with masks keyed by seed.
//
// On a device with fused attention kernels (device.CapAttention) neither
// forward nor backward holds the [B, H, T, T] scores or probabilities:
// the node saves q, k, v, the result and one log-sum-exp per row, and
// backward recomputes the probabilities block by block. Elsewhere (or with
// the capability hidden by device.Without) it is the composition
// CausalScores, Softmax, Dropout, CausalMatMul, which computes the same
// values within float tolerance and draws the same dropout masks. Under
// autocast the products run in the autocast dtype, as every product does.
// The result is laid out as v, so heads viewed inside [B, T, H, D] join
// back into [B, T, H·D] without a copy.
func (s *Scope) CausalAttention(q, k, v *Tensor, scale, dropout float64, seed uint64) *Tensor {
	return s.SegmentedAttention(q, k, v, nil, scale, dropout, seed)
}

// SegmentedAttention is CausalAttention of rows that pack several
// examples end to end (seg, of q's B and T): query i attends the keys of
// its own example only, from the row where that example begins up to i,
// so that each example's result is what CausalAttention of it alone
// gives. The fused kernels skip the keys before a block of queries'
// earliest start (device.Attention.Starts); the composed path fills the
// scores before each query's start with −Inf, as CausalScores fills those
// after it. Dropout draws the masks CausalAttention draws. A nil seg is
// CausalAttention. It is Attention with Scale, Dropout and Seed alone.
func (s *Scope) SegmentedAttention(q, k, v *Tensor, seg *Segments, scale, dropout float64, seed uint64) *Tensor {
	return s.Attention(q, k, v, seg, AttentionOptions{Scale: scale, Dropout: dropout, Seed: seed})
}

// AttentionOptions are the parameters of causal attention (Attention,
// SelfAttention). The zero values of Dropout, Window and Softcap are
// none, and a call that sets none of them is SegmentedAttention's
// exactly.
type AttentionOptions struct {
	Scale   float64 // of the scores, usually 1/√D
	Dropout float64 // probability of dropping a probability, in [0, 1)
	Seed    uint64  // the dropout masks' stream
	// Window, when above 0, is a sliding window of that many keys, the
	// query's own included: query i attends the keys j with
	// i-Window < j <= i (Hugging Face's sliding_window: Mistral, Qwen 2,
	// Gemma 2 and 3's local layers), and, with Segments, none before its
	// example's start either. A window of T keys or more is no window.
	Window int
	// Softcap, when above 0, caps each score softly before the mask and
	// the softmax: s = Scale·q·k becomes Softcap·tanh(s/Softcap) (Gemma
	// 2's attn_logit_softcapping), and the gradient goes through the cap.
	Softcap float64
}

// check panics with *Error unless o is valid for op.
func (o AttentionOptions) check(op string) {
	if o.Dropout < 0 || o.Dropout >= 1 {
		panic(errorf(op, "dropout %v must be in [0, 1)", o.Dropout))
	}
	if o.Window < 0 {
		panic(errorf(op, "window %d: want 0 (none) or a number of keys above 0", o.Window))
	}
	if o.Softcap != 0 && !(o.Softcap > 0 && !math.IsInf(o.Softcap, 1)) {
		panic(errorf(op, "soft cap %v: want 0 (none) or a finite number above 0", o.Softcap))
	}
}

// Attention returns dropout(softmax(scores, mask))·v for q [B, H, T, D]
// and k and v [B, KV, T, D] (heads of a fused projection viewed in place,
// say), KV dividing H: causal multi-head attention with the options o,
// grouped-query attention where KV < H (query head h reads key and value
// head h/(H/KV), as Hugging Face's repeat_kv spreads them, without the
// copies: the gradients of k and v come back [B, KV, T, D], each head's
// the sum over its group's query heads, in a fixed order, so that runs
// agree bit for bit). The scores are o.Scale·q·kᵀ,
// capped to o.Softcap·tanh(s/o.Softcap) under a soft cap; the mask keeps
// for query i the keys j <= i, from the start of its example (seg, of
// q's B and T; nil: one example per row) and within o.Window keys of it
// (j > i-o.Window); dropout applies to the probabilities when
// o.Dropout > 0, with masks keyed by o.Seed.
//
// On a device with fused attention kernels (device.CapAttention) neither
// forward nor backward holds the [B, H, T, T] scores or probabilities:
// the node saves q, k, v, the result and one log-sum-exp per row, and
// backward recomputes the probabilities block by block. Example starts
// and the window are one array of B·T int32 starts
// (device.Attention.Starts: row i starts at max(its example's start,
// i-Window+1)), made once per window and Segments (kept by the Segments)
// or once per call without them, so that the kernels skip the key blocks
// before a block of queries' earliest start: a window of W keys costs
// O(T·W), forward and backward. Elsewhere (or with the capability hidden
// by device.Without) it is, after k and v are repeated to H heads (a
// copy laid out token by token, whose gradient sums the copies back),
// the composition CausalScores, the cap
// (MulScalar, Tanh, MulScalar) and CausalMask under a soft cap,
// MaskedFill of the keys before each query's start (from a [B, 1, T, T]
// mask made on the host, with Segments or a window), Softmax, Dropout
// and CausalMatMul, which computes the same values within float
// tolerance and draws the same dropout masks. Under autocast the
// products run in the autocast dtype, as every product does. The result
// is laid out as v (with H heads where v has fewer: groupedOutput), so
// heads viewed inside [B, T, H, D] join back into [B, T, H·D] without a
// copy.
func (s *Scope) Attention(q, k, v *Tensor, seg *Segments, o AttentionOptions) *Tensor {
	dev := sameDevice("causal_attention", q, k, v)
	if !attentionHeads(q, k, v) {
		panic(errorf("causal_attention", "q %s must be [B, H, T, D] and k %s and v %s [B, KV, T, D] with KV dividing H", q.describe(), k.describe(), v.describe()))
	}
	if !q.dtype.IsFloat() || !k.dtype.IsFloat() || !v.dtype.IsFloat() {
		panic(errorf("causal_attention", "q %s, k %s and v %s must be float tensors", q.describe(), k.describe(), v.describe()))
	}
	o.check("causal_attention")
	if seg != nil {
		seg.check("causal_attention", q.shape[0], q.shape[2])
	}
	starts := attentionStarts(seg, q.shape[0], q.shape[2], o.Window)
	kern := device.AttentionOf(dev)
	if kern == nil {
		return s.composedAttention(q, k, v, starts, o)
	}
	target := promote(promote(q.dtype, k.dtype), v.dtype)
	if s.autocast != device.Invalid && target != F64 {
		target = s.autocast
	}
	cq, ck, cv := s.castTo(q, target), s.castTo(k, target), s.castTo(v, target)
	defer func() {
		for _, c := range [][2]*Tensor{{cq, q}, {ck, k}, {cv, v}} {
			if c[0] != c[1] {
				s.release(c[0])
			}
		}
	}()
	// The kernels read rows of D contiguous elements at any row stride.
	pq, pk, pv := cq.rowsDense(s), ck.rowsDense(s), cv.rowsDense(s)
	defer pq.Release()
	defer pk.Release()
	defer pv.Release()
	a := device.Attention{Scale: o.Scale, Dropout: o.Dropout, Seed: o.Seed, Starts: starts, Softcap: o.Softcap, Tiled: device.AttentionTiled(dev, target, q.shape[3])}
	var out *Tensor
	if k.shape[1] == q.shape[1] {
		out = mustAllocLike(dev, target, pv, s.cat)
	} else {
		out = groupedOutput(dev, target, pv, q.shape[1], s.cat)
	}
	lse := mustAlloc(dev, accumDType(target), append([]int(nil), q.shape[:3]...), s.cat)
	kern.CausalAttention(out.view(), lse.view(), pq.view(), pk.view(), pv.view(), a)
	s.record(out, "causal_attention", []*Tensor{cq, ck, cv}, []*Tensor{pq, pk, pv, out, lse}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sq, sk, sv, so, sl := saved[0], saved[1], saved[2], saved[3], saved[4]
		dev := g.st.dev
		gc := g.rowsDense(s)
		defer gc.Release()
		dq := mustAllocLike(dev, target, sq, s.cat)
		dk := mustAllocLike(dev, target, sk, s.cat) // KV heads: the groups' sums
		dv := mustAllocLike(dev, target, sv, s.cat)
		device.AttentionOf(dev).CausalAttentionBackward(dq.view(), dk.view(), dv.view(), gc.view(), so.view(), sl.view(), sq.view(), sk.view(), sv.view(), a)
		return []*Tensor{dq, dk, dv}
	})
	lse.Release()
	return s.own(out)
}

// CausalSelfAttention is CausalAttention of the heads of one fused
// projection: qkv [B, T, 3·H·D] holds each position's q, k and v side by
// side, each H heads of D, as a [D, 3·H·D] projection writes them. The
// result is CausalAttention's, [B, H, T, D] laid out as [B, T, H, D].
//
// With fused attention kernels the op reads the heads in place and its
// backward writes dq, dk and dv straight into one [B, T, 3·H·D]
// gradient, which the projection's backward takes as it is. Viewing the
// heads with Reshape, Narrow and Permute instead gives the same values,
// but backward then assembles that gradient from three pieces (a zeroed
// buffer, a copy and two additions: 2% of the GPT reference's f32 step).
// Without the kernels it is exactly that composition.
func (s *Scope) CausalSelfAttention(qkv *Tensor, heads int, scale, dropout float64, seed uint64) *Tensor {
	return s.SegmentedSelfAttention(qkv, heads, nil, scale, dropout, seed)
}

// SegmentedSelfAttention is CausalSelfAttention of rows that pack several
// examples end to end (seg, of qkv's B and T), each query attending its
// own example only, as SegmentedAttention. A nil seg is
// CausalSelfAttention. It is SelfAttention with Scale, Dropout and Seed
// alone.
func (s *Scope) SegmentedSelfAttention(qkv *Tensor, heads int, seg *Segments, scale, dropout float64, seed uint64) *Tensor {
	return s.SelfAttention(qkv, heads, seg, AttentionOptions{Scale: scale, Dropout: dropout, Seed: seed})
}

// SelfAttention is Attention of the heads of one fused projection, as
// CausalSelfAttention reads them: qkv [B, T, 3·H·D] holds each position's
// q, k and v side by side, each H heads of D, and the result is
// Attention's with the options o, [B, H, T, D] laid out as [B, T, H, D].
// With fused attention kernels it reads the heads in place and its
// backward writes the projection's gradient whole; without them it is
// Attention of views of the heads.
func (s *Scope) SelfAttention(qkv *Tensor, heads int, seg *Segments, o AttentionOptions) *Tensor {
	const op = "causal_self_attention"
	dev := sameDevice(op, qkv)
	if qkv.Dim() != 3 || heads <= 0 || qkv.shape[2]%(3*heads) != 0 {
		panic(errorf(op, "qkv %s must be [B, T, 3·H·D] with %d heads", qkv.describe(), heads))
	}
	if !qkv.dtype.IsFloat() {
		panic(errorf(op, "qkv %s must be a float tensor", qkv.describe()))
	}
	o.check(op)
	b, t, d := qkv.shape[0], qkv.shape[1], qkv.shape[2]/3
	if seg != nil {
		seg.check(op, b, t)
	}
	kern := device.AttentionOf(dev)
	if kern == nil || !qkv.IsContiguous() {
		return s.splitAttention(qkv, heads, seg, o)
	}
	target := qkv.dtype
	if s.autocast != device.Invalid && target != F64 {
		target = s.autocast
	}
	c := s.castTo(qkv, target)
	defer func() {
		if c != qkv {
			s.release(c)
		}
	}()
	// view returns q (i = 0), k or v of x, a [B, T, 3·H·D] tensor, as a
	// [B, H, T, D] view.
	view := func(x *Tensor, i int) *Tensor {
		dh := d / heads
		v := x.share()
		v.shape = []int{b, heads, t, dh}
		v.strides = []int{t * 3 * d, dh, 3 * d, 1}
		v.offset = x.offset + i*d
		return v
	}
	q, k, v := view(c, 0), view(c, 1), view(c, 2)
	defer q.Release()
	defer k.Release()
	defer v.Release()
	a := device.Attention{Scale: o.Scale, Dropout: o.Dropout, Seed: o.Seed, Starts: attentionStarts(seg, b, t, o.Window), Softcap: o.Softcap, Tiled: device.AttentionTiled(dev, target, d/heads)}
	out := mustAllocLike(dev, target, v, s.cat)
	lse := mustAlloc(dev, accumDType(target), []int{b, heads, t}, s.cat)
	kern.CausalAttention(out.view(), lse.view(), q.view(), k.view(), v.view(), a)
	s.record(out, op, []*Tensor{c}, []*Tensor{c, out, lse}, func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor {
		sc, so, sl := saved[0], saved[1], saved[2]
		dev := g.st.dev
		gc := g.rowsDense(s)
		defer gc.Release()
		// The kernel writes every element of dq, dk and dv: no fill.
		dqkv := mustAlloc(dev, target, []int{b, t, 3 * d}, s.cat)
		sq, sk, sv := view(sc, 0), view(sc, 1), view(sc, 2)
		dq, dk, dv := view(dqkv, 0), view(dqkv, 1), view(dqkv, 2)
		device.AttentionOf(dev).CausalAttentionBackward(dq.view(), dk.view(), dv.view(), gc.view(), so.view(), sl.view(), sq.view(), sk.view(), sv.view(), a)
		for _, x := range []*Tensor{sq, sk, sv, dq, dk, dv} {
			x.Release()
		}
		return []*Tensor{dqkv}
	})
	lse.Release()
	return s.own(out)
}

// splitAttention is SelfAttention through views of the heads and
// Attention.
func (s *Scope) splitAttention(qkv *Tensor, heads int, seg *Segments, o AttentionOptions) *Tensor {
	b, t, d := qkv.shape[0], qkv.shape[1], qkv.shape[2]/3
	r5 := s.Reshape(qkv, b, t, 3, heads, d/heads)
	defer s.release(r5)
	var qkvs [3]*Tensor
	for i := range qkvs {
		n := s.Narrow(r5, 2, i, 1)
		n4 := s.Reshape(n, b, t, heads, d/heads)
		s.release(n)
		qkvs[i] = s.Permute(n4, 0, 2, 1, 3)
		s.release(n4)
	}
	y := s.Attention(qkvs[0], qkvs[1], qkvs[2], seg, o)
	for _, x := range qkvs {
		s.release(x)
	}
	return y
}

// groupedOutput allocates attention's output [B, h, T, D] for values v
// [B, KV, T, D] of fewer heads, laid out as v: the heads side by side in
// each token's row ([B, T, h, D] in memory, the result a view of it)
// where v's are (its token stride at least its head stride; with one
// head both layouts give these strides), head by head otherwise.
func groupedOutput(dev device.Device, dt DType, v *Tensor, h int, cat memory.Category) *Tensor {
	b, t, d := v.shape[0], v.shape[2], v.shape[3]
	if v.strides[2] < v.strides[1] {
		return mustAlloc(dev, dt, []int{b, h, t, d}, cat)
	}
	out := mustAlloc(dev, dt, []int{b, t, h, d}, cat)
	out.shape = []int{b, h, t, d}
	out.strides = []int{t * h * d, d, h * d, 1}
	return out
}

// attentionHeads reports whether q is [B, H, T, D] and k and v are
// [B, KV, T, D] with KV dividing H.
func attentionHeads(q, k, v *Tensor) bool {
	if q.Dim() != 4 || k.Dim() != 4 || !slices.Equal(k.shape, v.shape) {
		return false
	}
	h, kv := q.shape[1], k.shape[1]
	return kv > 0 && h%kv == 0 && k.shape[0] == q.shape[0] && k.shape[2] == q.shape[2] && k.shape[3] == q.shape[3]
}

// repeatHeads repeats each of the heads of x [B, KV, T, D] h/KV times
// ([B, h, T, D], head i reading head i/(h/KV)): Expand makes a view and
// Contiguous copies it once, token by token ([B, T, h, D] in memory, the
// result a view of it). The gradient sums the copies back.
func (s *Scope) repeatHeads(x *Tensor, h int) *Tensor {
	b, n, t, d := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	xt := s.Permute(x, 0, 2, 1, 3) // [B, T, KV, D]
	u := s.Reshape(xt, b, t, n, 1, d)
	s.release(xt)
	e := s.Expand(u, b, t, n, h/n, d)
	s.release(u)
	c := s.Contiguous(e)
	s.release(e)
	r := s.Reshape(c, b, t, h, d)
	s.release(c)
	out := s.Permute(r, 0, 2, 1, 3)
	s.release(r)
	return out
}

// composedAttention is Attention from the ops a device without the
// fused kernels has, k and v repeated to q's heads first where they have
// fewer (repeatHeads); its dropout draws the fused kernels' masks
// (Dropout numbers the contiguous probabilities as they do). Under a soft cap the
// scores are computed with zeros above the diagonal, capped (c·tanh(s/c):
// MulScalar, Tanh, MulScalar) and then masked (CausalMask), since the cap
// of −Inf would be −c; without
// one CausalScores fills −Inf itself. With starts (Segments, a window),
// MaskedFill puts −Inf before each query's start, from a [B, 1, T, T]
// mask made on the host; the backward of the fills passes no gradient
// there, as CausalScores' passes none above the diagonal.
func (s *Scope) composedAttention(q, k, v *Tensor, starts []int32, o AttentionOptions) *Tensor {
	if h := q.shape[1]; k.shape[1] != h {
		kr, vr := s.repeatHeads(k, h), s.repeatHeads(v, h)
		defer s.release(kr)
		defer s.release(vr)
		k, v = kr, vr
	}
	var masked *Tensor
	if o.Softcap != 0 {
		raw := s.CausalScores(q, k, o.Scale, 0)
		a := s.MulScalar(raw, 1/o.Softcap)
		s.release(raw)
		th := s.Tanh(a)
		s.release(a)
		capped := s.MulScalar(th, o.Softcap)
		s.release(th)
		masked = s.CausalMask(capped, math.Inf(-1))
		s.release(capped)
	} else {
		masked = s.CausalScores(q, k, o.Scale, math.Inf(-1))
	}
	if starts != nil {
		m := startsMask(s, masked, starts, q.shape[0], q.shape[2])
		filled := s.MaskedFill(masked, m, math.Inf(-1))
		m.Release()
		s.release(masked)
		masked = filled
	}
	probs := s.Softmax(masked)
	s.release(masked)
	if o.Dropout > 0 {
		dropped := s.Dropout(probs, o.Dropout, o.Seed)
		s.release(probs)
		probs = dropped
	}
	y := s.CausalMatMul(probs, v)
	s.release(probs)
	return y
}

// rowsDense returns a handle on t whose last dimension is contiguous: t
// itself (a new handle) when it is, else a packed copy.
func (t *Tensor) rowsDense(s *Scope) *Tensor {
	if t.strides[len(t.strides)-1] == 1 || t.shape[len(t.shape)-1] == 1 {
		return t.share()
	}
	return t.packed(t.dtype, s.cat)
}
