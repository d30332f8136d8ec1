package models

import (
	"fmt"

	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Blocks cut into token-wise pieces (nn.TokenTiled): everything a block
// computes row by row runs through a token runner (package tile's splits
// it into tiles of the sequence), and only attention sees every row. Each
// piece is the ops the block's ordinary Forward runs there, so a block
// computes the same values through a runner as without one.
//
//	Decoder: x ─ attn_norm, q/k/v, head norms, rotary ─ attention ─ o, post_attn_norm, +x,
//	         mlp_norm, gated MLP, post_mlp_norm, +h; after the blocks, final_norm
//	GPT:    x ─ ln1 ─ qkv ─ attention ─ proj, +x ─ ln2 ─ fc, GELU, proj, +h
//
// GPT's LayerNorms run whole: their fused kernel keeps nothing but its
// [T, Dim] output and a 16-bit copy of its input (O(T·width), like
// attention's buffers), and their parameters' gradients are sums the
// kernel does not continue from tile to tile.

var (
	_ nn.TokenTiled = (*Decoder)(nil)
	_ nn.TokenTiled = (*GPT)(nil)
)

// SetTokenRunner makes the blocks run their token-wise pieces, and the
// final norm, through t (nil: as whole tensors).
func (l *Decoder) SetTokenRunner(t nn.TokenRunner) error {
	for _, m := range l.blocks {
		m.(*DecoderBlock).tokens = t
	}
	l.tokens = t
	return nil
}

// finalNorm is the final RMSNorm of the blocks' output x [B, T, Dim],
// through the token runner when there is one: its F32 intermediates then
// exist a tile at a time rather than for every token at once, where,
// with the blocks tiled, they would be the step's largest buffers.
func (l *Decoder) finalNorm(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	if l.tokens == nil {
		return l.FinalNorm.Forward(r, x)
	}
	b, t, d := x.Shape()[0], x.Shape()[1], x.Shape()[2]
	norm := func(r *nn.Run, _ nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{l.FinalNorm.Forward(r, in[0])}
	}
	n := l.tokens.RunTokens(r, nn.Tokens{Fn: norm, In: []*tensor.Tensor{x}, Params: l.FinalNorm.Parameters(), Out: []int{d}})
	y := r.Reshape(n, b, t, d)
	n.Release()
	return y
}

// SetTokenRunner makes the blocks run their token-wise pieces through t
// (nil: as whole tensors). It refuses one with Dropout: the residual
// branches' masks are numbered over the whole sequence.
func (g *GPT) SetTokenRunner(t nn.TokenRunner) error {
	if t != nil && g.Config.Dropout > 0 {
		return fmt.Errorf("models: gpt: token-wise pieces need Dropout 0 (it is %v): the residual branches' dropout masks are numbered by element over the whole sequence, which a tile of it does not know", g.Config.Dropout)
	}
	for _, m := range g.blocks {
		m.(*GPTBlock).tokens = t
	}
	return nil
}

// checkNoMasks panics with a *tensor.Error when a training pass would draw
// random masks inside a token-wise piece (a LoRA adapter's dropout).
func checkNoMasks(r *nn.Run, block string, ms ...nn.Module) {
	if !r.Train {
		return
	}
	if l := nn.RandomInside(ms...); l != "" {
		panic(&tensor.Error{Op: "tokens", Msg: fmt.Sprintf("%s: %s draws dropout masks inside a token-wise piece, whose masks would differ from the whole sequence's: set its dropout to 0 to run the block through a token runner", block, l)})
	}
}

// forwardTokens is Forward through the token runner, x a leaf of its own
// when recording (nn.TokenRunner.RunBlock).
func (k *DecoderBlock) forwardTokens(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(k.path())()
	checkNoMasks(r, k.path(), k.Children()...)
	if x.Dim() != 3 {
		panic(shapeError("decoder", "block input %v must be [batch, time, dim]", x))
	}
	b, t, d := x.Shape()[0], x.Shape()[1], x.Shape()[2]
	a := k.Attn
	dh := a.HeadDim()
	seg := r.Segments
	// The rotary frequencies are the whole pass's (longrope's depend on
	// its length), whatever rows a piece holds.
	seqLen := t
	if seg != nil {
		seqLen = seg.MaxPosition() + 1
	}
	in := func(r *nn.Run, rows nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		pos := make([]int32, rows.Len)
		for i := range pos {
			if seg != nil {
				pos[i] = seg.Positions()[rows.Start+i]
			} else {
				pos[i] = int32((rows.Start + i) % t)
			}
		}
		n := k.AttnNorm.Forward(r, in[0])
		q, kk, v := a.ProjectRows(r, n, pos, seqLen)
		n.Release()
		return []*tensor.Tensor{q, kk, v}
	}
	qkv := k.tokens.RunTokens(r, nn.Tokens{Fn: in, In: []*tensor.Tensor{x},
		Params: append(k.AttnNorm.Parameters(), a.ProjectionParameters()...), Out: []int{a.Heads * dh, a.KVHeads * dh, a.KVHeads * dh}})
	joined := a.AttendRows(r, qkv, b, t)
	qkv.Release()
	out := func(r *nn.Run, _ nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		y := a.O.Forward(r, in[0])
		return []*tensor.Tensor{k.mlp(r, y, in[1])}
	}
	rest := []nn.Module{a.O}
	for _, m := range k.Children() {
		if m != k.AttnNorm && m != nn.Module(a) {
			rest = append(rest, m)
		}
	}
	o := k.tokens.RunTokens(r, nn.Tokens{Fn: out, In: []*tensor.Tensor{joined, x},
		Params: parametersOf(rest...), Out: []int{d}})
	joined.Release()
	res := r.Reshape(o, b, t, d)
	o.Release()
	return res
}

// forwardTokens is Forward through the token runner (GPT's).
func (k *GPTBlock) forwardTokens(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(k.path())()
	checkNoMasks(r, k.path(), k.Attn, k.mlpIn, k.mlpOut)
	if r.Train && k.Attn.Dropout > 0 {
		panic(&tensor.Error{Op: "tokens", Msg: fmt.Sprintf("%s: the attention's output dropout (%v) would draw its masks inside a token-wise piece", k.path(), k.Attn.Dropout)})
	}
	if x.Dim() != 3 {
		panic(shapeError("gpt", "block input %v must be [batch, time, dim]", x))
	}
	b, t, d := x.Shape()[0], x.Shape()[1], x.Shape()[2]
	a := k.LN1.Forward(r, x)
	qkvRows := func(r *nn.Run, _ nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{k.Attn.QKV.Forward(r, in[0])}
	}
	qkv := k.tokens.RunTokens(r, nn.Tokens{Fn: qkvRows, In: []*tensor.Tensor{a}, Params: k.Attn.QKV.Parameters(), Out: []int{3 * d}})
	a.Release()
	q3 := r.Reshape(qkv, b, t, 3*d)
	qkv.Release()
	joined := k.Attn.AttendRows(r, q3)
	q3.Release()
	projRows := func(r *nn.Run, _ nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		y := k.Attn.Proj.Forward(r, in[0])
		h := nn.Residual(r, y, in[1])
		y.Release()
		return []*tensor.Tensor{h}
	}
	h2 := k.tokens.RunTokens(r, nn.Tokens{Fn: projRows, In: []*tensor.Tensor{joined, x}, Params: k.Attn.Proj.Parameters(), Out: []int{d}})
	joined.Release()
	h := r.Reshape(h2, b, t, d)
	h2.Release()
	m := k.LN2.Forward(r, h)
	mlpRows := func(r *nn.Run, _ nn.Rows, in []*tensor.Tensor) []*tensor.Tensor {
		f := k.mlpIn.Forward(r, in[0])
		z := k.mlpOut.Forward(r, f) // projection (no dropout: refused above)
		f.Release()
		out := nn.Residual(r, z, in[1])
		z.Release()
		return []*tensor.Tensor{out}
	}
	o := k.tokens.RunTokens(r, nn.Tokens{Fn: mlpRows, In: []*tensor.Tensor{m, h}, Params: parametersOf(k.FC, k.Proj), Out: []int{d}})
	m.Release()
	h.Release()
	res := r.Reshape(o, b, t, d)
	o.Release()
	return res
}
