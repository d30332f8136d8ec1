package models_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// ampModel is a GPT or a Llama with what the autocast tests reach into.
type ampModel struct {
	name string
	m    interface {
		models.Generator
		NewKVCacheDType(batch, maxLen int, dtype tensor.DType) (*models.KVCache, error)
		ForwardCached(r *nn.Run, tokens *tensor.Tensor, kv *models.KVCache) *tensor.Tensor
	}
	forward func(r *nn.Run, tokens *tensor.Tensor) *tensor.Tensor
	emb     *tensor.Tensor // token embedding
	head    *tensor.Tensor // LM head weight [Vocab, Dim] (the embedding when tied)
	kvBytes func(batch, maxLen int, dtype tensor.DType) int64
	blocks  []nn.Module
}

func ampModels(t *testing.T, dtype tensor.DType) []ampModel {
	t.Helper()
	g := generationGPT(t, dtype)
	l := generationLlama(t, dtype, false)
	return []ampModel{
		{"gpt", g, g.Forward, g.Tokens.Weight, g.Tokens.Weight, func(b, n int, dt tensor.DType) int64 { return models.KVCacheBytes(g.Config, b, n, dt) }, g.Blocks()},
		{"llama", l, l.Forward, l.Tokens.Weight, l.HeadWeight(), l.Config.KVCacheBytes, l.Blocks()},
	}
}

