package models

import (
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Packed is a model whose batch rows may pack several examples end to end
// (padding-free packing): GPT and Decoder. positions are the tokens'
// positions, B·T of them row by row, restarting at 0 where an example
// begins (a position of 0 begins one, and so does the first token of each
// row); each token attends the tokens of its own example only, and its
// position embedding (GPT's learned one, a Decoder's rotary one) is taken at
// its position. nil positions are Forward and TokenLoss exactly. The loss
// and gradients of a packed batch are those of its examples as rows of
// their own (padded, with the padding's targets ignored), within float
// tolerance.
//
// The costs of packing do not depend on the positions' values: one int32
// per token in each fused attention call's workspace (the start of its
// example), GPT's [B, T] positions and the [B, T, Dim] embedding looked up
// from them, and a Decoder's cos and sin tables of [B, 1, T, HeadDim] per
// block instead of [T, HeadDim] per rotation. A plan traced on the meta
// device with any positions is exact.
type Packed interface {
	// ForwardPacked is Forward of tokens [B, T] at positions.
	ForwardPacked(r *nn.Run, tokens *tensor.Tensor, positions []int32) *tensor.Tensor
	// TokenLossPacked is TokenLoss of tokens [B, T] at positions.
	TokenLossPacked(r *nn.Run, tokens, targets *tensor.Tensor, positions []int32, o tensor.CrossEntropyOptions) *tensor.Tensor
}

var (
	_ Packed = (*GPT)(nil)
	_ Packed = (*Decoder)(nil)
)

// packedRun returns r with the segments of positions for tokens, or r
// itself for nil positions. Positions that do not fit tokens panic with
// *tensor.Error, as a wrong shape of tokens does.
func packedRun(model string, r *nn.Run, tokens *tensor.Tensor, positions []int32) *nn.Run {
	if positions == nil {
		return r
	}
	checkTokens(model, tokens)
	seg, err := tensor.NewSegments(positions, tokens.Shape()[0], tokens.Shape()[1])
	if err != nil {
		panic(shapeError(model, "tokens %v: %v", tokens, err))
	}
	p := r.In(r.Scope)
	p.Segments = seg
	return p
}

// ForwardPacked maps tokens [B, T] at positions (see Packed) to logits
// [B, T, Vocab]. A position at or past Context panics with *tensor.Error
// (the position embedding has Context rows).
func (g *GPT) ForwardPacked(r *nn.Run, tokens *tensor.Tensor, positions []int32) *tensor.Tensor {
	return g.Forward(packedRun("gpt", r, tokens, positions), tokens)
}

// TokenLossPacked is TokenLoss of tokens [B, T] at positions (see Packed).
func (g *GPT) TokenLossPacked(r *nn.Run, tokens, targets *tensor.Tensor, positions []int32, o tensor.CrossEntropyOptions) *tensor.Tensor {
	return g.TokenLoss(packedRun("gpt", r, tokens, positions), tokens, targets, o)
}

// ForwardPacked maps tokens [B, T] at positions (see Packed) to logits
// [B, T, Vocab].
func (l *Decoder) ForwardPacked(r *nn.Run, tokens *tensor.Tensor, positions []int32) *tensor.Tensor {
	return l.Forward(packedRun(l.Config.Arch.name(), r, tokens, positions), tokens)
}

// TokenLossPacked is TokenLoss of tokens [B, T] at positions (see Packed).
func (l *Decoder) TokenLossPacked(r *nn.Run, tokens, targets *tensor.Tensor, positions []int32, o tensor.CrossEntropyOptions) *tensor.Tensor {
	return l.TokenLoss(packedRun(l.Config.Arch.name(), r, tokens, positions), tokens, targets, o)
}
