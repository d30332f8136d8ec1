package models

import (
	"fmt"
	"math"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// LlamaConfig configures a Llama-family decoder (Llama 2, Llama 3, and
// the models that share their layout).
type LlamaConfig struct {
	Layers  int // transformer blocks (num_hidden_layers)
	Heads   int // query heads (num_attention_heads); must divide Dim
	KVHeads int // key/value heads (num_key_value_heads); must divide Heads; 0: Heads
	Dim     int // model width (hidden_size)
	// Hidden is the SwiGLU MLP's width (intermediate_size); 0: 8/3·Dim
	// rounded up to a multiple of 8.
	Hidden  int
	Context int // longest sequence (max_position_embeddings)
	Vocab   int // token ids are in [0, Vocab)
	// RopeTheta is the base of the rotary frequencies (rope_theta); 0:
	// 10000 (Llama 2). RopeScaling stretches them (Llama 3.1's "llama3").
	RopeTheta   float64
	RopeScaling nn.RopeScaling
	NormEps     float64 // RMSNorm's ε (rms_norm_eps); 0: 1e-5
	// TiedHead computes the logits with the token embedding
	// (tie_word_embeddings); otherwise the head is a weight of its own.
	TiedHead bool
	// Dropout is applied while training to the attention probabilities
	// (Hugging Face's attention_dropout; 0: none).
	Dropout float64
	Seed    uint64
	// DType of the parameters: F32 (default), F64 for gradient checks, or
	// BF16 for weights stored in 16 bits.
	DType tensor.DType
	// HeadChunkRows is how many rows TokenLoss puts in one chunk of the
	// head and loss; 0 chooses them from tensor.LMHeadChunkBytes.
	HeadChunkRows int
	// Defer builds the parameters without memory (nn.Builder.Defer), for
	// a sharding that draws them block by block (parallel.NewZeRO3).
	Defer bool
}

// HeadDim is the size of one attention head, Dim/Heads.
func (c LlamaConfig) HeadDim() int { return c.Dim / c.Heads }

// withDefaults fills the fields whose zero means "the default".
func (c LlamaConfig) withDefaults() LlamaConfig {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.Hidden == 0 {
		c.Hidden = (8*c.Dim/3 + 7) / 8 * 8
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	return c
}

// KVCacheBytes is the size of a KV cache for batch rows of maxLen tokens
// in dtype: a key and a value tensor [batch, KVHeads, maxLen, HeadDim]
// per block — Heads/KVHeads times smaller than multi-head attention's.
func (c LlamaConfig) KVCacheBytes(batch, maxLen int, dtype tensor.DType) int64 {
	c = c.withDefaults()
	return 2 * int64(c.Layers) * int64(batch) * int64(maxLen) * int64(c.KVHeads*c.HeadDim()) * int64(dtype.Size())
}

// Llama is a decoder-only transformer in the Llama layout: a token
// embedding (no position embedding: positions enter as rotary embeddings
// of queries and keys), pre-RMSNorm blocks of grouped-query attention and
// a SwiGLU MLP, a final RMSNorm and a head, tied to the embedding or not.
type Llama struct {
	Config    LlamaConfig // with defaults filled in
	Tokens    *nn.Embedding
	FinalNorm *nn.RMSNorm
	Head      *nn.Linear // nil when TiedHead
	blocks    []nn.Module
	runner    nn.BlockRunner
}

var _ nn.Model = (*Llama)(nil)

// LlamaBlock is one block:
//
//	h   = x + attn(attn_norm(x))
//	out = h + mlp(mlp_norm(h))
//
// Both residual sums are written into the branch's output when the run
// allows in-place ops (nn.Residual); the block never writes into x.
type LlamaBlock struct {
	AttnNorm, MLPNorm *nn.RMSNorm
	Attn              *nn.GroupedQueryAttention
	MLP               *nn.SwiGLU
	tokens            nn.TokenRunner // runs the token-wise pieces (tokens.go); nil: whole tensors
}

// NewLlama builds a Llama on dev. Weights are N(0, 0.02) (the projections
// into the residual stream, attn.o and mlp.down, N(0, (0.02/√(2·Layers))²)
// as GPT's), RMSNorm gains 1.
func NewLlama(dev device.Device, c LlamaConfig) (*Llama, error) {
	const name = "LlamaConfig"
	if err := checkDevice(name, dev); err != nil {
		return nil, err
	}
	if err := checkPositive(name, "Layers", c.Layers, "Heads", c.Heads, "Dim", c.Dim, "Context", c.Context, "Vocab", c.Vocab); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	switch {
	case c.Dim%c.Heads != 0:
		return nil, fieldError(name, "Heads", "is %d, which does not divide Dim %d", c.Heads, c.Dim)
	case (c.Dim/c.Heads)%2 != 0:
		return nil, fieldError(name, "Heads", "is %d, which makes heads of %d elements (rotary embeddings need an even size)", c.Heads, c.Dim/c.Heads)
	case c.KVHeads < 0 || c.Heads%c.KVHeads != 0:
		return nil, fieldError(name, "KVHeads", "is %d, which does not divide Heads %d", c.KVHeads, c.Heads)
	case c.Hidden < 0:
		return nil, fieldError(name, "Hidden", "is %d, want > 0 (or 0 for 8/3·Dim)", c.Hidden)
	case !(c.RopeTheta > 1):
		return nil, fieldError(name, "RopeTheta", "is %v, want a base > 1", c.RopeTheta)
	case !(c.NormEps > 0):
		return nil, fieldError(name, "NormEps", "is %v, want > 0", c.NormEps)
	case c.HeadChunkRows < 0:
		return nil, fieldError(name, "HeadChunkRows", "is %d; want 0 (automatic) or more", c.HeadChunkRows)
	}
	if err := checkDropout(name, c.Dropout); err != nil {
		return nil, err
	}
	if err := checkDType(name, c.DType); err != nil {
		return nil, err
	}
	rope := nn.RotaryConfig{HeadDim: c.HeadDim(), Theta: c.RopeTheta, Scaling: c.RopeScaling}
	if _, err := nn.NewRotary(rope); err != nil {
		return nil, fieldError(name, "RopeScaling", "%v", err)
	}
	b := &nn.Builder{Dev: dev, Seed: c.Seed, DType: c.DType, Defer: c.Defer}
	fail := func(err error) (*Llama, error) {
		b.Abort()
		return nil, fmt.Errorf("models: llama: %w", err)
	}
	w := nn.Normal(0, 0.02)
	resid := nn.GPTResidual(c.Layers)
	l := &Llama{Config: c}
	var err error
	if l.Tokens, err = nn.NewEmbedding(b, "embed.tokens", nn.EmbeddingConfig{Num: c.Vocab, Dim: c.Dim, Init: w}); err != nil {
		return fail(err)
	}
	for i := range c.Layers {
		p := fmt.Sprintf("blocks.%d", i)
		blk := &LlamaBlock{}
		if blk.AttnNorm, err = nn.NewRMSNorm(b, p+".attn_norm", c.Dim, c.NormEps); err != nil {
			return fail(err)
		}
		if blk.Attn, err = nn.NewGroupedQueryAttention(b, p+".attn", nn.GQAConfig{Dim: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads,
			Rotary: rope, Dropout: c.Dropout, Weight: w, Out: resid}); err != nil {
			return fail(err)
		}
		if blk.MLPNorm, err = nn.NewRMSNorm(b, p+".mlp_norm", c.Dim, c.NormEps); err != nil {
			return fail(err)
		}
		if blk.MLP, err = nn.NewSwiGLU(b, p+".mlp", nn.SwiGLUConfig{Dim: c.Dim, Hidden: c.Hidden, Weight: w, Down: resid}); err != nil {
			return fail(err)
		}
		l.blocks = append(l.blocks, blk)
	}
	if l.FinalNorm, err = nn.NewRMSNorm(b, "final_norm", c.Dim, c.NormEps); err != nil {
		return fail(err)
	}
	if !c.TiedHead {
		if l.Head, err = nn.NewLinear(b, "head", nn.LinearConfig{In: c.Dim, Out: c.Vocab, NoBias: true, Weight: w}); err != nil {
			return fail(err)
		}
	}
	return l, nil
}

// HeadWeight is the output head's weight [Vocab, Dim]: the token
// embedding when the head is tied.
func (l *Llama) HeadWeight() *tensor.Tensor {
	if l.Head == nil {
		return l.Tokens.Weight
	}
	return l.Head.Weight
}

// ContextLen is the longest sequence the model takes (Config.Context).
func (l *Llama) ContextLen() int { return l.Config.Context }

// Forward maps tokens [B, T] (I32 or I64, T <= Context) to logits
// [B, T, Vocab]. Tokens of another shape, or more than Context of them,
// panic with *tensor.Error, and a token outside [0, Vocab) with
// *device.IndexError; tensor.Catch and tensor.Step return both as errors.
func (l *Llama) Forward(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	n := l.hidden(r, tokens)
	logits := r.Linear(n, l.HeadWeight(), nil)
	n.Release()
	return logits
}

// TokenLoss is the cross-entropy of Forward's logits against targets
// [B, T], computed by tensor.LinearCrossEntropy in chunks of rows so that
// the [B·T, Vocab] logits never exist whole (as GPT.TokenLoss).
func (l *Llama) TokenLoss(r *nn.Run, tokens, targets *tensor.Tensor, o tensor.CrossEntropyOptions) *tensor.Tensor {
	n := l.hidden(r, tokens)
	defer n.Release()
	return r.LinearCrossEntropy(n, l.HeadWeight(), nil, targets, o, l.Config.HeadChunkRows)
}

// checkTokens panics with *tensor.Error unless tokens are a non-empty
// integer [B, T].
func checkTokens(model string, tokens *tensor.Tensor) {
	if tokens.Dim() != 2 || tokens.Len() == 0 || (tokens.DType() != tensor.I32 && tokens.DType() != tensor.I64) {
		panic(shapeError(model, "tokens %v must be non-empty i32 or i64 [batch, time]", tokens))
	}
}

// hidden maps tokens to the final RMSNorm's output [B, T, Dim].
func (l *Llama) hidden(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	nn.CheckInference(r)
	checkTokens("llama", tokens)
	if t := tokens.Shape()[1]; t > l.Config.Context {
		panic(shapeError("llama", "%d tokens per sequence exceed the context of %d (LlamaConfig.Context)", t, l.Config.Context))
	}
	h := l.Tokens.Forward(r, tokens) // [B, T, D]
	out := runBlocks(l.runner, r, l.blocks, h)
	h.Release()
	n := l.FinalNorm.Forward(r, out)
	out.Release()
	return n
}

// Parameters lists embed.tokens.weight, the blocks' parameters in order,
// final_norm.weight, then head.weight when the head is not tied.
func (l *Llama) Parameters() []*tensor.Tensor {
	ps := append(l.Tokens.Parameters(), parametersOf(l.blocks...)...)
	ps = append(ps, l.FinalNorm.Parameters()...)
	if l.Head != nil {
		ps = append(ps, l.Head.Parameters()...)
	}
	return ps
}

// Blocks returns the transformer blocks (*LlamaBlock), blocks.0 first.
func (l *Llama) Blocks() []nn.Module { return l.blocks }

// SetBlockRunner makes Forward run the blocks through b (nil:
// nn.RunSequential): how activation checkpointing plugs in.
func (l *Llama) SetBlockRunner(b nn.BlockRunner) { l.runner = b }

// Forward maps x [B, T, Dim] to [B, T, Dim]. With a token runner
// (SetTokenRunner) the norms, projections, rotary embeddings, MLP and
// residual sums run through it (tokens.go), to the same values.
func (k *LlamaBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	if k.tokens != nil {
		return k.tokens.RunBlock(r, x, k.forwardTokens)
	}
	defer r.Enter(k.path())()
	a := k.AttnNorm.Forward(r, x)
	y := k.Attn.Forward(r, a)
	a.Release()
	return k.mlp(r, y, x)
}

// path is the block's path, "blocks.N", which labels what it makes
// between its layers.
func (k *LlamaBlock) path() string {
	name := k.AttnNorm.Weight.Name() // blocks.N.attn_norm.weight
	return name[:max(strings.LastIndexByte(strings.TrimSuffix(name, ".weight"), '.'), 0)]
}

// mlp is the block after the attention: y, the attention's output (which
// nobody saved), joins x, and the MLP's branch joins that.
func (k *LlamaBlock) mlp(r *nn.Run, y, x *tensor.Tensor) *tensor.Tensor {
	h := nn.Residual(r, y, x)
	y.Release()
	m := k.MLPNorm.Forward(r, h)
	z := k.MLP.Forward(r, m)
	m.Release()
	out := nn.Residual(r, z, h)
	z.Release()
	h.Release()
	return out
}

// Parameters lists attn_norm, attn (q, k, v, o), mlp_norm and mlp (gate,
// up, down).
func (k *LlamaBlock) Parameters() []*tensor.Tensor {
	return parametersOf(k.AttnNorm, k.Attn, k.MLPNorm, k.MLP)
}

// NewKVCache allocates a cache for batch rows of at most maxLen tokens
// (at most Context), in the dtype of the model's parameters: KVHeads
// heads per block (LlamaConfig.KVCacheBytes).
func (l *Llama) NewKVCache(batch, maxLen int) (*KVCache, error) {
	return l.NewKVCacheDType(batch, maxLen, l.Tokens.Weight.DType())
}

// NewKVCacheDType is NewKVCache with the cache held in dtype, as
// GPT.NewKVCacheDType.
func (l *Llama) NewKVCacheDType(batch, maxLen int, dtype tensor.DType) (*KVCache, error) {
	c := l.Config
	return newKVCache("llama", l.Tokens.Weight.Device(), dtype, c.Layers, batch, maxLen, c.Context, []int{c.KVHeads, c.HeadDim()})
}

// ForwardCached maps tokens [B, T] that follow the cache's tokens to their
// logits [B, T, Vocab], adding their keys and values to the cache. Keys
// are cached after their rotation, and the new tokens' queries and keys
// are rotated at their absolute positions (after the cached ones), so
// each call gives the logits Forward of the whole sequence would give for
// the new tokens (within rounding). It records no graph: r must not
// record one (nn.Eval).
func (l *Llama) ForwardCached(r *nn.Run, tokens *tensor.Tensor, kv *KVCache) *tensor.Tensor {
	pos, _ := kv.check("llama", r, tokens)
	x := l.Tokens.Forward(r, tokens)
	for i, m := range l.blocks {
		blk := m.(*LlamaBlock)
		out := blockScoped(r, func(r *nn.Run) *tensor.Tensor {
			a := blk.AttnNorm.Forward(r, x)
			y := attendCachedGQA(r, blk.Attn, a, kv.keys[i], kv.values[i], pos)
			a.Release()
			return blk.mlp(r, y, x)
		})
		x.Release()
		x = out
	}
	kv.len = pos + tokens.Shape()[1]
	n := l.FinalNorm.Forward(r, x)
	x.Release()
	logits := r.Linear(n, l.HeadWeight(), nil)
	n.Release()
	return logits
}

// attendCachedGQA is a's forward for the tokens of x at positions
// [pos, pos+T): their rotated keys and their values are written into the
// cache at pos (KVHeads heads), and their queries attend to the cache's
// first pos+T positions, each up to its own.
func attendCachedGQA(r *nn.Run, a *nn.GroupedQueryAttention, x, keys, values *tensor.Tensor, pos int) *tensor.Tensor {
	q, k, v := a.Project(r, x, pos)
	t := x.Shape()[1]
	for _, c := range []struct{ cache, src *tensor.Tensor }{{keys, k}, {values, v}} {
		dst := r.Narrow(c.cache, 2, pos, t)
		dst.Device().Copy(dst.View(), c.src.View())
		dst.Release()
	}
	scale := 1 / math.Sqrt(float64(a.HeadDim()))
	var y *tensor.Tensor
	if pos == 0 {
		kr, vr := a.RepeatKV(r, k), a.RepeatKV(r, v)
		y = r.CausalAttention(q, kr, vr, scale, 0, 0)
		kr.Release()
		vr.Release()
	} else {
		y = overCache(r, q, keys, values, pos, scale, func(t *tensor.Tensor) *tensor.Tensor { return a.RepeatKV(r, t) })
	}
	q.Release()
	k.Release()
	v.Release()
	out := a.Output(r, y)
	y.Release()
	return out
}

// Generate continues prompt by n tokens (fewer when a stop token comes)
// and returns them, as GPT.Generate does: the prompt runs once, then one
// token per step through a KV cache of KVHeads heads per block; no graph
// is recorded.
func (l *Llama) Generate(prompt []int, n int, o SampleOptions) ([]int, error) {
	return generate(l, "llama", l.Config.Context, l.Config.Vocab, l.Tokens.Weight, prompt, n, o)
}

// Children are the token embedding, the blocks and the final RMSNorm. The
// untied head is left out: the chunked loss reads its weight directly,
// so it is no layer an adapter could hook into.
func (l *Llama) Children() []nn.Module {
	out := []nn.Module{l.Tokens}
	out = append(out, l.blocks...)
	return append(out, l.FinalNorm)
}

// Children are the two norms, the attention and the MLP.
func (k *LlamaBlock) Children() []nn.Module {
	return []nn.Module{k.AttnNorm, k.Attn, k.MLPNorm, k.MLP}
}
