package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// KVCache holds, for every block of a GPT or a Decoder, the keys and values of the
// tokens generated so far, so that each new token costs one token's
// forward instead of the whole prefix's. Its tensors are allocated once, at
// their full length, under memory.KVCache: generation allocates nothing
// that grows with the number of tokens.
type KVCache struct {
	keys, values []*tensor.Tensor // per block, [B, H, MaxLen, D/H]
	batch, len   int              // rows, and tokens held per row
	maxLen       int
	dtype        tensor.DType
}

// KVCacheBytes is the size of a cache for batch rows of maxLen tokens of
// c in dtype: two [batch, Heads, maxLen, Dim/Heads] tensors per block.
func KVCacheBytes(c GPTConfig, batch, maxLen int, dtype tensor.DType) int64 {
	return 2 * int64(c.Layers) * int64(batch) * int64(maxLen) * int64(c.Dim) * int64(dtype.Size())
}

// NewKVCache allocates a cache for batch rows of at most maxLen tokens
// (at most Context), in the dtype of the model's parameters.
func (g *GPT) NewKVCache(batch, maxLen int) (*KVCache, error) {
	return g.NewKVCacheDType(batch, maxLen, g.Tokens.Weight.DType())
}

// NewKVCacheDType is NewKVCache with the cache held in dtype (a float
// type): under autocast, the autocast dtype, in which the products
// compute the keys and values anyway (Generate's SampleOptions.Autocast).
// Keys and values written into it are rounded to it.
func (g *GPT) NewKVCacheDType(batch, maxLen int, dtype tensor.DType) (*KVCache, error) {
	c := g.Config
	return newKVCache("gpt", g.Tokens.Weight.Device(), dtype, c.Layers, batch, maxLen, c.Context, []int{c.Heads, c.Dim / c.Heads})
}

// newKVCache allocates, per block, a key and a value tensor
// [batch, heads[0], maxLen, heads[1]] of dt on dev.
func newKVCache(model string, dev device.Device, dt tensor.DType, layers, batch, maxLen, context int, heads []int) (*KVCache, error) {
	if batch < 1 || maxLen < 1 || maxLen > context {
		return nil, fmt.Errorf("models: %s: a KV cache of %d rows of %d tokens (want at least 1 row, and 1 to Context %d tokens)", model, batch, maxLen, context)
	}
	if !dt.IsFloat() {
		return nil, fmt.Errorf("models: %s: a KV cache in %v (want f32, f64, f16 or bf16)", model, dt)
	}
	kv := &KVCache{batch: batch, maxLen: maxLen, dtype: dt}
	shape := []int{batch, heads[0], maxLen, heads[1]}
	for range layers {
		for _, list := range []*[]*tensor.Tensor{&kv.keys, &kv.values} {
			t, err := tensor.New(dev, dt, shape, memory.KVCache)
			if err != nil {
				kv.Release()
				return nil, fmt.Errorf("models: %s: KV cache: %w", model, err)
			}
			*list = append(*list, t)
		}
	}
	return kv, nil
}

// DType is the dtype the cache holds keys and values in.
func (kv *KVCache) DType() tensor.DType { return kv.dtype }

// Len is the number of tokens the cache holds per row.
func (kv *KVCache) Len() int { return kv.len }

// Reset empties the cache (its memory stays allocated).
func (kv *KVCache) Reset() { kv.len = 0 }

// Release frees the cache's tensors.
func (kv *KVCache) Release() {
	for _, t := range append(kv.keys, kv.values...) {
		t.Release()
	}
	kv.keys, kv.values = nil, nil
}

