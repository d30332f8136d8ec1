package models

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// GPTConfig configures a decoder-only transformer.
type GPTConfig struct {
	Layers  int // transformer blocks
	Heads   int // attention heads; must divide Dim
	Dim     int // model width
	Context int // longest sequence (position embeddings)
	Vocab   int // token ids are in [0, Vocab)
	// Dropout is applied while training after the embeddings, to the
	// attention probabilities and to each residual branch (0: none).
	Dropout float64
	Seed    uint64
	// DType of the parameters: F32 (default), F64 for gradient checks, or
	// BF16 for weights stored in 16 bits (train -weights bf16).
	DType tensor.DType
	// HeadChunkRows is how many rows (tokens) TokenLoss puts in one chunk
	// of the head and loss; 0 chooses them from tensor.LMHeadChunkBytes.
	HeadChunkRows int
	// Defer builds the parameters without memory (nn.Builder.Defer), for
	// a sharding that draws them block by block (parallel.NewZeRO3).
	Defer bool
}

// GPT is a decoder-only transformer in the GPT-2 layout: token and
// position embeddings, pre-LayerNorm blocks of causal self-attention and a
// GELU MLP of width 4·Dim, a final LayerNorm, and an output head tied to
// the token embedding (logits = h·Eᵀ).
type GPT struct {
	Config            GPTConfig
	Tokens, Positions *nn.Embedding
	FinalNorm         *nn.LayerNorm
	blocks            []nn.Module
	embedDrop         *nn.Dropout
	runner            nn.BlockRunner
}

var _ nn.Model = (*GPT)(nil)

// GPTBlock is one pre-LN transformer block:
//
//	h   = x + attn(ln1(x))
//	out = h + dropout(proj(gelu(fc(ln2(h)))))
//
// Both residual sums are written into the branch's output when the run
// allows in-place ops (nn.Residual); the block never writes into x.
type GPTBlock struct {
	LN1, LN2 *nn.LayerNorm
	Attn     *nn.CausalSelfAttention
	FC, Proj *nn.Linear
	mlpIn    *nn.Fused      // FC, GELU
	mlpOut   *nn.Fused      // Proj, dropout
	tokens   nn.TokenRunner // runs the token-wise pieces (tokens.go); nil: whole tensors
}

