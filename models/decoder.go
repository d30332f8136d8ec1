package models

import (
	"fmt"
	"math"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Arch is what a decoder family's blocks compute beyond Llama's: the
// declared description a family is (families.go), which one Decoder
// reads. The zero value is Llama's: pre-norm blocks of RMSNorm, rotary
// grouped-query attention without biases and a SwiGLU MLP.
type Arch struct {
	// Family names the architecture (Hugging Face's model_type:
	// "llama", "qwen3", "gemma3_text", ...), for messages; "" is llama.
	Family string
	// QKNorm normalizes each query and key head (over HeadDim) before
	// the rotary embeddings (Qwen 3, Gemma 3).
	QKNorm bool
	// QKVBias gives q, k and v biases (Qwen 2).
	QKVBias bool
	// FusedQKV and FusedGateUp hold q, k and v, and gate and up, as one
	// projection each (Phi-3's qkv_proj and gate_up_proj).
	FusedQKV, FusedGateUp bool
	// NormOffset is added to every RMSNorm's gain (Gemma's 1 + w).
	NormOffset float64
	// SandwichNorms adds a norm after the attention and after the MLP,
	// before each joins the residual stream (Gemma 2 and 3).
	SandwichNorms bool
	// Activation is the gated MLP's: "silu" (SwiGLU; "" too) or
	// "gelu_tanh" (Gemma's GeGLU).
	Activation string
	// ScaleEmbeddings multiplies the token embeddings by √Dim (Gemma),
	// as DecoderConfig.EmbedScale gives it.
	ScaleEmbeddings bool
}

// name is a's family for messages.
func (a Arch) name() string {
	if a.Family == "" {
		return "llama"
	}
	return a.Family
}

// LayerKind is how one block's attention sees positions.
type LayerKind struct {
	// Sliding confines each query to the DecoderConfig.Window keys up to
	// its own (Mistral, Gemma's sliding layers, Qwen 2's upper layers),
	// rotated with LocalRopeTheta when it is set (Gemma 3).
	Sliding bool
	// NoRope leaves queries and keys unrotated (SmolLM 3's every fourth
	// layer).
	NoRope bool
}

// DecoderConfig configures a Decoder: a family's Arch, its shape, and the
// numbers its config.json gives. Zero values mean Llama's defaults.
type DecoderConfig struct {
	Arch    Arch
	Layers  int // transformer blocks (num_hidden_layers)
	Heads   int // query heads (num_attention_heads)
	KVHeads int // key/value heads (num_key_value_heads); must divide Heads; 0: Heads
	Dim     int // model width (hidden_size)
	// HeadDim is the size of one head (head_dim); 0: Dim/Heads, which
	// Heads must then divide.
	HeadDim int
	// Hidden is the gated MLP's width (intermediate_size); 0: 8/3·Dim
	// rounded up to a multiple of 8.
	Hidden  int
	Context int // longest sequence (max_position_embeddings)
	Vocab   int // token ids are in [0, Vocab)
	// RopeTheta is the base of the rotary frequencies (rope_theta); 0:
	// 10000 (Llama 2). RopeScaling stretches them (Llama 3.1's "llama3",
	// "linear", Phi-3's "longrope"). RotaryDim rotates only the first
	// elements of each head (partial_rotary_factor·HeadDim; 0: all).
	RopeTheta   float64
	RopeScaling nn.RopeScaling
	RotaryDim   int
	// LocalRopeTheta is the base of the sliding layers' frequencies,
	// without scaling (Gemma 3's rope_local_base_freq); 0: the global
	// ones.
	LocalRopeTheta float64
	// Window is the sliding window, in keys, of the layers LayerKinds
	// marks Sliding (sliding_window).
	Window int
	// LayerKinds says, per block, whether it slides and whether it
	// rotates (nil: every block attends every earlier key, rotated).
	LayerKinds []LayerKind
	NormEps    float64 // RMSNorm's ε (rms_norm_eps); 0: 1e-5
	// QueryScale multiplies the attention scores (0: 1/√HeadDim; Gemma:
	// query_pre_attn_scalar^-½). AttnSoftcap and FinalSoftcap cap the
	// scores and the logits softly, c·tanh(x/c) (Gemma 2; 0: none).
	QueryScale, AttnSoftcap, FinalSoftcap float64
	// EmbedScale multiplies the token embeddings when the Arch scales
	// them (0: √Dim rounded to float32; a loader gives it rounded to the
	// checkpoint's dtype, as Hugging Face rounds its buffer).
	EmbedScale float64
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

// HeadSize is the size of one attention head: HeadDim, or Dim/Heads.
func (c DecoderConfig) HeadSize() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.Dim / c.Heads
}

// withDefaults fills the fields whose zero means "the default".
func (c DecoderConfig) withDefaults() DecoderConfig {
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
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.Arch.ScaleEmbeddings && c.EmbedScale == 0 {
		c.EmbedScale = float64(float32(math.Sqrt(float64(c.Dim))))
	}
	return c
}

// Layer returns block i's kind.
func (c DecoderConfig) Layer(i int) LayerKind {
	if c.LayerKinds == nil {
		return LayerKind{}
	}
	return c.LayerKinds[i]
}

// KVCacheBytes is the size of a KV cache for batch rows of maxLen tokens
// in dtype: a key and a value tensor [batch, KVHeads, maxLen, HeadDim]
// per block — Heads/KVHeads times smaller than multi-head attention's.
func (c DecoderConfig) KVCacheBytes(batch, maxLen int, dtype tensor.DType) int64 {
	c = c.withDefaults()
	return 2 * int64(c.Layers) * int64(batch) * int64(maxLen) * int64(c.KVHeads*c.HeadDim) * int64(dtype.Size())
}

// Params is the number of parameter elements of the Decoder c builds,
// computed from c alone (exact: a caller sizes a model before building
// it). c must be one NewDecoder accepts.
func (c DecoderConfig) Params() int64 {
	c = c.withDefaults()
	d, f, l, v := int64(c.Dim), int64(c.Hidden), int64(c.Layers), int64(c.Vocab)
	q, kv := int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim)
	// Per block: the norms, q and o (q×d each), k and v (kv×d each),
	// gate, up and down (d×f each), and the biases and head norms.
	norms := int64(2)
	if c.Arch.SandwichNorms {
		norms = 4
	}
	block := norms*d + 2*q*d + 2*kv*d + 3*d*f
	if c.Arch.QKVBias {
		block += q + 2*kv
	}
	if c.Arch.QKNorm {
		block += 2 * int64(c.HeadDim)
	}
	n := v*d + l*block + d
	if !c.TiedHead {
		n += v * d
	}
	return n
}

