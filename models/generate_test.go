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

func generationGPT(t *testing.T, dtype tensor.DType) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 3, Heads: 4, Dim: 32, Context: 40, Vocab: 23, Seed: 7, DType: dtype})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(g) })
	return g
}

// recompute returns the logits of the last position of seq by a full
// forward: what generation without a cache computes at every token.
func recompute(t *testing.T, g *models.GPT, seq []int) []float64 {
	t.Helper()
	var row []float64
	err := tensor.Step(func(s *tensor.Scope) error {
		ids := make([]int64, len(seq))
		for i, v := range seq {
			ids[i] = int64(v)
		}
		tok, err := tensor.FromInt64(g.Tokens.Weight.Device(), ids, []int{1, len(seq)}, memory.Data)
		if err != nil {
			return err
		}
		defer tok.Release()
		logits := g.Forward(nn.Eval(s), tok)
		row = s.Narrow(logits, 1, len(seq)-1, 1).Float64s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// Greedy generation through the KV cache gives, token for token, what
// recomputing the whole prefix at every token gives, and each step's
// logits agree with the recomputed ones.
func TestGenerateWithCacheEqualsRecompute(t *testing.T) {
	for _, c := range []struct {
		dtype tensor.DType
		tol   float64
	}{{tensor.F64, 1e-12}, {tensor.F32, 1e-5}} {
		g := generationGPT(t, c.dtype)
		prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
		const n = 20
		got, err := g.Generate(prompt, n, models.SampleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seq := slices.Clone(prompt)
		for range n {
			seq = append(seq, argmax(recompute(t, g, seq)))
		}
		if want := seq[len(prompt):]; !slices.Equal(got, want) {
			t.Fatalf("%v: cached greedy tokens %v, recomputed %v", c.dtype, got, want)
		}
		// Step by step: the cached logits of each new token.
		kv, err := g.NewKVCache(1, len(seq))
		if err != nil {
			t.Fatal(err)
		}
		for i := range seq {
			var row []float64
			err := tensor.Step(func(s *tensor.Scope) error {
				tok, err := tensor.FromInt64(g.Tokens.Weight.Device(), []int64{int64(seq[i])}, []int{1, 1}, memory.Data)
				if err != nil {
					return err
				}
				defer tok.Release()
				row = g.ForwardCached(nn.Eval(s), tok, kv).Float64s()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := recompute(t, g, seq[:i+1])
			var num, den float64
			for j := range want {
				num += (row[j] - want[j]) * (row[j] - want[j])
				den += want[j] * want[j]
			}
			if d := math.Sqrt(num / den); d > c.tol {
				t.Errorf("%v token %d: cached logits differ from recomputed by %.2g (> %.2g)", c.dtype, i, d, c.tol)
			}
		}
		kv.Release()
	}
}

// A prompt run through the cache in pieces (several tokens after cached
// ones: the masked path) gives the logits of one forward over it.
func TestForwardCachedInPieces(t *testing.T) {
	g := generationGPT(t, tensor.F64)
	seq := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	kv, err := g.NewKVCache(1, len(seq))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Release()
	var last []float64
	for _, piece := range [][2]int{{0, 4}, {4, 7}, {7, 10}} {
		err := tensor.Step(func(s *tensor.Scope) error {
			ids := make([]int64, 0, piece[1]-piece[0])
			for _, v := range seq[piece[0]:piece[1]] {
				ids = append(ids, int64(v))
			}
			tok, err := tensor.FromInt64(g.Tokens.Weight.Device(), ids, []int{1, len(ids)}, memory.Data)
			if err != nil {
				return err
			}
			defer tok.Release()
			logits := g.ForwardCached(nn.Eval(s), tok, kv)
			last = s.Narrow(logits, 1, len(ids)-1, 1).Float64s()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := recompute(t, g, seq)
	for j := range want {
		if math.Abs(last[j]-want[j]) > 1e-10*(1+math.Abs(want[j])) {
			t.Fatalf("logit %d: %v through the cache in pieces, %v in one forward", j, last[j], want[j])
		}
	}
	if kv.Len() != len(seq) {
		t.Errorf("cache holds %d tokens, want %d", kv.Len(), len(seq))
	}
}

// The cache is counted under memory.KVCache at exactly KVCacheBytes, no
// graph is recorded, and generation leaves nothing allocated but the
// parameters.
func TestGenerateMemory(t *testing.T) {
	g := generationGPT(t, tensor.F32)
	mem := g.Tokens.Weight.Device().Memory()
	params := mem.Stats().Requested.Current
	kv, err := g.NewKVCache(2, 30)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mem.Stats().Category(memory.KVCache).Current, models.KVCacheBytes(g.Config, 2, 30, tensor.F32); got != want {
		t.Errorf("KV cache: %d bytes under kv_cache, want %d", got, want)
	}
	kv.Release()
	mem.ResetPeak()
	prompt := []int{1, 2, 3}
	if _, err := g.Generate(prompt, 25, models.SampleOptions{Temperature: 0.8, TopK: 5, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	st := mem.Stats()
	if st.Requested.Current != params {
		t.Errorf("after generation %d bytes allocated, want the parameters' %d", st.Requested.Current, params)
	}
	if got, want := st.Category(memory.KVCache).Peak, models.KVCacheBytes(g.Config, 1, len(prompt)+25, tensor.F32); got != want {
		t.Errorf("KV cache peak %d bytes, want %d", got, want)
	}
	if n := st.Category(memory.Gradient).Peak; n != 0 {
		t.Errorf("generation allocated %d bytes of gradients", n)
	}
}

// Sampling is deterministic under a seed; top-k 1 is greedy; stop tokens
// end the output.
func TestGenerateSampling(t *testing.T) {
	g := generationGPT(t, tensor.F32)
	prompt := []int{5, 6, 7}
	gen := func(o models.SampleOptions) []int {
		t.Helper()
		out, err := g.Generate(prompt, 15, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	hot := models.SampleOptions{Temperature: 1.5, TopP: 0.95, Seed: 11}
	a, b := gen(hot), gen(hot)
	if !slices.Equal(a, b) {
		t.Errorf("the same seed sampled %v, then %v", a, b)
	}
	other := hot
	other.Seed = 12
	if c := gen(other); slices.Equal(a, c) {
		t.Errorf("seeds 11 and 12 sampled the same %v", a)
	}
	greedy := gen(models.SampleOptions{})
	if k1 := gen(models.SampleOptions{Temperature: 1, TopK: 1, Seed: 5}); !slices.Equal(k1, greedy) {
		t.Errorf("top-k 1 sampled %v, greedy %v", k1, greedy)
	}
	stop := gen(models.SampleOptions{Stop: []int{greedy[3]}})
	if want := greedy[:slices.Index(greedy, greedy[3])]; !slices.Equal(stop, want) {
		t.Errorf("with stop token %d: %v, want %v", greedy[3], stop, want)
	}
}

func TestGenerateErrors(t *testing.T) {
	g := generationGPT(t, tensor.F32)
	for _, c := range []struct {
		prompt []int
		n      int
		o      models.SampleOptions
		want   string
	}{
		{nil, 3, models.SampleOptions{}, "prompt"},
		{[]int{1}, 40, models.SampleOptions{}, "context of 40"},
		{[]int{1, 23}, 2, models.SampleOptions{}, "prompt token 1 is 23"},
		{[]int{1}, 2, models.SampleOptions{Temperature: -1}, "temperature"},
		{[]int{1}, 2, models.SampleOptions{TopP: 1.5}, "top-p"},
	} {
		if _, err := g.Generate(c.prompt, c.n, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%v, %d, %+v): %v, want an error saying %q", c.prompt, c.n, c.o, err, c.want)
		}
	}
}

// TestGenerateRefusesNonFiniteLogits: a model whose weights hold NaN
// fails to generate, naming the token, instead of printing whatever
// sampling picks from NaN logits.
func TestGenerateRefusesNonFiniteLogits(t *testing.T) {
	g, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 1, Heads: 2, Dim: 8, Context: 8, Vocab: 11, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	w := g.Parameters()[0]
	vals := w.Float32s()
	vals[3] = float32(math.NaN())
	if err := w.SetFloat32s(vals); err != nil {
		t.Fatal(err)
	}
	_, err = g.Generate([]int{3, 1}, 4, models.SampleOptions{})
	if err == nil || !strings.Contains(err.Error(), "generate token 1") || !strings.Contains(err.Error(), "not finite") {
		t.Fatalf("Generate over NaN weights: %v, want an error naming token 1", err)
	}
}