// NewGPT builds a GPT on dev. Weights are N(0, 0.02) (the projections into
// the residual stream N(0, (0.02/√(2·Layers))²)), biases 0, LayerNorms 1
// and 0.
func NewGPT(dev device.Device, c GPTConfig) (*GPT, error) {
	const name = "GPTConfig"
	if err := checkDevice(name, dev); err != nil {
		return nil, err
	}
	if err := checkPositive(name, "Layers", c.Layers, "Heads", c.Heads, "Dim", c.Dim, "Context", c.Context, "Vocab", c.Vocab); err != nil {
		return nil, err
	}
	if c.Dim%c.Heads != 0 {
		return nil, fieldError(name, "Heads", "is %d, which does not divide Dim %d", c.Heads, c.Dim)
	}
	if err := checkDropout(name, c.Dropout); err != nil {
		return nil, err
	}
	if err := checkDType(name, c.DType); err != nil {
		return nil, err
	}
	if c.HeadChunkRows < 0 {
		return nil, fieldError(name, "HeadChunkRows", "is %d; want 0 (automatic) or more", c.HeadChunkRows)
	}
	b := &nn.Builder{Dev: dev, Seed: c.Seed, DType: c.DType, Defer: c.Defer}
	fail := func(err error) (*GPT, error) {
		b.Abort()
		return nil, fmt.Errorf("models: gpt: %w", err)
	}
	w := nn.Normal(0, 0.02)
	resid := nn.GPTResidual(c.Layers)
	g := &GPT{Config: c}
	var err error
	if g.Tokens, err = nn.NewEmbedding(b, "embed.tokens", nn.EmbeddingConfig{Num: c.Vocab, Dim: c.Dim, Init: w}); err != nil {
		return fail(err)
	}
	if g.Positions, err = nn.NewEmbedding(b, "embed.positions", nn.EmbeddingConfig{Num: c.Context, Dim: c.Dim, Init: w}); err != nil {
		return fail(err)
	}
	if g.embedDrop, err = nn.NewDropout("embed.dropout", c.Dropout); err != nil {
		return fail(err)
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blocks.%d", i)
		blk := &GPTBlock{}
		if blk.LN1, err = nn.NewLayerNorm(b, p+".ln1", c.Dim); err != nil {
			return fail(err)
		}
		if blk.Attn, err = nn.NewCausalSelfAttention(b, p+".attn", nn.AttentionConfig{Dim: c.Dim, Heads: c.Heads, Dropout: c.Dropout, QKV: w, Proj: resid}); err != nil {
			return fail(err)
		}
		if blk.LN2, err = nn.NewLayerNorm(b, p+".ln2", c.Dim); err != nil {
			return fail(err)
		}
		if blk.FC, err = nn.NewLinear(b, p+".mlp.fc", nn.LinearConfig{In: c.Dim, Out: 4 * c.Dim, Weight: w}); err != nil {
			return fail(err)
		}
		if blk.Proj, err = nn.NewLinear(b, p+".mlp.proj", nn.LinearConfig{In: 4 * c.Dim, Out: c.Dim, Weight: resid}); err != nil {
			return fail(err)
		}
		blk.mlpIn = &nn.Fused{Layer: blk.FC, Then: []nn.Pointwise{nn.GELU{}}}
		blk.mlpOut = &nn.Fused{Layer: blk.Proj}
		if c.Dropout > 0 {
			drop, err := nn.NewDropout(p+".mlp.dropout", c.Dropout)
			if err != nil {
				return fail(err)
			}
			blk.mlpOut.Then = []nn.Pointwise{drop}
		}
		g.blocks = append(g.blocks, blk)
	}
	if g.FinalNorm, err = nn.NewLayerNorm(b, "final_norm", c.Dim); err != nil {
		return fail(err)
	}
	return g, nil
}

// Forward maps tokens [B, T] (I32 or I64, T <= Context) to logits
// [B, T, Vocab]. Tokens of another shape, or more than Context of them,
// panic with *tensor.Error, and a token outside [0, Vocab) with
// *device.IndexError; tensor.Catch and tensor.Step return both as errors.
func (g *GPT) Forward(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	n := g.hidden(r, tokens)
	logits := r.Linear(n, g.Tokens.Weight, nil) // tied head
	n.Release()
	return logits
}

// TokenLoss is the cross-entropy of the logits Forward would return
// against targets [B, T] (one per token; o as CrossEntropy takes it),
// computed by tensor.LinearCrossEntropy from the final hidden states in
// chunks of rows, so that neither the [B·T, Vocab] logits nor their
// gradient ever exist whole: the largest tensors of training a GPT at a
// realistic vocabulary. The loss and the gradients are Forward's followed
// by CrossEntropy's within float tolerance (see LinearCrossEntropy).
func (g *GPT) TokenLoss(r *nn.Run, tokens, targets *tensor.Tensor, o tensor.CrossEntropyOptions) *tensor.Tensor {
	n := g.hidden(r, tokens)
	defer n.Release()
	return r.LinearCrossEntropy(n, g.Tokens.Weight, nil, targets, o, g.Config.HeadChunkRows) // tied head
}

// hidden maps tokens to the final LayerNorm's output [B, T, Dim].
func (g *GPT) hidden(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	nn.CheckInference(r)
	c := g.Config
	if tokens.Dim() != 2 || tokens.Len() == 0 || (tokens.DType() != tensor.I32 && tokens.DType() != tensor.I64) {
		panic(shapeError("gpt", "tokens %v must be non-empty i32 or i64 [batch, time]", tokens))
	}
	t := tokens.Shape()[1]
	if t > c.Context {
		panic(shapeError("gpt", "%d tokens per sequence exceed the context of %d (GPTConfig.Context)", t, c.Context))
	}
	tok := g.Tokens.Forward(r, tokens) // [B, T, D], a new tensor nobody saved
	pos := g.positions(r, tokens)
	sum := nn.Residual(r, tok, pos)
	tok.Release()
	pos.Release()
	h := g.embedDrop.Overwrite(r, sum)
	sum.Release()
	out := runBlocks(g.runner, r, g.blocks, h)
	h.Release()
	n := g.FinalNorm.Forward(r, out)
	out.Release()
	return n
}