// Decoder is a decoder-only transformer in the Llama layout and the
// layouts of the families built like it (Arch): a token embedding (no
// position embedding: positions enter as rotary embeddings of queries
// and keys), blocks of RMSNorm, grouped-query attention and a gated MLP,
// a final RMSNorm and a head, tied to the embedding or not.
type Decoder struct {
	Config    DecoderConfig // with defaults filled in
	Tokens    *nn.Embedding
	FinalNorm *nn.RMSNorm
	Head      *nn.Linear // nil when TiedHead
	blocks    []nn.Module
	runner    nn.BlockRunner
	tokens    nn.TokenRunner // runs the final norm (tokens.go); nil: whole
}

var _ nn.Model = (*Decoder)(nil)

// DecoderBlock is one block:
//
//	h   = x + post_attn_norm(attn(attn_norm(x)))
//	out = h + post_mlp_norm(mlp(mlp_norm(h)))
//
// the post norms only with Arch.SandwichNorms. Both residual sums are
// written into the branch's output when the run allows in-place ops
// (nn.Residual); the block never writes into x.
type DecoderBlock struct {
	AttnNorm, MLPNorm         *nn.RMSNorm
	PostAttnNorm, PostMLPNorm *nn.RMSNorm // nil without SandwichNorms
	Attn                      *nn.GroupedQueryAttention
	MLP                       *nn.GatedMLP
	tokens                    nn.TokenRunner // runs the token-wise pieces (tokens.go); nil: whole tensors
}