// lastLogits runs one forward over seq, without a cache, in a no-grad
// scope with opts, and returns the logits of its last position: what
// generation without a cache computes at every token.
func (a ampModel) lastLogits(t *testing.T, seq []int, opts ...tensor.ScopeOption) []float64 {
	t.Helper()
	var row []float64
	s := tensor.NewScope(opts...)
	defer s.Close()
	err := tensor.Catch(func() error {
		tok, err := tokens(a.emb, seq)
		if err != nil {
			return err
		}
		defer tok.Release()
		logits := a.forward(nn.Eval(s), tok)
		row = s.Narrow(logits, 1, len(seq)-1, 1).Float64s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// roundedTo is v rounded to dtype and widened back to F32.
func roundedTo(t *testing.T, v []float32, dtype tensor.DType) []float32 {
	t.Helper()
	x, err := tensor.FromFloat32(cpu.New(), v, []int{len(v)}, memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	if err := x.ConvertTo(dtype); err != nil {
		t.Fatal(err)
	}
	if err := x.ConvertTo(tensor.F32); err != nil {
		t.Fatal(err)
	}
	return x.Float32s()
}

// tieUnder16Bits makes the LM head rows of tokens a < b the prompt's
// two most likely, equal once rounded to dtype but b's larger in F32.
// Row a is m + 2(m - s), where m and s are the rows of the prompt's most
// likely and second most likely tokens (a logit above m's by twice their
// margin), rounded to dtype; row b is row a moved by 2^-12 of each
// element (under half a 16-bit ulp) in the direction that raises b's
// logit. Greedy decoding in F32 then picks b; with the products in dtype
// the two logits are the same number, and it picks a.
func (a ampModel) tieUnder16Bits(t *testing.T, prompt []int, ta, tb int, dtype tensor.DType) {
	t.Helper()
	logits := a.lastLogits(t, prompt)
	order := make([]int, len(logits))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return cmp.Compare(logits[j], logits[i]) })
	w := a.head.Float32s()
	d := a.head.Shape()[1]
	m, s := w[order[0]*d:(order[0]+1)*d], w[order[1]*d:(order[1]+1)*d]
	rowA := make([]float32, d)
	for i := range rowA {
		rowA[i] = m[i] + 2*(m[i]-s[i])
	}
	rowA = roundedTo(t, rowA, dtype)
	copy(w[ta*d:], rowA)
	for sign := float32(1); ; sign = -1 {
		for i, v := range rowA {
			w[tb*d+i] = v + sign*v/4096
		}
		if err := a.head.SetFloat32s(w); err != nil {
			t.Fatal(err)
		}
		if f := a.lastLogits(t, prompt); f[tb] > f[ta] {
			return
		}
		if sign < 0 {
			t.Fatalf("%s: no direction makes token %d's logit larger than %d's", a.name, tb, ta)
		}
	}
}

// Greedy generation under autocast (SampleOptions.Autocast: bf16 or f16,
// f32 weights, the KV cache in the autocast dtype) gives, token for
// token, what a full forward over the growing sequence under the same
// autocast scope gives, and not what f32 gives where the two differ:
// a near tie in the LM head that only 16-bit products see decides the
// first token. Each step's logits through the cache (teacher-forced over
// a fixed sequence) agree with the full forward's.
func TestGenerateAutocastEqualsRecompute(t *testing.T) {
	for _, c := range []struct {
		dtype tensor.DType
		tol   float64 // relative L2 distance of a step's logits
	}{{tensor.BF16, 1e-2}, {tensor.F16, 2e-3}} {
		for _, a := range ampModels(t, tensor.F32) {
			name := fmt.Sprintf("%s/%v", a.name, c.dtype)
			amp := tensor.Autocast(c.dtype)
			prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
			// The tie: tokens that are not in the prompt, so their rows
			// change nothing but the head's logits of its last position.
			ta, tb := 20, 21
			a.tieUnder16Bits(t, prompt, ta, tb, c.dtype)
			if got := argmax(a.lastLogits(t, prompt, amp)); got != ta {
				t.Fatalf("%s: the full forward under autocast picks %d, want the tie's %d", name, got, ta)
			}
			const n = 20
			got, err := a.m.Generate(prompt, n, models.SampleOptions{Autocast: c.dtype})
			if err != nil {
				t.Fatal(err)
			}
			seq := slices.Clone(prompt)
			for range n {
				seq = append(seq, argmax(a.lastLogits(t, seq, amp)))
			}
			if want := seq[len(prompt):]; !slices.Equal(got, want) {
				t.Errorf("%s: greedy tokens under autocast %v, recomputed under autocast %v", name, got, want)
			}
			f32, err := a.m.Generate(prompt, n, models.SampleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if f32[0] != tb || got[0] != ta {
				t.Errorf("%s: first token %d under autocast and %d in f32, want %d and %d (the tie only 16-bit products see)", name, got[0], f32[0], ta, tb)
			}

			// Teacher-forced: the cache's logits at every position.
			fixed := []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7}
			kv, err := a.m.NewKVCacheDType(1, len(fixed), c.dtype)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := range fixed {
				var row []float64
				s := tensor.NewScope(amp)
				err := tensor.Catch(func() error {
					tok, err := tokens(a.emb, fixed[i:i+1])
					if err != nil {
						return err
					}
					defer tok.Release()
					row = a.m.ForwardCached(nn.Eval(s), tok, kv).Float64s()
					return nil
				})
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				worst = max(worst, relDiff(row, a.lastLogits(t, fixed[:i+1], amp)))
			}
			kv.Release()
			if worst > c.tol {
				t.Errorf("%s: cached logits under autocast differ from the full forward's by up to %.2g (> %.2g)", name, worst, c.tol)
			}
		}
	}
}

// Under autocast the KV cache is held in the autocast dtype: exactly
// half an f32 cache's bytes under memory.KVCache, for GPT and Llama.
// The 16-bit copies of f32 weights are one block's at a time, not the
// whole model's. No graph is recorded, and generation leaves nothing
// allocated but the parameters. F64 weights, which autocast leaves in
// F64, keep an F64 cache and F64's tokens.
func TestGenerateAutocastMemory(t *testing.T) {
	prompt := []int{1, 2, 3}
	const n = 25
	for _, c := range []struct {
		weights, autocast, cache tensor.DType
	}{
		{tensor.F32, tensor.BF16, tensor.BF16},
		{tensor.F32, tensor.F16, tensor.F16},
		{tensor.BF16, tensor.BF16, tensor.BF16},
		{tensor.F64, tensor.BF16, tensor.F64},
	} {
		for _, a := range ampModels(t, c.weights) {
			name := fmt.Sprintf("%s/%v weights/autocast %v", a.name, c.weights, c.autocast)
			mem := a.emb.Device().Memory()
			params := mem.Stats().Requested.Current
			mem.ResetPeak()
			got, err := a.m.Generate(prompt, n, models.SampleOptions{Autocast: c.autocast})
			if err != nil {
				t.Fatal(err)
			}
			st := mem.Stats()
			want := a.kvBytes(1, len(prompt)+n, c.cache)
			if kv := st.Category(memory.KVCache).Peak; kv != want {
				t.Errorf("%s: KV cache peak %d bytes, want %d (%v)", name, kv, want, c.cache)
			}
			if c.weights == tensor.F32 {
				if f32 := a.kvBytes(1, len(prompt)+n, tensor.F32); 2*want != f32 {
					t.Errorf("%s: a %v cache of %d bytes is not half the f32 one's %d", name, c.cache, want, f32)
				}
			}
			if c.weights == tensor.F32 {
				// A block's parameters in 16 bits (its norms' too: a bound).
				var block int64
				for _, p := range a.blocks[0].Parameters() {
					block += int64(p.Len()) * int64(c.autocast.Size())
				}
				if tmp := st.Category(memory.Temporary).Peak; tmp > block {
					t.Errorf("%s: temporaries peak at %d bytes, over one block's weights in 16 bits (%d): the step holds several blocks' copies", name, tmp, block)
				}
			}
			if st.Requested.Current != params {
				t.Errorf("%s: after generation %d bytes allocated, want the parameters' %d", name, st.Requested.Current, params)
			}
			if g := st.Category(memory.Gradient).Peak; g != 0 {
				t.Errorf("%s: generation allocated %d bytes of gradients", name, g)
			}
			if c.weights == tensor.F64 {
				plain, err := a.m.Generate(prompt, n, models.SampleOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, plain) {
					t.Errorf("%s: tokens %v, without autocast %v", name, got, plain)
				}
			}
		}
	}
}

func TestGenerateAutocastErrors(t *testing.T) {
	g := generationGPT(t, tensor.F32)
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64, tensor.I64} {
		_, err := g.Generate([]int{1}, 2, models.SampleOptions{Autocast: dt})
		if err == nil || !strings.Contains(err.Error(), "autocast "+dt.String()) {
			t.Errorf("Generate under autocast %v: %v, want an error naming it", dt, err)
		}
	}
	if _, err := g.NewKVCacheDType(1, 4, tensor.I64); err == nil || !strings.Contains(err.Error(), "KV cache in i64") {
		t.Errorf("a KV cache in i64: %v, want an error naming the dtype", err)
	}
	kv, err := g.NewKVCacheDType(1, 4, tensor.BF16)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Release()
	if kv.DType() != tensor.BF16 {
		t.Errorf("NewKVCacheDType(bf16): a cache in %v", kv.DType())
	}
}