// positions returns the position embeddings of tokens [B, T]: the table's
// first T rows ([T, D], broadcast over the rows of the batch), or with
// r.Segments (a packed batch) the rows of each token's own position
// ([B, T, D], looked up from the positions uploaded as [B, T] I32, which
// the lookup keeps for its backward).
func (g *GPT) positions(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	seg := r.Segments
	if seg == nil {
		return r.Narrow(g.Positions.Weight, 0, 0, tokens.Shape()[1])
	}
	if p := seg.MaxPosition(); p >= g.Config.Context {
		panic(shapeError("gpt", "position %d is past the context of %d (GPTConfig.Context)", p, g.Config.Context))
	}
	b, t := seg.Shape()
	if b != tokens.Shape()[0] || t != tokens.Shape()[1] {
		panic(shapeError("gpt", "segments of %d rows of %d tokens for tokens %v", b, t, tokens))
	}
	idx, err := tensor.FromInt32(tokens.Device(), seg.Positions(), []int{b, t}, memory.Data)
	if err != nil {
		panic(err)
	}
	defer idx.Release()
	return g.Positions.Forward(r, idx)
}

// Parameters lists embed.tokens.weight, embed.positions.weight, the blocks'
// parameters in order, then final_norm.weight and final_norm.bias.
func (g *GPT) Parameters() []*tensor.Tensor {
	ps := append(g.Tokens.Parameters(), g.Positions.Parameters()...)
	ps = append(ps, parametersOf(g.blocks...)...)
	return append(ps, g.FinalNorm.Parameters()...)
}

// Blocks returns the transformer blocks (*GPTBlock), blocks.0 first.
func (g *GPT) Blocks() []nn.Module { return g.blocks }

// SetBlockRunner makes Forward run the blocks through b (nil:
// nn.RunSequential): how activation checkpointing plugs in.
func (g *GPT) SetBlockRunner(b nn.BlockRunner) { g.runner = b }

// Forward maps x [B, T, Dim] to [B, T, Dim]. With a token runner
// (SetTokenRunner) the projections, MLP and residual sums run through it
// (tokens.go), to the same values.
func (k *GPTBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	if k.tokens != nil {
		return k.tokens.RunBlock(r, x, k.forwardTokens)
	}
	// "blocks.N": what the block makes between its layers (residual sums,
	// the MLP's activation) is labelled with it.
	defer r.Enter(k.path())()
	a := k.LN1.Forward(r, x)
	y := k.Attn.Forward(r, a)
	a.Release()
	h := nn.Residual(r, y, x) // y: the attention's output, nobody saved it
	y.Release()
	m := k.LN2.Forward(r, h)
	f := k.mlpIn.Forward(r, m)
	m.Release()
	z := k.mlpOut.Forward(r, f) // projection, dropout in place
	f.Release()
	out := nn.Residual(r, z, h)
	z.Release()
	h.Release()
	return out
}

// path is the block's path, "blocks.N".
func (k *GPTBlock) path() string {
	name := k.LN1.Weight.Name()
	return name[:max(strings.LastIndexByte(strings.TrimSuffix(name, ".weight"), '.'), 0)]
}

// Parameters lists ln1, attn.qkv, attn.proj, ln2, mlp.fc and mlp.proj
// (weight, then bias).
func (k *GPTBlock) Parameters() []*tensor.Tensor {
	return parametersOf(k.LN1, k.Attn, k.LN2, k.FC, k.Proj)
}

// Children are the embeddings, the blocks and the final LayerNorm.
func (g *GPT) Children() []nn.Module {
	out := []nn.Module{g.Tokens, g.Positions, g.embedDrop}
	out = append(out, g.blocks...)
	return append(out, g.FinalNorm)
}

// Children are ln1, the attention, ln2 and the MLP's two layers.
func (k *GPTBlock) Children() []nn.Module {
	return []nn.Module{k.LN1, k.Attn, k.LN2, k.mlpIn, k.mlpOut}
}
