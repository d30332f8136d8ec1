package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/tensor"
)

// GQAConfig configures a GroupedQueryAttention layer.
type GQAConfig struct {
	Dim, Heads int
	// KVHeads is the number of key and value heads (0: Heads); it must
	// divide Heads. Each serves Heads/KVHeads query heads.
	KVHeads int
	// Rotary positions queries and keys (its HeadDim must be Dim/Heads).
	Rotary RotaryConfig
	// Dropout is applied, while training, to the attention probabilities
	// (Hugging Face's attention_dropout).
	Dropout float64
	// Weight initialises q, k and v (default Normal(0, 0.02)), Out the
	// output projection (default Weight).
	Weight, Out Init
}

// GroupedQueryAttention is Llama's causal self-attention: separate q, k,
// v and o projections without biases, rotary position embeddings on
// queries and keys, and KVHeads ≤ Heads key/value heads, each shared by
// Heads/KVHeads query heads (grouped-query attention; multi-head when
// equal, multi-query when 1). Parameters: <path>.q.weight [Dim, Dim],
// <path>.k.weight and <path>.v.weight [KVHeads·Dim/Heads, Dim],
// <path>.o.weight [Dim, Dim].
type GroupedQueryAttention struct {
	Q, K, V, O     *Linear
	Heads, KVHeads int
	Rotary         *Rotary
	Dropout        float64
	attnSalt       uint64
}

