package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/tensor"
)

// GQAConfig configures a GroupedQueryAttention layer. The zero values of
// the optional fields are Llama's attention.
type GQAConfig struct {
	Dim, Heads int
	// KVHeads is the number of key and value heads (0: Heads); it must
	// divide Heads. Each serves Heads/KVHeads query heads.
	KVHeads int
	// HeadDim is the size of one head (0: Dim/Heads). Qwen 3, Gemma and
	// Mistral Nemo choose it independently of the width, so the
	// projections are [Heads·HeadDim, Dim] and o [Dim, Heads·HeadDim].
	HeadDim int
	// Rotary positions queries and keys (its HeadDim must be the
	// heads'), unless NoRotary (SmolLM 3's layers without positions).
	Rotary   RotaryConfig
	NoRotary bool
	// Bias adds biases to q, k and v (Qwen 2); o has none.
	Bias bool
	// Fused makes q, k and v one projection, <path>.qkv of
	// [(Heads + 2·KVHeads)·HeadDim, Dim], its output rows the queries,
	// then the keys, then the values (Phi-3's qkv_proj).
	Fused bool
	// QKNorm, when set, normalizes each query and key head (over
	// HeadDim) before the rotary embeddings, with gains <path>.q_norm and
	// <path>.k_norm (Qwen 3, Gemma 3); its Dim is HeadDim.
	QKNorm *RMSNormConfig
	// Scale multiplies the scores (0: 1/√HeadDim; Gemma:
	// query_pre_attn_scalar^-½).
	Scale float64
	// Softcap caps the scores softly, c·tanh(s/c) (Gemma 2's
	// attn_logit_softcapping; 0: none), and Window confines each query to
	// the Window keys up to its own (a sliding window; 0: none).
	Softcap float64
	Window  int
	// Dropout is applied, while training, to the attention probabilities
	// (Hugging Face's attention_dropout).
	Dropout float64
	// Weight initialises q, k and v (default Normal(0, 0.02)), Out the
	// output projection (default Weight).
	Weight, Out Init
}