// NewDecoder builds a Decoder on dev. Weights are N(0, 0.02) (the
// projections into the residual stream, attn.o and mlp.down,
// N(0, (0.02/√(2·Layers))²) as GPT's), RMSNorm gains 1 (0 under a
// NormOffset of 1), biases 0.
func NewDecoder(dev device.Device, c DecoderConfig) (*Decoder, error) {
	name := "DecoderConfig"
	if err := checkDevice(name, dev); err != nil {
		return nil, err
	}
	if err := checkPositive(name, "Layers", c.Layers, "Heads", c.Heads, "Dim", c.Dim, "Context", c.Context, "Vocab", c.Vocab); err != nil {
		return nil, err
	}
	if c.HeadDim == 0 && c.Dim%c.Heads != 0 {
		return nil, fieldError(name, "Heads", "is %d, which does not divide Dim %d (set HeadDim)", c.Heads, c.Dim)
	}
	c = c.withDefaults()
	switch {
	case c.HeadDim < 0:
		return nil, fieldError(name, "HeadDim", "is %d, want > 0 (or 0 for Dim/Heads)", c.HeadDim)
	case c.RotaryDim == 0 && c.HeadDim%2 != 0:
		return nil, fieldError(name, "HeadDim", "is %d (rotary embeddings need an even size)", c.HeadDim)
	case c.RotaryDim < 0 || c.RotaryDim%2 != 0 || c.RotaryDim > c.HeadDim:
		return nil, fieldError(name, "RotaryDim", "is %d, want an even size of at most HeadDim %d (0: all of it)", c.RotaryDim, c.HeadDim)
	case c.KVHeads < 0 || c.Heads%c.KVHeads != 0:
		return nil, fieldError(name, "KVHeads", "is %d, which does not divide Heads %d", c.KVHeads, c.Heads)
	case c.Hidden < 0:
		return nil, fieldError(name, "Hidden", "is %d, want > 0 (or 0 for 8/3·Dim)", c.Hidden)
	case !(c.RopeTheta > 1):
		return nil, fieldError(name, "RopeTheta", "is %v, want a base > 1", c.RopeTheta)
	case c.LocalRopeTheta != 0 && !(c.LocalRopeTheta > 1):
		return nil, fieldError(name, "LocalRopeTheta", "is %v, want a base > 1 (or 0 for RopeTheta)", c.LocalRopeTheta)
	case !(c.NormEps > 0):
		return nil, fieldError(name, "NormEps", "is %v, want > 0", c.NormEps)
	case c.HeadChunkRows < 0:
		return nil, fieldError(name, "HeadChunkRows", "is %d; want 0 (automatic) or more", c.HeadChunkRows)
	case c.LayerKinds != nil && len(c.LayerKinds) != c.Layers:
		return nil, fieldError(name, "LayerKinds", "has %d kinds for %d layers", len(c.LayerKinds), c.Layers)
	case c.Window < 0 || c.Window > c.Context:
		return nil, fieldError(name, "Window", "is %d, want 0 (none) to Context %d", c.Window, c.Context)
	case c.FinalSoftcap < 0 || math.IsInf(c.FinalSoftcap, 0) || math.IsNaN(c.FinalSoftcap):
		return nil, fieldError(name, "FinalSoftcap", "is %v, want a finite number above 0 (or 0 for none)", c.FinalSoftcap)
	case c.EmbedScale < 0 || math.IsInf(c.EmbedScale, 0) || math.IsNaN(c.EmbedScale):
		return nil, fieldError(name, "EmbedScale", "is %v, want a finite number above 0", c.EmbedScale)
	}
	sliding := false
	for i := range c.Layers {
		sliding = sliding || c.Layer(i).Sliding
	}
	if sliding && c.Window == 0 {
		return nil, fieldError(name, "Window", "is 0, yet LayerKinds has sliding layers")
	}
	if err := checkDropout(name, c.Dropout); err != nil {
		return nil, err
	}
	if err := checkDType(name, c.DType); err != nil {
		return nil, err
	}
	global := nn.RotaryConfig{HeadDim: c.HeadDim, Dim: c.RotaryDim, Theta: c.RopeTheta, Scaling: c.RopeScaling}
	local := global
	if c.LocalRopeTheta != 0 {
		local = nn.RotaryConfig{HeadDim: c.HeadDim, Dim: c.RotaryDim, Theta: c.LocalRopeTheta}
	}
	for _, rc := range []nn.RotaryConfig{global, local} {
		if _, err := nn.NewRotary(rc); err != nil {
			return nil, fieldError(name, "RopeScaling", "%v", err)
		}
	}
	b := &nn.Builder{Dev: dev, Seed: c.Seed, DType: c.DType, Defer: c.Defer}
	fail := func(err error) (*Decoder, error) {
		b.Abort()
		return nil, fmt.Errorf("models: %s: %w", c.Arch.name(), err)
	}
	w := nn.Normal(0, 0.02)
	resid := nn.GPTResidual(c.Layers)
	norm := nn.RMSNormConfig{Dim: c.Dim, Eps: c.NormEps, Offset: c.Arch.NormOffset}
	l := &Decoder{Config: c}
	var err error
	if l.Tokens, err = nn.NewEmbedding(b, "embed.tokens", nn.EmbeddingConfig{Num: c.Vocab, Dim: c.Dim, Init: w}); err != nil {
		return fail(err)
	}
	for i := range c.Layers {
		p := fmt.Sprintf("blocks.%d", i)
		kind := c.Layer(i)
		blk := &DecoderBlock{}
		if blk.AttnNorm, err = nn.NewRMSNormWith(b, p+".attn_norm", norm); err != nil {
			return fail(err)
		}
		gqa := nn.GQAConfig{Dim: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Rotary: global, NoRotary: kind.NoRope,
			Bias: c.Arch.QKVBias, Fused: c.Arch.FusedQKV, Scale: c.QueryScale, Softcap: c.AttnSoftcap, Dropout: c.Dropout, Weight: w, Out: resid}
		if kind.Sliding {
			gqa.Rotary, gqa.Window = local, c.Window
		}
		if c.Arch.QKNorm {
			gqa.QKNorm = &nn.RMSNormConfig{Eps: c.NormEps, Offset: c.Arch.NormOffset}
		}
		if blk.Attn, err = nn.NewGroupedQueryAttention(b, p+".attn", gqa); err != nil {
			return fail(err)
		}
		if c.Arch.SandwichNorms {
			if blk.PostAttnNorm, err = nn.NewRMSNormWith(b, p+".post_attn_norm", norm); err != nil {
				return fail(err)
			}
		}
		if blk.MLPNorm, err = nn.NewRMSNormWith(b, p+".mlp_norm", norm); err != nil {
			return fail(err)
		}
		if blk.MLP, err = nn.NewGatedMLP(b, p+".mlp", nn.GatedMLPConfig{Dim: c.Dim, Hidden: c.Hidden, Activation: c.Arch.Activation,
			Fused: c.Arch.FusedGateUp, Weight: w, Down: resid}); err != nil {
			return fail(err)
		}
		if c.Arch.SandwichNorms {
			if blk.PostMLPNorm, err = nn.NewRMSNormWith(b, p+".post_mlp_norm", norm); err != nil {
				return fail(err)
			}
		}
		l.blocks = append(l.blocks, blk)
	}
	if l.FinalNorm, err = nn.NewRMSNormWith(b, "final_norm", norm); err != nil {
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
func (l *Decoder) HeadWeight() *tensor.Tensor {
	if l.Head == nil {
		return l.Tokens.Weight
	}
	return l.Head.Weight
}

// ContextLen is the longest sequence the model takes (Config.Context).
func (l *Decoder) ContextLen() int { return l.Config.Context }

// Forward maps tokens [B, T] (I32 or I64, T <= Context) to logits
// [B, T, Vocab], soft-capped when the config says so. Tokens of another
// shape, or more than Context of them, panic with *tensor.Error, and a
// token outside [0, Vocab) with *device.IndexError; tensor.Catch and
// tensor.Step return both as errors.
func (l *Decoder) Forward(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	n := l.hidden(r, tokens)
	logits := l.logits(r, n)
	n.Release()
	return logits
}

// logits is the head's output for the final norm's n, soft-capped.
func (l *Decoder) logits(r *nn.Run, n *tensor.Tensor) *tensor.Tensor {
	logits := r.Linear(n, l.HeadWeight(), nil)
	if c := l.Config.FinalSoftcap; c > 0 {
		capped := r.Softcap(logits, c)
		logits.Release()
		return capped
	}
	return logits
}

// TokenLoss is the cross-entropy of Forward's logits against targets
// [B, T], computed by tensor.LinearCrossEntropy in chunks of rows so that
// the [B·T, Vocab] logits never exist whole (as GPT.TokenLoss).
func (l *Decoder) TokenLoss(r *nn.Run, tokens, targets *tensor.Tensor, o tensor.CrossEntropyOptions) *tensor.Tensor {
	n := l.hidden(r, tokens)
	defer n.Release()
	o.Softcap = l.Config.FinalSoftcap
	return r.LinearCrossEntropy(n, l.HeadWeight(), nil, targets, o, l.Config.HeadChunkRows)
}

// checkTokens panics with *tensor.Error unless tokens are a non-empty
// integer [B, T].
func checkTokens(model string, tokens *tensor.Tensor) {
	if tokens.Dim() != 2 || tokens.Len() == 0 || (tokens.DType() != tensor.I32 && tokens.DType() != tensor.I64) {
		panic(shapeError(model, "tokens %v must be non-empty i32 or i64 [batch, time]", tokens))
	}
}

// embed looks tokens up, scaled when the Arch says so: by EmbedScale
// rounded to the table's dtype, as Hugging Face casts its scale to the
// embedding's.
func (l *Decoder) embed(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	h := l.Tokens.Forward(r, tokens)
	if !l.Config.Arch.ScaleEmbeddings {
		return h
	}
	scaled := r.MulScalar(h, device.Round(l.Tokens.Weight.DType(), l.Config.EmbedScale))
	h.Release()
	return scaled
}

// hidden maps tokens to the final RMSNorm's output [B, T, Dim].
func (l *Decoder) hidden(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor {
	nn.CheckInference(r)
	family := l.Config.Arch.name()
	checkTokens(family, tokens)
	if t := tokens.Shape()[1]; t > l.Config.Context {
		panic(shapeError(family, "%d tokens per sequence exceed the context of %d (DecoderConfig.Context)", t, l.Config.Context))
	}
	h := l.embed(r, tokens) // [B, T, D]
	out := runBlocks(l.runner, r, l.blocks, h)
	h.Release()
	n := l.finalNorm(r, out)
	out.Release()
	return n
}

// Parameters lists embed.tokens.weight, the blocks' parameters in order,
// final_norm.weight, then head.weight when the head is not tied.
func (l *Decoder) Parameters() []*tensor.Tensor {
	ps := append(l.Tokens.Parameters(), parametersOf(l.blocks...)...)
	ps = append(ps, l.FinalNorm.Parameters()...)
	if l.Head != nil {
		ps = append(ps, l.Head.Parameters()...)
	}
	return ps
}

// Blocks returns the transformer blocks (*DecoderBlock), blocks.0 first.
func (l *Decoder) Blocks() []nn.Module { return l.blocks }

// SetBlockRunner makes Forward run the blocks through b (nil:
// nn.RunSequential): how activation checkpointing plugs in.
func (l *Decoder) SetBlockRunner(b nn.BlockRunner) { l.runner = b }

// Forward maps x [B, T, Dim] to [B, T, Dim]. With a token runner
// (SetTokenRunner) the norms, projections, rotary embeddings, MLP and
// residual sums run through it (tokens.go), to the same values.
func (k *DecoderBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
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
func (k *DecoderBlock) path() string {
	name := k.AttnNorm.Weight.Name() // blocks.N.attn_norm.weight
	return name[:max(strings.LastIndexByte(strings.TrimSuffix(name, ".weight"), '.'), 0)]
}

// post is n(y) when the block has the norm n (y released), else y.
func post(r *nn.Run, n *nn.RMSNorm, y *tensor.Tensor) *tensor.Tensor {
	if n == nil {
		return y
	}
	out := n.Forward(r, y)
	y.Release()
	return out
}

// mlp is the block after the attention: y, the attention's output (which
// nobody saved), joins x after its post norm, and the MLP's branch joins
// that.
func (k *DecoderBlock) mlp(r *nn.Run, y, x *tensor.Tensor) *tensor.Tensor {
	y = post(r, k.PostAttnNorm, y)
	h := nn.Residual(r, y, x)
	y.Release()
	m := k.MLPNorm.Forward(r, h)
	z := post(r, k.PostMLPNorm, k.MLP.Forward(r, m))
	m.Release()
	out := nn.Residual(r, z, h)
	z.Release()
	h.Release()
	return out
}

// Parameters lists attn_norm, attn (projections, then head norms),
// post_attn_norm, mlp_norm, mlp (gate, up, down) and post_mlp_norm.
func (k *DecoderBlock) Parameters() []*tensor.Tensor { return parametersOf(k.Children()...) }

// NewKVCache allocates a cache for batch rows of at most maxLen tokens
// (at most Context), in the dtype of the model's parameters: KVHeads
// heads per block (DecoderConfig.KVCacheBytes).
func (l *Decoder) NewKVCache(batch, maxLen int) (*KVCache, error) {
	return l.NewKVCacheDType(batch, maxLen, l.Tokens.Weight.DType())
}

// NewKVCacheDType is NewKVCache with the cache held in dtype, as
// GPT.NewKVCacheDType.
func (l *Decoder) NewKVCacheDType(batch, maxLen int, dtype tensor.DType) (*KVCache, error) {
	c := l.Config
	return newKVCache(c.Arch.name(), l.Tokens.Weight.Device(), dtype, c.Layers, batch, maxLen, c.Context, []int{c.KVHeads, c.HeadDim})
}

// ForwardCached maps tokens [B, T] that follow the cache's tokens to their
// logits [B, T, Vocab], adding their keys and values to the cache. Keys
// are cached after their rotation, and the new tokens' queries and keys
// are rotated at their absolute positions (after the cached ones), so
// each call gives the logits Forward of the whole sequence would give for
// the new tokens (within rounding) — except past a longrope model's
// original context, where the whole sequence's frequencies change and the
// cache must be filled again (generate does; cacheSwitchesAt). It
// records no graph: r must not record one (nn.Eval).
func (l *Decoder) ForwardCached(r *nn.Run, tokens *tensor.Tensor, kv *KVCache) *tensor.Tensor {
	pos, _ := kv.check(l.Config.Arch.name(), r, tokens)
	x := l.embed(r, tokens)
	for i, m := range l.blocks {
		blk := m.(*DecoderBlock)
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
	logits := l.logits(r, n)
	n.Release()
	return logits
}

// cacheSwitchesAt is the sequence length at which keys cached for shorter
// sequences no longer hold (longrope's switch to its long frequencies),
// or 0 when they always do.
func (l *Decoder) cacheSwitchesAt() int {
	at := 0
	for _, m := range l.blocks {
		if rope := m.(*DecoderBlock).Attn.Rotary; rope != nil {
			if s := rope.SwitchesAt(); s > 0 && (at == 0 || s < at) {
				at = s
			}
		}
	}
	return at
}

// attendCachedGQA is a's forward for the tokens of x at positions
// [pos, pos+T): their rotated keys and their values are written into the
// cache at pos (KVHeads heads), and their queries attend to the cache's
// first pos+T positions, each up to its own (and within a's window).
func attendCachedGQA(r *nn.Run, a *nn.GroupedQueryAttention, x, keys, values *tensor.Tensor, pos int) *tensor.Tensor {
	q, k, v := a.Project(r, x, pos)
	t := x.Shape()[1]
	for _, c := range []struct{ cache, src *tensor.Tensor }{{keys, k}, {values, v}} {
		dst := r.Narrow(c.cache, 2, pos, t)
		dst.Device().Copy(dst.View(), c.src.View())
		dst.Release()
	}
	o := a.Options(r)
	var y *tensor.Tensor
	if pos == 0 {
		y = r.Attention(q, k, v, nil, o) // the KVHeads heads, as Forward
	} else {
		y = overCache(r, q, keys, values, pos, o) // grouped heads as batches: no repeated cache
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
func (l *Decoder) Generate(prompt []int, n int, o SampleOptions) ([]int, error) {
	return generate(l, l.Config.Arch.name(), l.Config.Context, l.Config.Vocab, l.Tokens.Weight, prompt, n, o)
}

// Children are the token embedding, the blocks and the final RMSNorm. The
// untied head is left out: the chunked loss reads its weight directly,
// so it is no layer an adapter could hook into.
func (l *Decoder) Children() []nn.Module {
	out := []nn.Module{l.Tokens}
	out = append(out, l.blocks...)
	return append(out, l.FinalNorm)
}

// Children are the norms, the attention and the MLP in forward order.
func (k *DecoderBlock) Children() []nn.Module {
	out := []nn.Module{k.AttnNorm, k.Attn}
	if k.PostAttnNorm != nil {
		out = append(out, k.PostAttnNorm)
	}
	out = append(out, k.MLPNorm, k.MLP)
	if k.PostMLPNorm != nil {
		out = append(out, k.PostMLPNorm)
	}
	return out
}