// NewGroupedQueryAttention makes the layer under path.
func NewGroupedQueryAttention(b *Builder, path string, c GQAConfig) (*GroupedQueryAttention, error) {
	if err := positive("gqa", path, "Dim", c.Dim); err != nil {
		return nil, err
	}
	if err := positive("gqa", path, "Heads", c.Heads); err != nil {
		return nil, err
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	switch {
	case c.Dim%c.Heads != 0:
		return nil, configError("gqa", path, "Heads", "is %d, which does not divide Dim %d", c.Heads, c.Dim)
	case c.KVHeads < 0 || c.Heads%c.KVHeads != 0:
		return nil, configError("gqa", path, "KVHeads", "is %d, which does not divide Heads %d", c.KVHeads, c.Heads)
	case c.Rotary.HeadDim != c.Dim/c.Heads:
		return nil, configError("gqa", path, "Rotary.HeadDim", "is %d, want Dim/Heads = %d", c.Rotary.HeadDim, c.Dim/c.Heads)
	case c.Dropout < 0 || c.Dropout >= 1:
		return nil, configError("gqa", path, "Dropout", "is %v, want 0 <= Dropout < 1", c.Dropout)
	}
	rope, err := NewRotary(c.Rotary)
	if err != nil {
		return nil, fmt.Errorf("nn: gqa %q: %w", path, err)
	}
	w := c.Weight.Or(Normal(0, 0.02))
	kv := c.KVHeads * (c.Dim / c.Heads)
	a := &GroupedQueryAttention{Heads: c.Heads, KVHeads: c.KVHeads, Rotary: rope, Dropout: c.Dropout, attnSalt: Salt(Join(path, "attn_dropout"))}
	for _, l := range []struct {
		dst     **Linear
		name    string
		in, out int
		init    Init
	}{{&a.Q, "q", c.Dim, c.Dim, w}, {&a.K, "k", c.Dim, kv, w}, {&a.V, "v", c.Dim, kv, w}, {&a.O, "o", c.Dim, c.Dim, c.Out.Or(w)}} {
		if *l.dst, err = NewLinear(b, Join(path, l.name), LinearConfig{In: l.in, Out: l.out, NoBias: true, Weight: l.init}); err != nil {
			release(a.made()...)
			return nil, err
		}
	}
	return a, nil
}

// made lists the projections built so far.
func (a *GroupedQueryAttention) made() []Module {
	var ms []Module
	for _, l := range []*Linear{a.Q, a.K, a.V, a.O} {
		if l != nil {
			ms = append(ms, l)
		}
	}
	return ms
}

// HeadDim is the size of one head.
func (a *GroupedQueryAttention) HeadDim() int { return a.Rotary.HeadDim }

// Project computes the queries [B, Heads, T, HeadDim] and the keys and
// values [B, KVHeads, T, HeadDim] of x [B, T, Dim] at positions
// pos..pos+T-1, queries and keys rotated. A KV cache stores k and v as
// they are (KVHeads of them: the saving of grouped-query attention).
func (a *GroupedQueryAttention) Project(r *Run, x *tensor.Tensor, pos int) (q, k, v *tensor.Tensor) {
	return a.project(r, x, pos, nil)
}

// ProjectPositions is Project for tokens at the given positions (B·T of
// them, row by row: a packed batch's, tensor.Segments.Positions) instead
// of pos..pos+T-1 in every row. Queries and keys share one cos and one
// sin table of [B, 1, T, HeadDim].
func (a *GroupedQueryAttention) ProjectPositions(r *Run, x *tensor.Tensor, positions []int32) (q, k, v *tensor.Tensor) {
	return a.project(r, x, 0, positions)
}

// project is Project at positions when they are given, else at
// pos..pos+T-1.
func (a *GroupedQueryAttention) project(r *Run, x *tensor.Tensor, pos int, positions []int32) (q, k, v *tensor.Tensor) {
	d := a.Q.Weight.Shape()[1]
	if x.Dim() != 3 || x.Shape()[2] != d {
		panic(&tensor.Error{Op: "gqa", Msg: fmt.Sprintf("input %v must be [batch, time, %d]", x, d)})
	}
	bsz, t, dh := x.Shape()[0], x.Shape()[1], a.HeadDim()
	var cos, sin *tensor.Tensor // ProjectPositions' tables, made for q and kept for k
	defer func() {
		if cos != nil {
			cos.Release()
			sin.Release()
		}
	}()
	heads := func(l *Linear, n int, rope bool) *tensor.Tensor {
		y := l.Forward(r, x)
		y4 := r.Reshape(y, bsz, t, n, dh)
		y.Release()
		p := r.Permute(y4, 0, 2, 1, 3) // [B, n, T, Dh], a view
		y4.Release()
		if !rope {
			return p
		}
		var out *tensor.Tensor
		if positions == nil {
			out = a.Rotary.Apply(r, p, pos)
		} else {
			if cos == nil {
				cos, sin = a.Rotary.positionTables(p, positions)
			}
			out = a.Rotary.rotate(r, p, cos, sin)
		}
		p.Release()
		return out
	}
	return heads(a.Q, a.Heads, true), heads(a.K, a.KVHeads, true), heads(a.V, a.KVHeads, false)
}

// RepeatKV repeats each of the KVHeads heads of kv [B, KVHeads, T, Dh]
// Heads/KVHeads times, as Hugging Face's repeat_kv ([B, Heads, T, Dh],
// head h reading kv head h/(Heads/KVHeads)). With KVHeads == Heads it is
// a new handle on kv. Expand makes a view and Contiguous copies it once,
// token by token ([B, T, Heads, Dh] in memory, the result a view of it):
// attention's output is laid out as its values, so the heads' outputs
// then join into [B, T, Dim] without a copy, and a block keeps one
// tensor of them, not two. The gradient sums the copies back.
func (a *GroupedQueryAttention) RepeatKV(r *Run, kv *tensor.Tensor) *tensor.Tensor {
	if a.KVHeads == a.Heads {
		return identity(r, kv)
	}
	s := kv.Shape()
	b, n, t, dh := s[0], s[1], s[2], s[3]
	kt := r.Permute(kv, 0, 2, 1, 3) // [B, T, KVHeads, Dh]
	u := r.Reshape(kt, b, t, n, 1, dh)
	kt.Release()
	e := r.Expand(u, b, t, n, a.Heads/n, dh)
	u.Release()
	// A copy, not a view with a zero stride over the repeats, which the
	// attention kernels do not take.
	c := r.Contiguous(e)
	e.Release()
	h := r.Reshape(c, b, t, a.Heads, dh)
	c.Release()
	out := r.Permute(h, 0, 2, 1, 3)
	h.Release()
	return out
}

// Output joins y [B, Heads, T, Dh] into [B, T, Dim] and projects it.
func (a *GroupedQueryAttention) Output(r *Run, y *tensor.Tensor) *tensor.Tensor {
	s := y.Shape()
	yt := r.Permute(y, 0, 2, 1, 3)
	joined := r.Reshape(yt, s[0], s[2], s[1]*s[3])
	yt.Release()
	out := a.O.Forward(r, joined)
	joined.Release()
	return out
}

// Forward maps x [B, T, Dim] to [B, T, Dim]:
//
//	q, k, v = rope(x·Wqᵀ), rope(x·Wkᵀ), x·Wvᵀ as heads
//	y = softmax(causal(q·repeat(k)ᵀ/√Dh))·repeat(v), heads joined
//	out = y·Woᵀ
//
// through tensor's CausalAttention (fused where the device has it). With
// r.Segments (a packed batch) queries and keys are rotated at the
// segments' positions and each query attends its own example only
// (tensor's SegmentedAttention).
func (a *GroupedQueryAttention) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(parentOf(moduleOf(a.Q.Weight)))()
	var q, k, v *tensor.Tensor
	if r.Segments != nil {
		q, k, v = a.ProjectPositions(r, x, r.Segments.Positions())
	} else {
		q, k, v = a.Project(r, x, 0)
	}
	kr, vr := a.RepeatKV(r, k), a.RepeatKV(r, v)
	k.Release()
	v.Release()
	p := 0.0
	if r.Train && a.Dropout > 0 {
		p = a.Dropout
	}
	y := r.SegmentedAttention(q, kr, vr, r.Segments, 1/math.Sqrt(float64(a.HeadDim())), p, r.SeedFor(a.attnSalt))
	q.Release()
	kr.Release()
	vr.Release()
	out := a.Output(r, y)
	y.Release()
	return out
}

// Parameters are q, k, v and o's weights.
func (a *GroupedQueryAttention) Parameters() []*tensor.Tensor {
	return parametersOfLinear(a.Q, a.K, a.V, a.O)
}

func parametersOfLinear(ls ...*Linear) []*tensor.Tensor {
	var ps []*tensor.Tensor
	for _, l := range ls {
		ps = append(ps, l.Parameters()...)
	}
	return ps
}

func (a *GroupedQueryAttention) freshOutput() {}
