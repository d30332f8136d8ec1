package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// layerCase is one layer under test: how to build it (with F64
// parameters), the input it takes and the output shape it must give.
type layerCase struct {
	name  string
	build func(b *nn.Builder) (nn.Module, error)
	in    []int
	// kind of input: "" uniform in [-1, 1]; "away" ±[0.2, 1] (no kink of
	// relu nearby); "idx:N" integers in [0, N).
	kind    string
	want    []int
	train   bool // dropout on
	inPlace bool // Run.InPlace
}

func lin(in, out int) func(b *nn.Builder) (nn.Module, error) {
	return func(b *nn.Builder) (nn.Module, error) {
		return nn.NewLinear(b, "fc", nn.LinearConfig{In: in, Out: out, Bias: nn.Normal(0, 0.5)})
	}
}

// loraLin is a Linear layer with a LoRA adapter whose B is moved off zero
// (at zero, A's gradient would be zero too and prove nothing).
func loraLin(in, out, rank int, alpha, dropout float64, then ...nn.Pointwise) func(b *nn.Builder) (nn.Module, error) {
	return func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: in, Out: out, Bias: nn.Normal(0, 0.5)})
		if err != nil {
			return nil, err
		}
		if err := l.AttachLoRA(nn.LoRAConfig{Rank: rank, Alpha: alpha, Dropout: dropout, Seed: 4, DType: b.DType}); err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(7, uint64(out)))
		v := make([]float64, l.Adapter.B.Len())
		for i := range v {
			v[i] = rng.Float64() - 0.5
		}
		if err := l.Adapter.B.SetFloat64s(v); err != nil {
			return nil, err
		}
		if len(then) > 0 {
			return &nn.Fused{Layer: l, Then: then}, nil
		}
		return l, nil
	}
}

func module(m nn.Module) func(*nn.Builder) (nn.Module, error) {
	return func(*nn.Builder) (nn.Module, error) { return m, nil }
}

func mustDropout(p float64) *nn.Dropout {
	d, err := nn.NewDropout("drop", p)
	if err != nil {
		panic(err)
	}
	return d
}

// residualBlock is x + gelu(fc(x)), through nn.Residual.
type residualBlock struct{ fc *nn.Fused }

func (b *residualBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	h := b.fc.Forward(r, x)
	y := nn.Residual(r, h, x)
	h.Release()
	return y
}

func (b *residualBlock) Parameters() []*tensor.Tensor { return b.fc.Parameters() }

// lossModule wraps a loss against fixed targets as a module.
type lossModule struct {
	fn func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor
	y  *tensor.Tensor
}

func (l *lossModule) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	return l.fn(r.Scope, x, l.y)
}
func (l *lossModule) Parameters() []*tensor.Tensor { return nil }

func newLoss(fn func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor, target func(b *nn.Builder) *tensor.Tensor) func(b *nn.Builder) (nn.Module, error) {
	return func(b *nn.Builder) (nn.Module, error) {
		return &lossModule{fn: fn, y: target(b)}, nil
	}
}

func classTargets(n, classes int) func(b *nn.Builder) *tensor.Tensor {
	return func(b *nn.Builder) *tensor.Tensor {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32((i * 7) % classes)
		}
		t, err := tensor.FromInt32(b.Dev, v, []int{n}, memory.Data)
		if err != nil {
			panic(err)
		}
		return t
	}
}

