package nn

import "github.com/memfit/memfit/tensor"

// Rows says which rows of a pass a token-wise function computes: the
// first one's index among the pass's B·T rows (row-major over batch and
// time, as [B, T, ·] tensors hold them) and how many.
type Rows struct{ Start, Len int }

// TokenFunc computes a token-wise piece of a block: the rows of its
// outputs from the same rows of its inputs only (norms, projections,
// rotary embeddings, MLPs, residual sums; never attention between
// tokens), so that it may run over the rows in tiles. Its inputs are
// [rows.Len, width] views, and it returns one or more [rows.Len, width]
// outputs of one dtype, releasing everything else it makes. A row's
// values must not depend on the rows computed with it, and it draws no
// random numbers (dropout masks are numbered by element over the whole
// tensor, which a tile does not know).
type TokenFunc func(r *Run, rows Rows, in []*tensor.Tensor) []*tensor.Tensor

// Tokens is one token-wise piece of a block and what it runs on.
type Tokens struct {
	Fn TokenFunc
	// In are the piece's inputs, [..., width] with the same leading
	// dimensions (the pass's rows), each seen by Fn as [rows, width].
	In []*tensor.Tensor
	// Params are the parameters Fn uses.
	Params []*tensor.Tensor
	// Out are the widths of Fn's outputs, in order.
	Out []int
}

// TokenRunner runs the token-wise pieces of blocks. Package tile's runs
// them over tiles of rows, forward and in backward (recomputing each
// tile), so that what a piece makes inside, a SwiGLU's [rows, hidden]
// intermediates say, never exists for every row at once.
type TokenRunner interface {
	// RunTokens returns the piece's outputs side by side, [rows, Σ Out]:
	// row i is Fn's outputs for row i of the inputs.
	RunTokens(r *Run, p Tokens) *tensor.Tensor
	// RunBlock runs fn, the forward of a block made of pieces (and of
	// attention between them), on x, the block's input [..., width].
	// Pieces that share x then give it its gradient in the order one
	// pass over every row would: for that the runner may have fn see x as
	// a leaf of its own.
	RunBlock(r *Run, x *tensor.Tensor, fn func(r *Run, x *tensor.Tensor) *tensor.Tensor) *tensor.Tensor
}

// TokenTiled is a model whose blocks can run their token-wise pieces
// through a TokenRunner (nil: as whole tensors, the ordinary forward). It
// refuses a runner where its blocks cannot give the same results with one
// (dropout inside a piece, say).
type TokenTiled interface {
	SetTokenRunner(TokenRunner) error
}