// ForwardCached maps tokens [B, T] that follow the cache's tokens to their
// logits [B, T, Vocab], adding their keys and values to the cache. With an
// empty cache it is Forward of the tokens; then each call with the next
// token(s) gives the logits Forward of the whole sequence would give for
// them (within rounding: the attention over the cache is a plain product
// rather than the fused causal kernel). It records no graph: r must not
// record one (nn.Eval).
func (g *GPT) ForwardCached(r *nn.Run, tokens *tensor.Tensor, kv *KVCache) *tensor.Tensor {
	pos, t := kv.check("gpt", r, tokens)
	tok := g.Tokens.Forward(r, tokens)
	p := r.Narrow(g.Positions.Weight, 0, pos, t)
	x := nn.Residual(r, tok, p)
	tok.Release()
	p.Release()
	for i, m := range g.blocks {
		blk := m.(*GPTBlock)
		y := blockScoped(r, func(r *nn.Run) *tensor.Tensor { return blk.forwardCached(r, x, kv, i, pos) })
		x.Release()
		x = y
	}
	kv.len = pos + t
	n := g.FinalNorm.Forward(r, x)
	x.Release()
	logits := r.Linear(n, g.Tokens.Weight, nil)
	n.Release()
	return logits
}

// blockScoped runs f, one block's cached forward, in a scope of its own
// when r autocasts, and returns its output owned by r's scope. A scope
// holds the 16-bit copies autocast makes of the weights until it closes
// (a training step's backward reads them again); a cached forward reads
// each block's weights once, so the step's scope would hold a 16-bit
// copy of every block's weights for nothing (half an f32 model: more
// than the 16-bit KV cache saves). The block's scope frees its own.
func blockScoped(r *nn.Run, f func(r *nn.Run) *tensor.Tensor) *tensor.Tensor {
	if r.AutocastDType() == device.Invalid {
		return f(r)
	}
	s := r.With()
	defer s.Close()
	y := f(r.In(s))
	return r.Reshape(y, y.Shape()...) // a view of y's storage that r's scope owns
}

// check panics unless r records no graph and tokens [B, T] fit after the
// cache's tokens; it returns the position of the first and T.
func (kv *KVCache) check(model string, r *nn.Run, tokens *tensor.Tensor) (pos, t int) {
	nn.CheckInference(r)
	if r.Grad() {
		panic(shapeError(model, "ForwardCached records no graph: run it under nn.Eval"))
	}
	checkTokens(model, tokens)
	b, t := tokens.Shape()[0], tokens.Shape()[1]
	if b != kv.batch {
		panic(shapeError(model, "tokens %v: the KV cache holds %d rows", tokens, kv.batch))
	}
	pos = kv.len
	if pos+t > kv.maxLen {
		panic(shapeError(model, "%d tokens after %d cached exceed the KV cache's %d", t, pos, kv.maxLen))
	}
	return pos, t
}

// forwardCached is Forward for tokens at positions [pos, pos+T) of a
// sequence whose earlier keys and values are in kv's block i.
func (k *GPTBlock) forwardCached(r *nn.Run, x *tensor.Tensor, kv *KVCache, i, pos int) *tensor.Tensor {
	a := k.LN1.Forward(r, x)
	y := attendCached(r, k.Attn, a, kv.keys[i], kv.values[i], pos)
	a.Release()
	h := nn.Residual(r, y, x)
	y.Release()
	m := k.LN2.Forward(r, h)
	f := k.mlpIn.Forward(r, m)
	m.Release()
	z := k.mlpOut.Forward(r, f)
	f.Release()
	out := nn.Residual(r, z, h)
	z.Release()
	h.Release()
	return out
}

