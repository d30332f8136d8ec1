package models_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

func generationLlama(t *testing.T, dtype tensor.DType, scaled bool) *models.Decoder {
	t.Helper()
	c := models.DecoderConfig{Layers: 3, Heads: 4, KVHeads: 2, Dim: 32, Hidden: 40, Context: 40, Vocab: 23, Seed: 7, DType: dtype}
	if scaled {
		c.TiedHead, c.RopeTheta = true, 500000
		c.RopeScaling = nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 16}
	}
	l, err := models.NewDecoder(cpu.New(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(l) })
	return l
}

// llamaLogits runs one forward over seq and returns the logits of its
// last position.
func llamaLogits(t *testing.T, l *models.Decoder, seq []int) []float64 {
	t.Helper()
	var row []float64
	err := tensor.Step(func(s *tensor.Scope) error {
		tok, err := tokens(l.Tokens.Weight, seq)
		if err != nil {
			return err
		}
		defer tok.Release()
		logits := l.Forward(nn.Eval(s), tok)
		row = s.Narrow(logits, 1, len(seq)-1, 1).Float64s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func tokens(like *tensor.Tensor, seq []int) (*tensor.Tensor, error) {
	ids := make([]int64, len(seq))
	for i, v := range seq {
		ids[i] = int64(v)
	}
	return tensor.FromInt64(like.Device(), ids, []int{1, len(seq)}, memory.Data)
}

func relDiff(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		num += (a[i] - b[i]) * (a[i] - b[i])
		den += b[i] * b[i]
	}
	return math.Sqrt(num / den)
}

// Greedy generation through the KV cache (keys cached after rotation,
// KVHeads of them) gives, token for token, what recomputing the whole
// prefix gives, and each new token's logits agree with the recomputed
// ones: rotary embeddings use the absolute positions of cached tokens.
func TestLlamaGenerateWithCacheEqualsRecompute(t *testing.T) {
	for _, c := range []struct {
		name   string
		dtype  tensor.DType
		scaled bool
		tol    float64
	}{{"f64", tensor.F64, false, 1e-12}, {"f32", tensor.F32, false, 1e-5}, {"f64/tied-llama3", tensor.F64, true, 1e-12}} {
		t.Run(c.name, func(t *testing.T) {
			l := generationLlama(t, c.dtype, c.scaled)
			prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
			const n = 20
			got, err := l.Generate(prompt, n, models.SampleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			seq := slices.Clone(prompt)
			for range n {
				seq = append(seq, argmax(llamaLogits(t, l, seq)))
			}
			if want := seq[len(prompt):]; !slices.Equal(got, want) {
				t.Fatalf("cached greedy tokens %v, recomputed %v", got, want)
			}
			kv, err := l.NewKVCache(1, len(seq))
			if err != nil {
				t.Fatal(err)
			}
			defer kv.Release()
			for i := range seq {
				var row []float64
				err := tensor.Step(func(s *tensor.Scope) error {
					tok, err := tokens(l.Tokens.Weight, seq[i:i+1])
					if err != nil {
						return err
					}
					defer tok.Release()
					row = l.ForwardCached(nn.Eval(s), tok, kv).Float64s()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if d := relDiff(row, llamaLogits(t, l, seq[:i+1])); d > c.tol {
					t.Errorf("token %d: cached logits differ from recomputed by %.2g (> %.2g)", i, d, c.tol)
				}
			}
		})
	}
}

// Several tokens after cached ones (the masked path over the cache) give
// the logits of one forward.
func TestLlamaForwardCachedInPieces(t *testing.T) {
	l := generationLlama(t, tensor.F64, false)
	seq := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	kv, err := l.NewKVCache(1, len(seq))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Release()
	var last []float64
	for _, piece := range [][2]int{{0, 4}, {4, 7}, {7, 10}} {
		err := tensor.Step(func(s *tensor.Scope) error {
			tok, err := tokens(l.Tokens.Weight, seq[piece[0]:piece[1]])
			if err != nil {
				return err
			}
			defer tok.Release()
			logits := l.ForwardCached(nn.Eval(s), tok, kv)
			last = s.Narrow(logits, 1, piece[1]-piece[0]-1, 1).Float64s()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if d := relDiff(last, llamaLogits(t, l, seq)); d > 1e-12 {
		t.Errorf("through the cache in pieces: logits differ from one forward by %.2g", d)
	}
}

// The cache holds KVHeads heads per block, counted under memory.KVCache
// at exactly KVCacheBytes; generation leaves only the parameters.
func TestLlamaGenerateMemory(t *testing.T) {
	l := generationLlama(t, tensor.F32, false)
	mem := l.Tokens.Weight.Device().Memory()
	params := mem.Stats().Requested.Current
	kv, err := l.NewKVCache(2, 30)
	if err != nil {
		t.Fatal(err)
	}
	want := l.Config.KVCacheBytes(2, 30, tensor.F32)
	if got := mem.Stats().Category(memory.KVCache).Current; got != want || want != 2*3*2*30*(2*8)*4 {
		t.Errorf("KV cache: %d bytes under kv_cache, KVCacheBytes %d, want 2·layers·batch·len·KVHeads·HeadDim·4 = %d", got, want, 2*3*2*30*(2*8)*4)
	}
	kv.Release()
	if _, err := l.Generate([]int{1, 2, 3}, 25, models.SampleOptions{Temperature: 0.8, TopK: 5, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if st := mem.Stats(); st.Requested.Current != params || st.Category(memory.Gradient).Peak != 0 {
		t.Errorf("after generation %d bytes allocated (parameters %d), %d bytes of gradients at the peak", st.Requested.Current, params, st.Category(memory.Gradient).Peak)
	}
	if _, err := l.Generate([]int{1}, 40, models.SampleOptions{}); err == nil || !strings.Contains(err.Error(), "llama") {
		t.Errorf("generating past the context: %v", err)
	}
}

// TokenLoss (the chunked head) equals CrossEntropy of Forward's logits,
// loss and gradients, with a tied and an untied head.
func TestLlamaTokenLoss(t *testing.T) {
	for _, tied := range []bool{false, true} {
		l, err := models.NewDecoder(cpu.New(), models.DecoderConfig{Layers: 2, Heads: 2, KVHeads: 1, Dim: 16, Context: 8, Vocab: 30, TiedHead: tied, Seed: 3, DType: tensor.F64, HeadChunkRows: 3})
		if err != nil {
			t.Fatal(err)
		}
		x := mustI32(t, l.Tokens.Weight.Device(), []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5)
		y := mustI32(t, l.Tokens.Weight.Device(), []int32{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 2, 5)
		run := func(chunked bool) (float64, [][]float64) {
			var loss float64
			err := tensor.Step(func(s *tensor.Scope) error {
				r := &nn.Run{Scope: s}
				var v *tensor.Tensor
				if chunked {
					v = l.TokenLoss(r, x, y, tensor.CrossEntropyOptions{})
				} else {
					v = nn.CrossEntropy(s, l.Forward(r, x), y)
				}
				v.Backward()
				loss = v.Item()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var grads [][]float64
			for _, p := range l.Parameters() {
				grads = append(grads, p.Grad().Float64s())
				p.SetGrad(nil)
			}
			return loss, grads
		}
		a, ga := run(true)
		b, gb := run(false)
		if math.Abs(a-b) > 1e-12 {
			t.Errorf("tied %v: TokenLoss %v, CrossEntropy(Forward) %v", tied, a, b)
		}
		for i, p := range l.Parameters() {
			if d := relDiff(ga[i], gb[i]); d > 1e-10 {
				t.Errorf("tied %v: gradient of %s differs by %.2g", tied, p.Name(), d)
			}
		}
		x.Release()
		y.Release()
		nn.Release(l)
	}
}

func TestLlamaConfigErrors(t *testing.T) {
	ok := models.DecoderConfig{Layers: 1, Heads: 4, KVHeads: 2, Dim: 16, Context: 8, Vocab: 10}
	dev := cpu.New()
	for _, c := range []struct {
		edit func(*models.DecoderConfig)
		want string
	}{
		{func(c *models.DecoderConfig) { c.Heads = 3 }, "DecoderConfig.Heads is 3"},
		{func(c *models.DecoderConfig) { c.Heads, c.KVHeads = 16, 16 }, "even"},
		{func(c *models.DecoderConfig) { c.KVHeads = 3 }, "DecoderConfig.KVHeads is 3"},
		{func(c *models.DecoderConfig) { c.Vocab = 0 }, "DecoderConfig.Vocab is 0"},
		{func(c *models.DecoderConfig) { c.Hidden = -1 }, "DecoderConfig.Hidden"},
		{func(c *models.DecoderConfig) { c.RopeTheta = 0.5 }, "DecoderConfig.RopeTheta"},
		{func(c *models.DecoderConfig) { c.NormEps = -1 }, "DecoderConfig.NormEps"},
		{func(c *models.DecoderConfig) { c.RopeScaling.Type = "yarn" }, "yarn"},
		{func(c *models.DecoderConfig) { c.Dropout = 1 }, "DecoderConfig.Dropout"},
		{func(c *models.DecoderConfig) { c.DType = tensor.I32 }, "DecoderConfig.DType"},
	} {
		cfg := ok
		c.edit(&cfg)
		l, err := models.NewDecoder(dev, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			if l != nil {
				nn.Release(l)
			}
			t.Errorf("%+v: error %v, want one naming %q", cfg, err, c.want)
		}
	}
	if n := dev.Memory().Stats().Requested.Current; n != 0 {
		t.Errorf("%d bytes left by failed constructors", n)
	}
	l, err := models.NewDecoder(dev, ok)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l)
	if c := l.Config; c.Hidden != 48 || c.RopeTheta != 10000 || c.NormEps != 1e-5 {
		t.Errorf("defaults: Hidden %d (want 8/3·16 rounded up to 8: 48), RopeTheta %v, NormEps %v", c.Hidden, c.RopeTheta, c.NormEps)
	}
	err = tensor.Catch(func() error {
		s := tensor.NewScope()
		defer s.Close()
		x := mustI32(t, dev, make([]int32, 9), 1, 9)
		defer x.Release()
		l.Forward(nn.Eval(s), x)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "context of 8") {
		t.Errorf("9 tokens into a context of 8: %v", err)
	}
}

// BF16 parameters (train -weights bf16) run forward and backward.
func TestLlamaBF16Step(t *testing.T) {
	l, err := models.NewDecoder(cpu.New(), models.DecoderConfig{Layers: 1, Heads: 2, KVHeads: 1, Dim: 16, Context: 8, Vocab: 10, Seed: 1, DType: tensor.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(l)
	x := mustI32(t, l.Tokens.Weight.Device(), []int32{1, 2, 3, 4}, 1, 4)
	defer x.Release()
	err = tensor.Step(func(s *tensor.Scope) error {
		loss := l.TokenLoss(nn.NewRun(s, 1), x, x, tensor.CrossEntropyOptions{})
		loss.Backward()
		if v := loss.Item(); !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("loss %v", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Parameters() {
		if p.Grad() == nil || p.Grad().DType() != tensor.BF16 {
			t.Errorf("%s: gradient %v", p.Name(), p.Grad())
		}
	}
}
