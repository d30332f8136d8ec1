package tile_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/tile"
)

// lm is a language model whose blocks take a token runner.
type lm interface {
	nn.Model
	nn.TokenTiled
	models.Packed
}

// buildLM makes a small GPT or Llama (grouped-query attention) on dev.
func buildLM(t *testing.T, dev device.Device, kind string, dt tensor.DType) lm {
	t.Helper()
	var m lm
	var err error
	switch kind {
	case "gpt":
		m, err = models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 4, Dim: 32, Context: 4096, Vocab: 61, Seed: 5, DType: dt})
	case "qwen2", "qwen3", "gemma2", "gemma3", "phi3":
		// The families' features, windows and rope switches within the
		// 2304 tokens of a row.
		f := map[string]models.DecoderConfig{
			"qwen2": {Arch: models.Arch{Family: "qwen2", QKVBias: true}, Window: 700, LayerKinds: []models.LayerKind{{}, {Sliding: true}}},
			"qwen3": {Arch: models.Arch{Family: "qwen3", QKNorm: true}, HeadDim: 16},
			"gemma2": {Arch: models.Arch{Family: "gemma2", NormOffset: 1, SandwichNorms: true, Activation: "gelu_tanh", ScaleEmbeddings: true},
				HeadDim: 16, QueryScale: 0.2, AttnSoftcap: 5, FinalSoftcap: 3, Window: 900, LayerKinds: []models.LayerKind{{Sliding: true}, {}}, TiedHead: true},
			"gemma3": {Arch: models.Arch{Family: "gemma3_text", QKNorm: true, NormOffset: 1, SandwichNorms: true, Activation: "gelu_tanh",
				ScaleEmbeddings: true}, HeadDim: 16, Window: 600, LayerKinds: []models.LayerKind{{Sliding: true}, {}}, LocalRopeTheta: 10000,
				RopeTheta: 1e6, RopeScaling: nn.RopeScaling{Type: "linear", Factor: 8}, TiedHead: true},
			"phi3": {Arch: models.Arch{Family: "phi3", FusedQKV: true, FusedGateUp: true}, RotaryDim: 6, RopeScaling: nn.RopeScaling{Type: "longrope",
				Factor: 4, OriginalContext: 1024, ShortFactor: []float64{1, 1.2, 1.5}, LongFactor: []float64{2, 3, 5}}},
		}[kind]
		f.Layers, f.Heads, f.KVHeads, f.Dim, f.Hidden, f.Context, f.Vocab, f.Seed, f.DType = 2, 4, 2, 32, 72, 4096, 61, 5, dt
		m, err = models.NewDecoder(dev, f)
	default:
		m, err = models.NewDecoder(dev, models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 32, Hidden: 72, Context: 4096, Vocab: 61, Seed: 5, DType: dt})
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// adapt attaches LoRA adapters of rank 4 to every Linear layer and draws
// their B (zero at first, which would leave every A's gradient zero).
func adapt(t *testing.T, m lm) {
	t.Helper()
	a, err := lora.Apply(m, nil, lora.Config{Rank: 4, Alpha: 8, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range a.Adapters {
		v := make([]float32, p.Len())
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.05)
		}
		if err := p.SetFloat32s(v); err != nil {
			t.Fatal(err)
		}
	}
}

// batch is rows×cols tokens and their next-token targets, and positions
// that pack examples of 300 to 1200 tokens into each row.
func batch(rows, cols int) (tokens, targets, positions []int32) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range rows {
		p := 0
		n := 300 + rng.IntN(900)
		for range cols {
			tokens = append(tokens, int32(rng.IntN(61)))
			targets = append(targets, int32(rng.IntN(61)))
			if p == n {
				p, n = 0, 300+rng.IntN(900)
			}
			positions = append(positions, int32(p))
			p++
		}
	}
	return tokens, targets, positions
}

// step is one training step's loss and every gradient, as bits.
type step struct {
	loss  uint64
	grads map[string][]uint64
}