var layerCases = []layerCase{
	{name: "linear", build: lin(4, 3), in: []int{2, 5, 4}, want: []int{2, 5, 3}},
	{name: "linear/no-bias", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewLinear(b, "fc", nn.LinearConfig{In: 4, Out: 2, NoBias: true})
	}, in: []int{3, 4}, want: []int{3, 2}},
	{name: "lora", build: loraLin(4, 3, 2, 6, 0), in: []int{2, 5, 4}, want: []int{2, 5, 3}, inPlace: true},
	{name: "lora/out-of-place", build: loraLin(4, 3, 2, 0, 0), in: []int{3, 4}, want: []int{3, 3}},
	{name: "lora/dropout", build: loraLin(5, 3, 1, 3, 0.3), in: []int{4, 5}, want: []int{4, 3}, train: true, inPlace: true},
	{name: "fused/lora-gelu/in-place", build: loraLin(4, 6, 3, 1, 0, nn.GELU{}), in: []int{3, 4}, want: []int{3, 6}, inPlace: true},
	{name: "conv2d/pad1", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 2, Out: 3, Kernel: 3, Pad: 1, Bias: nn.Normal(0, 0.5)})
	}, in: []int{2, 2, 5, 5}, want: []int{2, 3, 5, 5}},
	{name: "conv2d/stride2-no-bias", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 2, Stride: 2, NoBias: true})
	}, in: []int{1, 1, 6, 6}, want: []int{1, 2, 3, 3}},
	{name: "conv2d/dilation2-groups2", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 4, Out: 2, Kernel: 3, Pad: 2, Dilation: 2, Groups: 2, Bias: nn.Normal(0, 0.5)})
	}, in: []int{1, 4, 5, 6}, want: []int{1, 2, 5, 6}},
	{name: "avg_pool2d/exclude-pad", build: module(&nn.AvgPool2d{Kernel: 3, Stride: 2, Pad: 1, ExcludePad: true}), in: []int{1, 2, 5, 5}, want: []int{1, 2, 3, 3}},
	{name: "layer_norm/shape", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLayerNormShape(b, "ln", 3, 4)
		if err == nil {
			perturb(l.Weight, 0, 0.3)
			perturb(l.Bias, 5, -0.4)
		}
		return l, err
	}, in: []int{2, 3, 4}, want: []int{2, 3, 4}},
	{name: "gelu/exact", build: module(nn.GELU{Exact: true}), in: []int{3, 4}, want: []int{3, 4}},
	{name: "max_pool2d", build: module(&nn.MaxPool2d{Kernel: 2}), in: []int{2, 2, 4, 4}, want: []int{2, 2, 2, 2}},
	{name: "avg_pool2d/stride1", build: module(&nn.AvgPool2d{Kernel: 2, Stride: 1}), in: []int{1, 2, 3, 3}, want: []int{1, 2, 2, 2}},
	{name: "flatten", build: module(nn.Flatten{}), in: []int{2, 3, 2, 2}, want: []int{2, 12}},
	{name: "layer_norm", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLayerNorm(b, "ln", 6)
		if err == nil {
			// Move scale and shift off 1 and 0 so their gradients matter.
			perturb(l.Weight, 0, 0.3)
			perturb(l.Bias, 2, -0.4)
		}
		return l, err
	}, in: []int{2, 3, 6}, want: []int{2, 3, 6}},
	{name: "embedding", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewEmbedding(b, "emb", nn.EmbeddingConfig{Num: 7, Dim: 3})
	}, in: []int{2, 4}, kind: "idx:7", want: []int{2, 4, 3}},
	{name: "relu", build: module(nn.ReLU{}), in: []int{3, 4}, kind: "away", want: []int{3, 4}},
	{name: "gelu", build: module(nn.GELU{}), in: []int{3, 4}, want: []int{3, 4}},
	{name: "tanh", build: module(nn.Tanh{}), in: []int{3, 4}, want: []int{3, 4}},
	{name: "dropout/train", build: module(mustDropout(0.3)), in: []int{4, 8}, want: []int{4, 8}, train: true},
	{name: "dropout/eval", build: module(mustDropout(0.3)), in: []int{4, 8}, want: []int{4, 8}},
	{name: "fused/linear-dropout-relu/in-place", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 5, Out: 6})
		return &nn.Fused{Layer: l, Then: []nn.Pointwise{mustDropout(0.25), nn.ReLU{}}}, err
	}, in: []int{3, 5}, want: []int{3, 6}, train: true, inPlace: true},
	{name: "fused/linear-relu-dropout/in-place", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 5, Out: 6})
		return &nn.Fused{Layer: l, Then: []nn.Pointwise{nn.ReLU{}, mustDropout(0.25)}}, err
	}, in: []int{3, 5}, want: []int{3, 6}, train: true, inPlace: true},
	{name: "fused/linear-gelu-tanh/in-place", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 5, Out: 4})
		return &nn.Fused{Layer: l, Then: []nn.Pointwise{nn.GELU{}, nn.Tanh{}}}, err
	}, in: []int{3, 5}, want: []int{3, 4}, inPlace: true},
	{name: "fused/conv-relu/in-place", build: func(b *nn.Builder) (nn.Module, error) {
		c, err := nn.NewConv2d(b, "conv", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3, Pad: 1, Bias: nn.Normal(0, 0.5)})
		return &nn.Fused{Layer: c, Then: []nn.Pointwise{nn.ReLU{}}}, err
	}, in: []int{2, 1, 4, 4}, want: []int{2, 2, 4, 4}, inPlace: true},
	{name: "residual/in-place", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 4, Out: 4})
		return &residualBlock{fc: &nn.Fused{Layer: l, Then: []nn.Pointwise{nn.GELU{}}}}, err
	}, in: []int{3, 4}, want: []int{3, 4}, inPlace: true},
	{name: "residual/out-of-place", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 4, Out: 4})
		return &residualBlock{fc: &nn.Fused{Layer: l, Then: []nn.Pointwise{nn.GELU{}}}}, err
	}, in: []int{3, 4}, want: []int{3, 4}},
	{name: "attention", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 8, Heads: 2, QKV: nn.Normal(0, 0.5), Proj: nn.Normal(0, 0.5)})
	}, in: []int{2, 4, 8}, want: []int{2, 4, 8}, inPlace: true},
	{name: "attention/out-of-place", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 6, Heads: 3, QKV: nn.Normal(0, 0.5), Proj: nn.Normal(0, 0.5)})
	}, in: []int{1, 5, 6}, want: []int{1, 5, 6}},
	{name: "attention/dropout", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 4, Heads: 1, Dropout: 0.2, QKV: nn.Normal(0, 0.5), Proj: nn.Normal(0, 0.5)})
	}, in: []int{2, 3, 4}, want: []int{2, 3, 4}, train: true, inPlace: true},
	{name: "rms_norm", build: func(b *nn.Builder) (nn.Module, error) {
		l, err := nn.NewRMSNorm(b, "norm", 6, 1e-5)
		if err == nil {
			perturb(l.Weight, 1, 0.3)
		}
		return l, err
	}, in: []int{2, 3, 6}, want: []int{2, 3, 6}},
	{name: "rotary", build: rotaryModule(nn.RotaryConfig{HeadDim: 6, Theta: 10000}, 5), in: []int{2, 2, 3, 6}, want: []int{2, 2, 3, 6}},
	{name: "rotary/llama3", build: rotaryModule(nn.RotaryConfig{HeadDim: 8, Theta: 500000,
		Scaling: nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 64}}, 3), in: []int{1, 2, 4, 8}, want: []int{1, 2, 4, 8}},
	{name: "swiglu", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewGatedMLP(b, "mlp", nn.GatedMLPConfig{Dim: 4, Hidden: 6, Weight: nn.Normal(0, 0.5)})
	}, in: []int{2, 3, 4}, want: []int{2, 3, 4}},
	{name: "gqa", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewGroupedQueryAttention(b, "attn", nn.GQAConfig{Dim: 8, Heads: 4, KVHeads: 2, Rotary: nn.RotaryConfig{HeadDim: 2, Theta: 10000}, Weight: nn.Normal(0, 0.5)})
	}, in: []int{2, 4, 8}, want: []int{2, 4, 8}},
	{name: "gqa/mqa-dropout", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewGroupedQueryAttention(b, "attn", nn.GQAConfig{Dim: 8, Heads: 2, KVHeads: 1, Dropout: 0.2, Rotary: nn.RotaryConfig{HeadDim: 4, Theta: 100}, Weight: nn.Normal(0, 0.5)})
	}, in: []int{2, 3, 8}, want: []int{2, 3, 8}, train: true},
	{name: "gqa/mha", build: func(b *nn.Builder) (nn.Module, error) {
		return nn.NewGroupedQueryAttention(b, "attn", nn.GQAConfig{Dim: 6, Heads: 3, Rotary: nn.RotaryConfig{HeadDim: 2, Theta: 10000}, Weight: nn.Normal(0, 0.5)})
	}, in: []int{1, 5, 6}, want: []int{1, 5, 6}},
	{name: "sequential", build: func(b *nn.Builder) (nn.Module, error) {
		c, err := nn.NewConv2d(b, "layers.0", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3, Pad: 1})
		if err != nil {
			return nil, err
		}
		l, err := nn.NewLinear(b, "layers.3", nn.LinearConfig{In: 8, Out: 3})
		return nn.NewSequential(&nn.Fused{Layer: c, Then: []nn.Pointwise{nn.Tanh{}}}, &nn.MaxPool2d{Kernel: 2}, nn.Flatten{}, l), err
	}, in: []int{2, 1, 4, 4}, want: []int{2, 3}, inPlace: true},
	{name: "sequential/empty", build: module(nn.NewSequential()), in: []int{2, 3}, want: []int{2, 3}},
	{name: "loss/cross_entropy", build: newLoss(func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor {
		return nn.CrossEntropy(s, x, y, nn.LabelSmoothing(0.1), nn.IgnoreIndex(3))
	}, classTargets(6, 5)), in: []int{6, 5}, want: []int{}},
	{name: "loss/cross_entropy/sum", build: newLoss(func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor {
		return nn.CrossEntropy(s, x, y, nn.Reduce(nn.SumReduction))
	}, classTargets(4, 3)), in: []int{4, 3}, want: []int{}},
	{name: "loss/mse", build: newLoss(func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor {
		return nn.MSE(s, x, y, nn.MeanReduction)
	}, randTarget(3, 4)), in: []int{3, 4}, want: []int{}},
	{name: "loss/mse/sum", build: newLoss(func(s *tensor.Scope, x, y *tensor.Tensor) *tensor.Tensor {
		return nn.MSE(s, x, y, nn.SumReduction)
	}, randTarget(3, 4)), in: []int{3, 4}, want: []int{}},
}

