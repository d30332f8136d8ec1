package models_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// perturb adds delta to element j of p in a NoGrad scope, as an optimizer
// writes parameters.
func perturb(t *testing.T, p *tensor.Tensor, j int, delta float64) {
	d := make([]float64, p.Len())
	d[j] = delta
	dt, err := tensor.FromFloat64(p.Device(), d, p.Shape(), memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	s := tensor.NewScope(tensor.NoGrad())
	s.AddInPlace(p, dt)
	s.Close()
	dt.Release()
}

// Whole models with F64 parameters, in training mode (dropout on, in-place
// ops on): every parameter's gradient of the cross-entropy loss matches
// central finite differences. This checks the composition — GPT's tied
// head, position slice, in-place residuals and dropouts — beyond the
// layers' own checks.
func TestModelGradients(t *testing.T) {
	const h, tol = 1e-6, 1e-6
	cases := []struct {
		name  string
		build func(dev device.Device) (nn.Module, error)
		batch func(dev device.Device) (x, y *tensor.Tensor)
	}{
		{"mlp", func(dev device.Device) (nn.Module, error) {
			return models.NewMLP(dev, models.MLPConfig{Widths: []int{5, 6, 4, 3}, Dropout: 0.2, Seed: 1, DType: tensor.F64})
		}, func(dev device.Device) (x, y *tensor.Tensor) {
			x, _ = tensor.Rand(dev, tensor.F64, []int{4, 5}, device.Normal, 0, 1, 2, memory.Data)
			return x, mustI32(t, dev, []int32{0, 2, 1, 2}, 4)
		}},
		{"cnn", func(dev device.Device) (nn.Module, error) {
			return models.NewCNN(dev, models.CNNConfig{Conv1: 1, Conv2: 2, Hidden: 3, Classes: 2, Dropout: 0.2, Seed: 1, DType: tensor.F64})
		}, func(dev device.Device) (x, y *tensor.Tensor) {
			x, _ = tensor.Rand(dev, tensor.F64, []int{2, 1, 28, 28}, device.Uniform, 0, 1, 2, memory.Data)
			return x, mustI32(t, dev, []int32{1, 0}, 2)
		}},
		{"gpt", func(dev device.Device) (nn.Module, error) {
			return models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 4, Context: 4, Vocab: 5, Dropout: 0.2, Seed: 1, DType: tensor.F64})
		}, func(dev device.Device) (x, y *tensor.Tensor) {
			return mustI32(t, dev, []int32{0, 3, 4, 1, 2, 2}, 2, 3), mustI32(t, dev, []int32{3, 4, 1, 2, 2, 0}, 2, 3)
		}},
		{"llama", func(dev device.Device) (nn.Module, error) {
			return models.NewDecoder(dev, models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 8, Hidden: 6, Context: 4, Vocab: 5, Dropout: 0.2, Seed: 1, DType: tensor.F64})
		}, func(dev device.Device) (x, y *tensor.Tensor) {
			return mustI32(t, dev, []int32{0, 3, 4, 1, 2, 2}, 2, 3), mustI32(t, dev, []int32{3, 4, 1, 2, 2, 0}, 2, 3)
		}},
		{"llama/tied-llama3-rope", func(dev device.Device) (nn.Module, error) {
			return models.NewDecoder(dev, models.DecoderConfig{Layers: 1, Heads: 2, KVHeads: 1, Dim: 8, Hidden: 4, Context: 4, Vocab: 5, TiedHead: true, RopeTheta: 500000,
				RopeScaling: nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 16}, NormEps: 1e-6, Seed: 2, DType: tensor.F64})
		}, func(dev device.Device) (x, y *tensor.Tensor) {
			return mustI32(t, dev, []int32{0, 3, 4, 1}, 1, 4), mustI32(t, dev, []int32{3, 4, 1, 2}, 1, 4)
		}},
	}
	// The decoder families' features, each family on a batch long enough
	// for its windows and rope switches to matter.
	tokens := func(dev device.Device) (x, y *tensor.Tensor) {
		return mustI32(t, dev, []int32{0, 3, 4, 1, 2, 2, 1, 4}, 1, 8), mustI32(t, dev, []int32{3, 4, 1, 2, 2, 0, 4, 1}, 1, 8)
	}
	sliding := []models.LayerKind{{Sliding: true}, {}}
	for _, f := range []struct {
		name string
		cfg  models.DecoderConfig
	}{
		{"qwen3", models.DecoderConfig{Arch: models.Arch{Family: "qwen3", QKNorm: true}, Heads: 2, KVHeads: 1, Dim: 6, HeadDim: 4}},
		{"qwen2-sliding", models.DecoderConfig{Arch: models.Arch{Family: "qwen2", QKVBias: true}, Heads: 2, KVHeads: 1, Dim: 8,
			Window: 3, LayerKinds: sliding}},
		{"gemma2", models.DecoderConfig{Arch: models.Arch{Family: "gemma2", NormOffset: 1, SandwichNorms: true, Activation: "gelu_tanh",
			ScaleEmbeddings: true}, Heads: 2, KVHeads: 1, Dim: 6, HeadDim: 4, QueryScale: 0.3, AttnSoftcap: 0.8, FinalSoftcap: 1.5,
			Window: 3, LayerKinds: sliding, TiedHead: true}},
		{"gemma3", models.DecoderConfig{Arch: models.Arch{Family: "gemma3_text", QKNorm: true, NormOffset: 1, SandwichNorms: true,
			Activation: "gelu_tanh", ScaleEmbeddings: true}, Heads: 2, KVHeads: 1, Dim: 6, HeadDim: 4, QueryScale: 0.4, Window: 3,
			LayerKinds: sliding, LocalRopeTheta: 10000, RopeTheta: 1e6, RopeScaling: nn.RopeScaling{Type: "linear", Factor: 8}, TiedHead: true}},
		{"phi3", models.DecoderConfig{Arch: models.Arch{Family: "phi3", FusedQKV: true, FusedGateUp: true}, Heads: 2, KVHeads: 1, Dim: 8,
			HeadDim: 6, RotaryDim: 4, RopeScaling: nn.RopeScaling{Type: "longrope", Factor: 4, OriginalContext: 4,
				ShortFactor: []float64{1, 1.5}, LongFactor: []float64{2, 3.5}}}},
		{"smollm3", models.DecoderConfig{Arch: models.Arch{Family: "smollm3"}, Heads: 2, KVHeads: 1, Dim: 8,
			LayerKinds: []models.LayerKind{{}, {NoRope: true}}, TiedHead: true}},
	} {
		c := f.cfg
		c.Layers, c.Hidden, c.Context, c.Vocab, c.Dropout, c.Seed, c.DType = 2, 6, 8, 5, 0.2, 1, tensor.F64
		cases = append(cases, struct {
			name  string
			build func(dev device.Device) (nn.Module, error)
			batch func(dev device.Device) (x, y *tensor.Tensor)
		}{f.name, func(dev device.Device) (nn.Module, error) { return models.NewDecoder(dev, c) }, tokens})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, err := c.build(dev)
			if err != nil {
				t.Fatal(err)
			}
			// Move every parameter off its structured initial value (zero
			// biases, unit LayerNorm scales) so every path matters, and so
			// that no ReLU input sits exactly on the kink: with zero
			// biases, a convolution over an all-zero patch (ReLU then
			// pooling make many) is exactly 0, where relu has no
			// derivative and central differences see 1/2.
			for i, p := range m.Parameters() {
				noise, _ := tensor.Rand(dev, p.DType(), p.Shape(), device.Normal, 0, 0.1, uint64(100+i), memory.Temporary)
				s := tensor.NewScope(tensor.NoGrad())
				s.AddInPlace(p, noise)
				s.Close()
				noise.Release()
			}
			x, y := c.batch(dev)
			loss := func(s *tensor.Scope) *tensor.Tensor {
				return nn.CrossEntropy(s, m.Forward(nn.NewRun(s, 3), x), y)
			}
			eval := func() float64 {
				s := tensor.NewScope(tensor.NoGrad())
				defer s.Close()
				return loss(s).Item()
			}
			s := tensor.NewScope()
			loss(s).Backward()
			s.Close()
			for _, p := range m.Parameters() {
				analytic := p.Grad().Float64s()
				for j := range analytic {
					perturb(t, p, j, h)
					up := eval()
					perturb(t, p, j, -2*h)
					down := eval()
					perturb(t, p, j, h)
					numeric := (up - down) / (2 * h)
					if math.Abs(numeric-analytic[j]) > tol*math.Max(1, math.Abs(numeric)) {
						t.Errorf("%s[%d]: analytic %.9g, numeric %.9g", p.Name(), j, analytic[j], numeric)
					}
				}
			}
			x.Release()
			y.Release()
			nn.Release(m)
			if n := dev.Memory().Stats().Requested.Current; n != 0 {
				t.Errorf("%d bytes left", n)
			}
		})
	}
}