// GroupedQueryAttention is the causal self-attention of Llama and the
// decoders built like it: q, k, v and o projections, rotary position
// embeddings on queries and keys, and KVHeads ≤ Heads key/value heads,
// each shared by Heads/KVHeads query heads (grouped-query attention;
// multi-head when equal, multi-query when 1); optionally q, k and v in
// one fused projection, biases on them, a norm of each query and key
// head, another score scale, soft-capped scores and a sliding window
// (GQAConfig). Parameters: <path>.q.weight [Heads·HeadDim, Dim],
// <path>.k.weight and <path>.v.weight [KVHeads·HeadDim, Dim] (or
// <path>.qkv.weight of all three), their biases with Bias,
// <path>.o.weight [Dim, Heads·HeadDim], <path>.q_norm.weight and
// <path>.k_norm.weight [HeadDim] with QKNorm.
type GroupedQueryAttention struct {
	Q, K, V, O     *Linear // Q, K and V nil when fused
	QKV            *Linear // the fused projection, or nil
	QNorm, KNorm   *RMSNorm
	Heads, KVHeads int
	Rotary         *Rotary // nil: no position embeddings
	Scale          float64
	Softcap        float64
	Window         int
	Dropout        float64
	headDim        int
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
	dh := c.HeadDim
	if dh == 0 {
		if c.Dim%c.Heads != 0 {
			return nil, configError("gqa", path, "Heads", "is %d, which does not divide Dim %d (set HeadDim)", c.Heads, c.Dim)
		}
		dh = c.Dim / c.Heads
	}
	switch {
	case dh < 0:
		return nil, configError("gqa", path, "HeadDim", "is %d, want > 0 (or 0 for Dim/Heads)", c.HeadDim)
	case c.KVHeads < 0 || c.Heads%c.KVHeads != 0:
		return nil, configError("gqa", path, "KVHeads", "is %d, which does not divide Heads %d", c.KVHeads, c.Heads)
	case !c.NoRotary && c.Rotary.HeadDim != dh:
		return nil, configError("gqa", path, "Rotary.HeadDim", "is %d, want the heads' %d", c.Rotary.HeadDim, dh)
	case c.Dropout < 0 || c.Dropout >= 1:
		return nil, configError("gqa", path, "Dropout", "is %v, want 0 <= Dropout < 1", c.Dropout)
	case c.Scale < 0 || math.IsInf(c.Scale, 0) || math.IsNaN(c.Scale):
		return nil, configError("gqa", path, "Scale", "is %v, want a finite number above 0 (or 0 for 1/√HeadDim)", c.Scale)
	case c.Softcap < 0 || math.IsInf(c.Softcap, 0) || math.IsNaN(c.Softcap):
		return nil, configError("gqa", path, "Softcap", "is %v, want a finite number above 0 (or 0 for none)", c.Softcap)
	case c.Window < 0:
		return nil, configError("gqa", path, "Window", "is %d, want >= 0 (0: no sliding window)", c.Window)
	}
	a := &GroupedQueryAttention{Heads: c.Heads, KVHeads: c.KVHeads, Scale: c.Scale, Softcap: c.Softcap, Window: c.Window,
		Dropout: c.Dropout, headDim: dh, attnSalt: Salt(Join(path, "attn_dropout"))}
	if a.Scale == 0 {
		a.Scale = 1 / math.Sqrt(float64(dh))
	}
	if !c.NoRotary {
		rope, err := NewRotary(c.Rotary)
		if err != nil {
			return nil, fmt.Errorf("nn: gqa %q: %w", path, err)
		}
		a.Rotary = rope
	}
	w := c.Weight.Or(Normal(0, 0.02))
	q, kv := c.Heads*dh, c.KVHeads*dh
	type proj struct {
		dst     **Linear
		name    string
		in, out int
		bias    bool
		init    Init
	}
	projs := []proj{{&a.Q, "q", c.Dim, q, c.Bias, w}, {&a.K, "k", c.Dim, kv, c.Bias, w}, {&a.V, "v", c.Dim, kv, c.Bias, w}}
	if c.Fused {
		projs = []proj{{&a.QKV, "qkv", c.Dim, q + 2*kv, c.Bias, w}}
	}
	projs = append(projs, proj{&a.O, "o", q, c.Dim, false, c.Out.Or(w)})
	for _, l := range projs {
		var err error
		if *l.dst, err = NewLinear(b, Join(path, l.name), LinearConfig{In: l.in, Out: l.out, NoBias: !l.bias, Weight: l.init}); err != nil {
			release(a.made()...)
			return nil, err
		}
	}
	if n := c.QKNorm; n != nil {
		nc := *n
		nc.Dim = dh
		var err error
		if a.QNorm, err = NewRMSNormWith(b, Join(path, "q_norm"), nc); err != nil {
			release(a.made()...)
			return nil, err
		}
		if a.KNorm, err = NewRMSNormWith(b, Join(path, "k_norm"), nc); err != nil {
			release(a.made()...)
			return nil, err
		}
	}
	return a, nil
}

// made lists the layers built so far.
func (a *GroupedQueryAttention) made() []Module {
	var ms []Module
	for _, l := range []*Linear{a.Q, a.K, a.V, a.QKV, a.O} {
		if l != nil {
			ms = append(ms, l)
		}
	}
	for _, n := range []*RMSNorm{a.QNorm, a.KNorm} {
		if n != nil {
			ms = append(ms, n)
		}
	}
	return ms
}

// HeadDim is the size of one head.
func (a *GroupedQueryAttention) HeadDim() int { return a.headDim }

// Options are the attention op's options for this layer: its scale,
// soft cap and window, and its dropout when r trains.
func (a *GroupedQueryAttention) Options(r *Run) tensor.AttentionOptions {
	o := tensor.AttentionOptions{Scale: a.Scale, Softcap: a.Softcap, Window: a.Window}
	if r.Train && a.Dropout > 0 {
		o.Dropout, o.Seed = a.Dropout, r.SeedFor(a.attnSalt)
	}
	return o
}

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

// inWidth is the width of the layer's input.
func (a *GroupedQueryAttention) inWidth() int { return a.O.Weight.Shape()[0] }

// projections returns x's queries, keys and values, [..., n·HeadDim]
// each: the three projections, or views of the fused one's output.
func (a *GroupedQueryAttention) projections(r *Run, x *tensor.Tensor) (q, k, v *tensor.Tensor) {
	if a.QKV == nil {
		return a.Q.Forward(r, x), a.K.Forward(r, x), a.V.Forward(r, x)
	}
	y := a.QKV.Forward(r, x)
	defer y.Release()
	last, dh := y.Dim()-1, a.headDim
	q = r.Narrow(y, last, 0, a.Heads*dh)
	k = r.Narrow(y, last, a.Heads*dh, a.KVHeads*dh)
	v = r.Narrow(y, last, (a.Heads+a.KVHeads)*dh, a.KVHeads*dh)
	return q, k, v
}