// runStep runs one step of m on a batch and returns its loss and the
// trainable parameters' gradients, which it clears.
func runStep(t *testing.T, m lm, rows, cols int, packed bool, autocast tensor.DType) step {
	t.Helper()
	dev := m.Parameters()[0].Device()
	tok, tgt, pos := batch(rows, cols)
	if !packed {
		pos = nil
	}
	x, err := tensor.FromInt32(dev, tok, []int{rows, cols}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	y, err := tensor.FromInt32(dev, tgt, []int{rows, cols}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Release()
	var opts []tensor.ScopeOption
	if autocast != device.Invalid {
		opts = append(opts, tensor.Autocast(autocast))
	}
	var out step
	err = tensor.Step(func(s *tensor.Scope) error {
		l := m.TokenLossPacked(nn.NewRun(s, 11), x, y, pos, tensor.CrossEntropyOptions{})
		l.Backward()
		out.loss = math.Float64bits(l.Item())
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	out.grads = map[string][]uint64{}
	for _, p := range nn.Trainable(m) {
		if p.Grad() == nil {
			t.Fatalf("%s has no gradient", p.Name())
		}
		var bits []uint64
		for _, v := range p.Grad().Float64s() {
			bits = append(bits, math.Float64bits(v))
		}
		out.grads[p.Name()] = bits
		p.SetGrad(nil)
	}
	return out
}

// sameBits fails unless two steps have the same loss and gradients, bit
// for bit.
func sameBits(t *testing.T, got, want step) {
	t.Helper()
	if got.loss != want.loss {
		t.Errorf("loss %v, want %v", math.Float64frombits(got.loss), math.Float64frombits(want.loss))
	}
	if len(got.grads) != len(want.grads) {
		t.Fatalf("%d gradients, want %d", len(got.grads), len(want.grads))
	}
	for name, w := range want.grads {
		g := got.grads[name]
		diff := 0
		first := -1
		for i := range w {
			if g[i] != w[i] {
				if first < 0 {
					first = i
				}
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("%s: %d of %d elements differ; element %d is %v, want %v", name, diff, len(w), first,
				math.Float64frombits(g[first]), math.Float64frombits(w[first]))
		}
	}
}

// A tiled step gives the loss and every gradient of the untiled one, bit
// for bit on the CPU: GPT and Llama, in F32 and under bf16 autocast, with
// and without activation checkpointing, with LoRA adapters (the base
// frozen) or training every parameter, on rows of one sequence or of
// packed examples. 2 rows of 2304 tokens make tiles of 2048 and 2560
// tokens (the last 512 join the tile before), the second crossing from
// one row into the next.
func TestTiledStepIsBitwiseUntiled(t *testing.T) {
	const rows, cols = 2, 2304
	run, err := tile.New(2048)
	if err != nil {
		t.Fatal(err)
	}
	if got := run.Tiles(rows * cols); len(got) != 2 || got[1] != (nn.Rows{Start: 2048, Len: 2560}) {
		t.Fatalf("tiles of %d rows: %v", rows*cols, got)
	}
	for _, kind := range []string{"llama", "gpt"} {
		for _, amp := range []tensor.DType{device.Invalid, tensor.BF16} {
			for _, ckpt := range []bool{false, true} {
				for _, adapters := range []bool{false, true} {
					for _, packed := range []bool{false, true} {
						prec := "f32"
						if amp != device.Invalid {
							prec = "autocast-" + amp.String()
						}
						name := fmt.Sprintf("%s/%s/checkpoint=%v/lora=%v/packed=%v", kind, prec, ckpt, adapters, packed)
						t.Run(name, func(t *testing.T) {
							m := buildLM(t, cpu.New(), kind, tensor.F32)
							defer nn.Release(m)
							if adapters {
								adapt(t, m)
							}
							if ckpt {
								m.SetBlockRunner(checkpoint.Every.Runner())
							}
							want := runStep(t, m, rows, cols, packed, amp)
							if err := m.SetTokenRunner(run); err != nil {
								t.Fatal(err)
							}
							got := runStep(t, m, rows, cols, packed, amp)
							sameBits(t, got, want)
						})
					}
				}
			}
		}
	}
}

// The decoder families' features tile bit for bit too: biases, head
// norms, Gemma's offset and sandwich norms, GeGLU, scaled embeddings,
// soft caps and sliding windows, Phi-3's fused projections, partial
// rotary embeddings and longrope, whose frequencies are the whole
// pass's whatever rows a tile holds (F32 on whole rows, bf16 autocast on
// packed ones; checkpointing and LoRA in both).
func TestTiledFamiliesAreBitwiseUntiled(t *testing.T) {
	const rows, cols = 2, 2304
	run, err := tile.New(2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"qwen2", "qwen3", "gemma2", "gemma3", "phi3"} {
		for _, c := range []struct {
			amp    tensor.DType
			packed bool
		}{{device.Invalid, false}, {tensor.BF16, true}} {
			amp, packed := c.amp, c.packed
			{
				t.Run(fmt.Sprintf("%s/autocast=%v/packed=%v", kind, amp, packed), func(t *testing.T) {
					m := buildLM(t, cpu.New(), kind, tensor.F32)
					defer nn.Release(m)
					adapt(t, m)
					m.SetBlockRunner(checkpoint.Every.Runner())
					want := runStep(t, m, rows, cols, packed, amp)
					if err := m.SetTokenRunner(run); err != nil {
						t.Fatal(err)
					}
					sameBits(t, runStep(t, m, rows, cols, packed, amp), want)
				})
			}
		}
	}
}

// Three tiles, the last one a remainder of its own (2 rows of 3000 tokens:
// 2048, 2048 and 1904), and tiles of 2560 tokens, a multiple of the K
// blocks but not of 1024, give the untiled bits too (bf16 autocast,
// checkpointing, LoRA, packed rows).
func TestTiledStepIsBitwiseUntiledOtherTiles(t *testing.T) {
	for _, tc := range []struct{ tileRows, tiles int }{{2048, 3}, {2560, 2}} {
		for _, kind := range []string{"llama", "gpt"} {
			t.Run(fmt.Sprintf("%s/tile=%d", kind, tc.tileRows), func(t *testing.T) {
				const rows, cols = 2, 3000
				run, err := tile.New(tc.tileRows)
				if err != nil {
					t.Fatal(err)
				}
				if got := run.Tiles(rows * cols); len(got) != tc.tiles {
					t.Fatalf("tiles of %d rows: %v", rows*cols, got)
				}
				m := buildLM(t, cpu.New(), kind, tensor.F32)
				defer nn.Release(m)
				adapt(t, m)
				m.SetBlockRunner(checkpoint.Every.Runner())
				want := runStep(t, m, rows, cols, true, tensor.BF16)
				if err := m.SetTokenRunner(run); err != nil {
					t.Fatal(err)
				}
				sameBits(t, runStep(t, m, rows, cols, true, tensor.BF16), want)
			})
		}
	}
}

// In F64 (the gradient checks' dtype), and through the composed attention
// of a device without fused attention kernels, the tiled step is the
// untiled one bit for bit as well.
func TestTiledStepIsBitwiseUntiledF64AndComposed(t *testing.T) {
	for _, kind := range []string{"llama", "gpt"} {
		for _, composed := range []bool{false, true} {
			dt := tensor.F64
			var dev device.Device = cpu.New()
			if composed {
				dt, dev = tensor.F32, device.Without(dev, device.CapAttention)
			}
			t.Run(fmt.Sprintf("%s/%v/composed=%v", kind, dt, composed), func(t *testing.T) {
				m := buildLM(t, dev, kind, dt)
				defer nn.Release(m)
				want := runStep(t, m, 2, 2304, true, device.Invalid)
				run, err := tile.New(2048)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetTokenRunner(run); err != nil {
					t.Fatal(err)
				}
				sameBits(t, runStep(t, m, 2, 2304, true, device.Invalid), want)
			})
		}
	}
}

// A training step whose token-wise pieces would draw dropout masks fails
// naming the layer, rather than drawing other masks than untiled: a LoRA
// adapter's dropout, or (refused when the runner is set) GPT's.
func TestTiledStepRefusesMasks(t *testing.T) {
	run, err := tile.New(2048)
	if err != nil {
		t.Fatal(err)
	}
	m := buildLM(t, cpu.New(), "llama", tensor.F32)
	defer nn.Release(m)
	if _, err := lora.Apply(m, nil, lora.Config{Rank: 2, Dropout: 0.1, Targets: []string{"*.mlp.up"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetTokenRunner(run); err != nil {
		t.Fatal(err)
	}
	x, err := tensor.FromInt32(m.Parameters()[0].Device(), make([]int32, 64), []int{1, 64}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	err = tensor.Step(func(s *tensor.Scope) error {
		m.TokenLossPacked(nn.NewRun(s, 1), x, x, nil, tensor.CrossEntropyOptions{}).Backward()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "blocks.0: blocks.0.mlp.up's LoRA adapter draws dropout masks inside a token-wise piece") {
		t.Errorf("step with an adapter's dropout in a piece: %v", err)
	}
	g, err := models.NewGPT(cpu.New(), models.GPTConfig{Layers: 1, Heads: 2, Dim: 8, Context: 8, Vocab: 8, Dropout: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	if err := g.SetTokenRunner(run); err == nil || !strings.Contains(err.Error(), "token-wise pieces need Dropout 0") {
		t.Errorf("GPT with dropout took a runner: %v", err)
	}
}