// rotaryMod applies rotary embeddings at a fixed starting position.
type rotaryMod struct {
	rope *nn.Rotary
	pos  int
}

func (m rotaryMod) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	return m.rope.Apply(r, x, m.pos)
}
func (rotaryMod) Parameters() []*tensor.Tensor { return nil }

func rotaryModule(c nn.RotaryConfig, pos int) func(*nn.Builder) (nn.Module, error) {
	return func(*nn.Builder) (nn.Module, error) {
		rope, err := nn.NewRotary(c)
		return rotaryMod{rope, pos}, err
	}
}

func randTarget(shape ...int) func(b *nn.Builder) *tensor.Tensor {
	return func(b *nn.Builder) *tensor.Tensor {
		t, err := tensor.Rand(b.Dev, b.DType, shape, device.Uniform, -1, 1, 5, memory.Data)
		if err != nil {
			panic(err)
		}
		return t
	}
}

// perturb adds delta to element j of p, in place, as an optimizer would:
// in a NoGrad scope.
func perturb(p *tensor.Tensor, j int, delta float64) {
	d := make([]float64, p.Len())
	d[j] = delta
	dt, err := tensor.FromFloat64(p.Device(), d, p.Shape(), memory.Temporary)
	if err != nil {
		panic(err)
	}
	s := tensor.NewScope(tensor.NoGrad())
	s.AddInPlace(p, s.Cast(dt, p.DType()))
	s.Close()
	dt.Release()
}

