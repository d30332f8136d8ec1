package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// The attention layers cut in two for blocks that run their token-wise
// pieces through a TokenRunner: the projections a piece computes row by
// row (ProjectRows), and the attention between all the rows (AttendRows),
// whose output the output projection takes row by row again. Each is
// exactly the ops Forward runs there, so that a block cut this way
// computes Forward's values.

// ProjectRows computes the rows of the queries [n, Heads·HeadDim] and of
// the keys and values [n, KVHeads·HeadDim] of x [n, Dim], queries and keys
// normed (QKNorm) and rotated at positions (one per row) with the
// frequencies of a pass of seqLen tokens (Rotary.For): the values
// Project and ProjectPositions give, laid out token by token with the
// heads side by side, as a token-wise piece returns them (AttendRows
// reads them so).
func (a *GroupedQueryAttention) ProjectRows(r *Run, x *tensor.Tensor, positions []int32, seqLen int) (q, k, v *tensor.Tensor) {
	defer r.Enter(parentOf(moduleOf(a.O.Weight)))()
	d := a.inWidth()
	if x.Dim() != 2 || x.Shape()[1] != d || len(positions) != x.Shape()[0] {
		panic(&tensor.Error{Op: "gqa", Msg: fmt.Sprintf("rows %v must be [n, %d] with a position each (%d given)", x, d, len(positions))})
	}
	for i, p := range positions {
		if p < 0 || int(p) >= seqLen {
			panic(&tensor.Error{Op: "gqa", Msg: fmt.Sprintf("position %d of %v is %d, want it in [0, %d)", i, x, p, seqLen)})
		}
	}
	n, dh := x.Shape()[0], a.HeadDim()
	var cos, sin *tensor.Tensor // [n, 1, Dim]: queries and keys share them
	defer func() {
		if cos != nil {
			cos.Release()
			sin.Release()
		}
	}()
	rows := func(y *tensor.Tensor, heads int, norm *RMSNorm, rope bool) *tensor.Tensor {
		if norm == nil && (!rope || a.Rotary == nil) {
			return y
		}
		y3 := r.Reshape(y, n, heads, dh)
		y.Release()
		if norm != nil {
			normed := norm.Forward(r, y3)
			y3.Release()
			y3 = normed
		}
		if rope && a.Rotary != nil {
			if cos == nil {
				var cv, sv []float64
				if device.StoresValues(y3.Device()) {
					// A planning device needs the tables' bytes only.
					cv, sv = a.Rotary.For(seqLen).TablesAt(positions)
				}
				shape := []int{n, 1, a.Rotary.Dim}
				cos, sin = table(y3, shape, cv), table(y3, shape, sv)
			}
			rot := a.Rotary.rotate(r, y3, cos, sin)
			y3.Release()
			y3 = rot
		}
		out := r.Reshape(y3, n, heads*dh)
		y3.Release()
		return out
	}
	yq, yk, yv := a.projections(r, x)
	return rows(yq, a.Heads, a.QNorm, true), rows(yk, a.KVHeads, a.KNorm, true), rows(yv, a.KVHeads, nil, false)
}

// AttendRows is Forward between its projections: qkv [B·T, (Heads +
// 2·KVHeads)·HeadDim] holds ProjectRows' queries, keys and values of the
// pass's B·T tokens side by side. It returns the heads' outputs joined,
// [B, T, Heads·HeadDim], which O takes (a piece of rows again).
func (a *GroupedQueryAttention) AttendRows(r *Run, qkv *tensor.Tensor, b, t int) *tensor.Tensor {
	defer r.Enter(parentOf(moduleOf(a.O.Weight)))()
	dh := a.HeadDim()
	if w := (a.Heads + 2*a.KVHeads) * dh; qkv.Dim() != 2 || qkv.Shape()[0] != b*t || qkv.Shape()[1] != w {
		panic(&tensor.Error{Op: "gqa", Msg: fmt.Sprintf("projections %v must be [%d, %d]", qkv, b*t, w)})
	}
	heads := func(at, n int) *tensor.Tensor { // [B, n, T, Dh], a view
		c := r.Narrow(qkv, 1, at, n*dh)
		h := r.Reshape(c, b, t, n, dh)
		c.Release()
		p := r.Permute(h, 0, 2, 1, 3)
		h.Release()
		return p
	}
	q := heads(0, a.Heads)
	k := heads(a.Heads*dh, a.KVHeads)
	v := heads((a.Heads+a.KVHeads)*dh, a.KVHeads)
	// Keys and values keep their KVHeads heads: Attention reads each
	// query head's group in place, and its output, laid out as q (the
	// heads side by side in each token's row), joins without a copy.
	y := r.Attention(q, k, v, r.Segments, a.Options(r))
	q.Release()
	k.Release()
	v.Release()
	yt := r.Permute(y, 0, 2, 1, 3)
	y.Release()
	joined := r.Reshape(yt, b, t, a.Heads*dh)
	yt.Release()
	return joined
}

// AttendRows is Forward between its projections: qkv [B, T, 3·Dim] is
// QKV's output. It returns the heads' outputs joined, [B, T, Dim], which
// Proj takes (a piece of rows again). The output dropout is Proj's
// piece's, which a tiled block refuses (RandomInside).
func (a *CausalSelfAttention) AttendRows(r *Run, qkv *tensor.Tensor) *tensor.Tensor {
	d := a.Proj.Weight.Shape()[0]
	if qkv.Dim() != 3 || qkv.Shape()[2] != 3*d {
		panic(&tensor.Error{Op: "attention", Msg: fmt.Sprintf("projections %v must be [batch, time, %d]", qkv, 3*d)})
	}
	defer r.Enter(parentOf(moduleOf(a.QKV.Weight)))()
	bsz, t := qkv.Shape()[0], qkv.Shape()[1]
	p := 0.0
	if r.Train && a.Dropout > 0 {
		p = a.Dropout
	}
	y := r.SegmentedSelfAttention(qkv, a.Heads, r.Segments, 1/math.Sqrt(float64(d/a.Heads)), p, r.SeedFor(a.attnSalt))
	yt := r.Permute(y, 0, 2, 1, 3)
	y.Release()
	joined := r.Reshape(yt, bsz, t, d)
	yt.Release()
	return joined
}

// RandomInside returns the path of a layer of ms (or below them) that
// draws random masks while training — a Dropout, or a LoRA adapter, with
// a probability above 0 — or "" when none does. A token-wise piece cannot
// hold one: the masks are numbered by element over the whole tensor.
func RandomInside(ms ...Module) string {
	found := ""
	for _, m := range ms {
		Walk(m, func(x Module) error {
			switch l := x.(type) {
			case *Dropout:
				if l.P > 0 && found == "" {
					found = "a dropout layer"
				}
			case *Linear:
				if a := l.Adapter; a != nil && !a.merged && a.Dropout > 0 && found == "" {
					found = moduleOf(l.Weight) + "'s LoRA adapter"
				}
			}
			return nil
		})
	}
	return found
}