// project is Project at positions when they are given, else at
// pos..pos+T-1.
func (a *GroupedQueryAttention) project(r *Run, x *tensor.Tensor, pos int, positions []int32) (q, k, v *tensor.Tensor) {
	d := a.inWidth()
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
	heads := func(y *tensor.Tensor, n int, norm *RMSNorm, rope bool) *tensor.Tensor {
		y4 := r.Reshape(y, bsz, t, n, dh)
		y.Release()
		if norm != nil {
			normed := norm.Forward(r, y4)
			y4.Release()
			y4 = normed
		}
		p := r.Permute(y4, 0, 2, 1, 3) // [B, n, T, Dh], a view
		y4.Release()
		if !rope || a.Rotary == nil {
			return p
		}
		var out *tensor.Tensor
		if positions == nil {
			out = a.Rotary.Apply(r, p, pos)
		} else {
			if cos == nil {
				cos, sin = a.Rotary.positionTables(p, positions, 0)
			}
			out = a.Rotary.rotate(r, p, cos, sin)
		}
		p.Release()
		return out
	}
	yq, yk, yv := a.projections(r, x)
	return heads(yq, a.Heads, a.QNorm, true), heads(yk, a.KVHeads, a.KNorm, true), heads(yv, a.KVHeads, nil, false)
}

// RepeatKV repeats each of the KVHeads heads of kv [B, KVHeads, T, Dh]
// Heads/KVHeads times, as Hugging Face's repeat_kv ([B, Heads, T, Dh],
// head h reading kv head h/(Heads/KVHeads)). With KVHeads == Heads it is
// a new handle on kv. Expand makes a view and Contiguous copies it once,
// token by token ([B, T, Heads, Dh] in memory, the result a view of it).
// The gradient sums the copies back. The layer's own passes no longer
// need it: tensor's Attention takes keys and values of KVHeads heads
// (Forward, AttendRows, and the KV cache's attention over a prefix, which
// multiplies the grouped heads as [B, KVHeads, group·T, Dh] batches).
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

// Output joins y [B, Heads, T, Dh] into [B, T, Heads·Dh] and projects it.
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
//	q, k, v = rope(norm(x·Wqᵀ + bq)), rope(norm(x·Wkᵀ + bk)), x·Wvᵀ + bv as heads
//	y = softmax(cap(scale·q·repeat(k)ᵀ), causal, window)·repeat(v), heads joined
//	out = y·Woᵀ
//
// through tensor's Attention (fused where the device has it), which takes
// k and v with their KVHeads heads: no repeated copies exist (the fused
// kernels read key head h/(Heads/KVHeads) for query head h and sum the
// gradients of a group's heads themselves). With
// r.Segments (a packed batch) queries and keys are rotated at the
// segments' positions and each query attends its own example only.
func (a *GroupedQueryAttention) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(parentOf(moduleOf(a.O.Weight)))()
	var q, k, v *tensor.Tensor
	if r.Segments != nil {
		q, k, v = a.ProjectPositions(r, x, r.Segments.Positions())
	} else {
		q, k, v = a.Project(r, x, 0)
	}
	y := r.Attention(q, k, v, r.Segments, a.Options(r))
	q.Release()
	k.Release()
	v.Release()
	out := a.Output(r, y)
	y.Release()
	return out
}

// Parameters are the projections' weights (and biases), then the
// norms' gains.
func (a *GroupedQueryAttention) Parameters() []*tensor.Tensor {
	ps := parametersOfLinear(a.Q, a.K, a.V, a.QKV, a.O)
	for _, n := range []*RMSNorm{a.QNorm, a.KNorm} {
		if n != nil {
			ps = append(ps, n.Parameters()...)
		}
	}
	return ps
}

// ProjectionParameters are the parameters Project and ProjectRows use:
// Parameters but o's.
func (a *GroupedQueryAttention) ProjectionParameters() []*tensor.Tensor {
	ps := parametersOfLinear(a.Q, a.K, a.V, a.QKV)
	for _, n := range []*RMSNorm{a.QNorm, a.KNorm} {
		if n != nil {
			ps = append(ps, n.Parameters()...)
		}
	}
	return ps
}

func parametersOfLinear(ls ...*Linear) []*tensor.Tensor {
	var ps []*tensor.Tensor
	for _, l := range ls {
		if l != nil {
			ps = append(ps, l.Parameters()...)
		}
	}
	return ps
}

func (a *GroupedQueryAttention) freshOutput() {}