func makeInput(t *testing.T, b *nn.Builder, shape []int, kind string, seed uint64) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 17))
	n := 1
	for _, d := range shape {
		n *= d
	}
	var k int
	if _, err := fmt.Sscanf(kind, "idx:%d", &k); err == nil {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(k))
		}
		x, err := tensor.FromInt32(b.Dev, v, shape, memory.Data)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*rng.Float64() - 1
		if kind == "away" {
			v[i] = math.Copysign(0.2+0.8*math.Abs(v[i]), v[i])
		}
	}
	x, err := tensor.FromFloat64(b.Dev, v, shape, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	return x.SetRequiresGrad(true)
}

// objective is Σ out·w for fixed random w, so every output element's
// gradient is checked with its own weight.
func objective(s *tensor.Scope, out *tensor.Tensor) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(7, 7))
	w := make([]float64, out.Len())
	for i := range w {
		w[i] = 2*rng.Float64() - 1
	}
	wt, err := tensor.FromFloat64(out.Device(), w, out.Shape(), memory.Temporary)
	if err != nil {
		panic(err)
	}
	defer wt.Release()
	p := s.Mul(out, wt)
	defer p.Release()
	return s.Sum(p, false)
}

// TestLayerGradients checks, for every layer: the output shape; that the
// layer releases every temporary (activations return to zero once the
// output is released, before the scope closes), recording or not; and its
// gradients (parameters and input) against central finite differences in
// F64.
func TestLayerGradients(t *testing.T) {
	for _, c := range layerCases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			b := &nn.Builder{Dev: dev, Seed: 3, DType: tensor.F64}
			m, err := c.build(b)
			if err != nil {
				t.Fatal(err)
			}
			x := makeInput(t, b, c.in, c.kind, uint64(len(c.name)))
			run := func(s *tensor.Scope) *nn.Run {
				return &nn.Run{Scope: s, Train: c.train, Seed: 11, InPlace: c.inPlace}
			}
			mem := dev.Memory()
			live := func() int64 {
				st := mem.Stats()
				return st.Category(memory.Activation).Current + st.Category(memory.Temporary).Current
			}
			eval := func() float64 {
				s := tensor.NewScope(tensor.NoGrad())
				defer s.Close()
				out := m.Forward(run(s), x)
				return objective(s, out).Item()
			}

			// Shapes and release-as-you-go, in both modes.
			for _, opts := range [][]tensor.ScopeOption{nil, {tensor.NoGrad()}} {
				s := tensor.NewScope(opts...)
				out := m.Forward(run(s), x)
				if !slices.Equal(out.Shape(), c.want) {
					t.Fatalf("output shape %v, want %v", out.Shape(), c.want)
				}
				out.Release()
				if n := live(); n != 0 {
					t.Errorf("grad=%v: %d activation/temporary bytes alive after releasing the output (before Close)", s.Grad(), n)
				}
				s.Close()
			}

			s := tensor.NewScope()
			loss := objective(s, m.Forward(run(s), x))
			loss.Backward()
			s.Close()
			if n := live(); n != 0 {
				t.Errorf("%d activation/temporary bytes alive after backward and Close", n)
			}

			targets := m.Parameters()
			if x.DType().IsFloat() {
				targets = append(targets, x)
			}
			const h, tol = 1e-6, 1e-6
			for _, p := range targets {
				g := p.Grad()
				if g == nil {
					t.Fatalf("%s got no gradient", p)
				}
				analytic := g.Float64s()
				for j := range analytic {
					perturb(p, j, h)
					up := eval()
					perturb(p, j, -2*h)
					down := eval()
					perturb(p, j, h)
					numeric := (up - down) / (2 * h)
					if diff := math.Abs(numeric - analytic[j]); diff > tol*math.Max(1, math.Abs(numeric)) {
						t.Errorf("%s element %d: analytic %.9g, numeric %.9g", p, j, analytic[j], numeric)
					}
				}
			}
			if lm, ok := m.(*lossModule); ok {
				lm.y.Release()
			}
			nn.Release(m)
			x.Release()
			if got := mem.Stats().Requested.Current; got != 0 {
				t.Errorf("%d bytes still allocated after releasing everything", got)
			}
		})
	}
}