// attendCached is a's forward for the tokens at positions [pos, pos+T):
// their keys and values are written into the cache at pos, and their
// queries attend to the cache's first pos+T positions, each up to its own.
func attendCached(r *nn.Run, a *nn.CausalSelfAttention, x, keys, values *tensor.Tensor, pos int) *tensor.Tensor {
	d := a.Proj.Weight.Shape()[0]
	b, t := x.Shape()[0], x.Shape()[1]
	h := a.Heads
	dh := d / h
	qkv := a.QKV.Forward(r, x) // [B, T, 3D]
	r5 := r.Reshape(qkv, b, t, 3, h, dh)
	qkv.Release()
	head := func(i int) *tensor.Tensor {
		n := r.Narrow(r5, 2, i, 1)
		n4 := r.Reshape(n, b, t, h, dh)
		n.Release()
		p := r.Permute(n4, 0, 2, 1, 3) // [B, H, T, Dh]
		n4.Release()
		return p
	}
	q, k, v := head(0), head(1), head(2)
	r5.Release()
	for _, c := range []struct{ cache, src *tensor.Tensor }{{keys, k}, {values, v}} {
		dst := r.Narrow(c.cache, 2, pos, t)
		dst.Device().Copy(dst.View(), c.src.View())
		dst.Release()
	}
	o := tensor.AttentionOptions{Scale: 1 / math.Sqrt(float64(dh))}
	var y *tensor.Tensor
	if pos == 0 {
		y = r.Attention(q, k, v, nil, o)
	} else {
		y = overCache(r, q, keys, values, pos, o)
	}
	q.Release()
	k.Release()
	v.Release()
	yt := r.Permute(y, 0, 2, 1, 3)
	y.Release()
	joined := r.Reshape(yt, b, t, d)
	yt.Release()
	out := a.Proj.Forward(r, joined)
	joined.Release()
	return out
}

// overCache is the attention of queries q [B, H, T, Dh] at positions
// [pos, pos+T) over the cached keys and values [B, KVH, MaxLen, Dh] up to
// each query's own, with o's scale and soft cap, and within its window:
// a plain product and softmax (the cache's prefix is not the fused
// causal kernel's square) over the keys the earliest query may see, with
// a mask where a query sees fewer. With KVH < H (grouped-query
// attention) the cache is not repeated: the H/KVH query heads of each
// cached head are one batch of their rows, q viewed as
// [B, KVH, H/KVH·T, Dh] (a copy of q where its layout does not allow the
// view: T rows of H heads, not the cache's length), so the products run
// over [B, KVH] batches and the softmax over the scores viewed as
// [B, H, T, n]; each score and output element is the sum the repeated
// cache's products formed, in the same order.
func overCache(r *nn.Run, q, keys, values *tensor.Tensor, pos int, o tensor.AttentionOptions) *tensor.Tensor {
	b, h, t, dh := q.Shape()[0], q.Shape()[1], q.Shape()[2], q.Shape()[3]
	kvh := keys.Shape()[1]
	n := pos + t
	lo := 0 // the first key any query sees
	if o.Window > 0 {
		lo = max(0, pos-o.Window+1)
	}
	kc, vc := r.Narrow(keys, 2, lo, n-lo), r.Narrow(values, 2, lo, n-lo)
	qg := q
	if kvh != h {
		qg = r.Reshape(q, b, kvh, h/kvh*t, dh)
	}
	kt := r.Transpose(kc, 2, 3)
	s := r.ScaledMatMul(qg, kt, o.Scale) // [B, H, T, n-lo], or [B, KVH, H/KVH·T, n-lo]
	kt.Release()
	kc.Release()
	if qg != q {
		qg.Release()
	}
	if kvh != h {
		s4 := r.Reshape(s, b, h, t, n-lo)
		s.Release()
		s = s4
	}
	if o.Softcap > 0 {
		capped := r.Softcap(s, o.Softcap)
		s.Release()
		s = capped
	}
	if t > 1 {
		// Query i (position pos+i) sees keys up to pos+i, and none
		// Window or more before it.
		w := n - lo
		mask := make([]float32, t*w)
		for i := range t {
			for j := range w {
				key, at := lo+j, pos+i
				if key > at || o.Window > 0 && key <= at-o.Window {
					mask[i*w+j] = 1
				}
			}
		}
		m, err := tensor.FromFloat32(q.Device(), mask, []int{t, w}, memory.Temporary)
		if err != nil {
			panic(err)
		}
		masked := r.MaskedFill(s, m, math.Inf(-1))
		m.Release()
		s.Release()
		s = masked
	}
	p := r.Softmax(s)
	s.Release()
	if kvh != h {
		pg := r.Reshape(p, b, kvh, h/kvh*t, n-lo)
		p.Release()
		p = pg
	}
	y := r.MatMul(p, vc)
	p.Release()
	vc.Release()
	if kvh != h {
		y4 := r.Reshape(y, b, h, t, dh)
		y.Release()
		y = y4
	}
	return y
}

// SampleOptions choose how Generate picks each token, and the precision
// it computes the logits in.
type SampleOptions struct {
	// Temperature divides the logits before sampling; 0 picks the most
	// likely token (greedy decoding).
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose
	// probabilities sum to at least P (0 or 1: all).
	TopP float64
	// Seed makes sampling deterministic: the same seed, model and prompt
	// give the same tokens.
	Seed uint64
	// Stop ends generation at any of these tokens (which is not returned).
	Stop []int
	// Autocast, when tensor.BF16 or tensor.F16, runs each step's forward
	// under tensor.Autocast(Autocast), as training with it does: the
	// products take 16-bit inputs with F32 accumulation, each block in
	// a scope of its own, so that the 16-bit copies of F32 weights are
	// one block's at a time. The KV cache is then held in Autocast too
	// (NewKVCacheDType): its keys and values come out of 16-bit
	// products, and it takes half an F32 cache's bytes. A model with
	// F64 weights, which autocast leaves in F64, keeps an F64 cache.
	// The zero value (device.Invalid) computes in the weights' dtype.
	Autocast tensor.DType
}

// Generate continues prompt by n tokens (fewer when a stop token comes)
// and returns them. It runs the prompt once and then one token per step
// through a KV cache, records no graph, and holds, beyond the parameters,
// the cache (KVCacheBytes, in the parameters' dtype or o.Autocast's) and
// one step's activations (under autocast, with one block's 16-bit copies
// of its weights at a time). prompt and n together must fit in the context.
func (g *GPT) Generate(prompt []int, n int, o SampleOptions) ([]int, error) {
	return generate(g, "gpt", g.Config.Context, g.Config.Vocab, g.Tokens.Weight, prompt, n, o)
}

// ContextLen is the longest sequence the model takes (Config.Context).
func (g *GPT) ContextLen() int { return g.Config.Context }

// Generator is a token model that continues prompts: GPT and Decoder.
type Generator interface {
	Model
	// Generate continues prompt by n tokens (fewer at a stop token).
	Generate(prompt []int, n int, o SampleOptions) ([]int, error)
	// ContextLen is the longest sequence: prompt and continuation
	// together.
	ContextLen() int
}

var (
	_ Generator = (*GPT)(nil)
	_ Generator = (*Decoder)(nil)
)

// cachedModel is what generate runs: a model with a KV cache.
type cachedModel interface {
	NewKVCacheDType(batch, maxLen int, dtype tensor.DType) (*KVCache, error)
	ForwardCached(r *nn.Run, tokens *tensor.Tensor, kv *KVCache) *tensor.Tensor
}

// generate is Generate for any cachedModel of the given context and
// vocabulary whose token embedding is emb (its device, and the dtype of
// its weights); errors name model.
func generate(m cachedModel, model string, context, vocab int, emb *tensor.Tensor, prompt []int, n int, o SampleOptions) ([]int, error) {
	switch {
	case len(prompt) == 0:
		return nil, fmt.Errorf("models: %s: generate needs a prompt of at least one token", model)
	case n < 0:
		return nil, fmt.Errorf("models: %s: generate %d tokens", model, n)
	case len(prompt)+n > context:
		return nil, fmt.Errorf("models: %s: a prompt of %d tokens and %d more exceed the context of %d", model, len(prompt), n, context)
	case o.Temperature < 0 || math.IsNaN(o.Temperature) || o.TopK < 0 || o.TopP < 0 || o.TopP > 1 || math.IsNaN(o.TopP):
		return nil, fmt.Errorf("models: %s: sampling with temperature %v, top-k %d, top-p %v (want temperature >= 0, top-k >= 0, 0 <= top-p <= 1)", model, o.Temperature, o.TopK, o.TopP)
	case o.Autocast != device.Invalid && !o.Autocast.IsLowPrecision():
		return nil, fmt.Errorf("models: %s: generate under autocast %v (want bf16 or f16, or none)", model, o.Autocast)
	}
	for i, t := range prompt {
		if t < 0 || t >= vocab {
			return nil, fmt.Errorf("models: %s: prompt token %d is %d, outside the vocabulary [0, %d)", model, i, t, vocab)
		}
	}
	if n == 0 {
		return nil, nil
	}
	dev := emb.Device()
	kv, err := m.NewKVCacheDType(1, len(prompt)+n, kvDType(emb.DType(), o.Autocast))
	if err != nil {
		return nil, err
	}
	defer kv.Release()
	var scope []tensor.ScopeOption
	if o.Autocast != device.Invalid {
		scope = append(scope, tensor.Autocast(o.Autocast))
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6d656d666974)) // "memfit"
	var out []int
	next := prompt
	switchAt := 0 // the length at which cached keys stop holding (longrope)
	if s, ok := m.(interface{ cacheSwitchesAt() int }); ok {
		switchAt = s.cacheSwitchesAt()
	}
	for len(out) < n {
		if switchAt > 0 && kv.len > 0 && kv.len < switchAt && kv.len+len(next) >= switchAt {
			// The whole sequence's frequencies change here: its keys are
			// made again, as a forward of the whole sequence makes them.
			kv.Reset()
			next = append(slices.Clone(prompt), out...)
		}
		var row []float64
		err := tensor.Catch(func() error {
			s := tensor.NewScope(scope...)
			defer s.Close()
			ids := make([]int64, len(next))
			for i, t := range next {
				ids[i] = int64(t)
			}
			tok, err := tensor.FromInt64(dev, ids, []int{1, len(next)}, memory.Data)
			if err != nil {
				return err
			}
			defer tok.Release()
			logits := m.ForwardCached(nn.Eval(s), tok, kv)
			last := s.Narrow(logits, 1, len(next)-1, 1)
			row = last.Float64s()
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("models: %s: generate token %d: %w", model, len(out)+1, err)
		}
		if i := slices.IndexFunc(row, func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }); i >= 0 {
			// Sampling would pick an arbitrary token and print it as if
			// the model had chosen it.
			return out, fmt.Errorf("models: %s: generate token %d: logit %d is %v: the model's weights (or what they compute) are not finite", model, len(out)+1, i, row[i])
		}
		t := sample(row, o, rng)
		if slices.Contains(o.Stop, t) {
			break
		}
		out = append(out, t)
		next = []int{t}
	}
	return out, nil
}

// kvDType is the dtype generation holds its KV cache in: autocast's when
// autocast computes the model's products (its weights are not F64, which
// autocast leaves alone), else the weights'.
func kvDType(weights, autocast tensor.DType) tensor.DType {
	if autocast != device.Invalid && weights != tensor.F64 {
		return autocast
	}
	return weights
}

// sample picks a token from one row of logits.
func sample(logits []float64, o SampleOptions, rng *rand.Rand) int {
	if o.Temperature == 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	// Most likely first; ties by token id, so the order is deterministic.
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	if o.TopK > 0 && o.TopK < len(idx) {
		idx = idx[:o.TopK]
	}
	mx := logits[idx[0]]
	probs := make([]float64, len(idx))
	var sum float64
	for i, id := range idx {
		probs[i] = math.Exp((logits[id] - mx) / o.Temperature)
		sum += probs[i]
	}
	if o.TopP > 0 && o.TopP < 1 {
		var acc float64
		for i := range probs {
			acc += probs[i] / sum
			if acc >= o.TopP {
				idx, probs = idx[:i+1], probs[:i+1]
				break
			}
		}
		sum = 0
		for _, p := range probs {
			sum += p
		}
	}
	u := rng.Float64() * sum
	for i, p := range probs {
		if u < p {
			return idx[i]
		}
		u -= p
	}
	return idx[len(idx)-1]
}
