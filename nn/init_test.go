package nn_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Weights depend on the model seed and the path only: building layers in
// another order gives bit-identical values.
func TestInitIndependentOfOrder(t *testing.T) {
	dev := cpu.New()
	build := func(order []string) map[string][]float32 {
		b := &nn.Builder{Dev: dev, Seed: 42}
		out := map[string][]float32{}
		for _, path := range order {
			l, err := nn.NewLinear(b, path, nn.LinearConfig{In: 8, Out: 5, Bias: nn.Uniform(-1, 1)})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Parameters() {
				out[p.Name()] = p.Float32s()
			}
		}
		b.Abort()
		return out
	}
	a := build([]string{"blocks.0.fc", "blocks.1.fc", "head"})
	z := build([]string{"head", "blocks.1.fc", "blocks.0.fc"})
	for path, v := range a {
		if !slices.Equal(v, z[path]) {
			t.Errorf("%s differs when built in another order", path)
		}
	}
	if slices.Equal(a["blocks.0.fc.weight"], a["blocks.1.fc.weight"]) {
		t.Error("two paths drew the same weights")
	}
	if got := dev.Memory().Stats().Requested.Current; got != 0 {
		t.Errorf("Abort left %d bytes", got)
	}

	// Another model seed, other weights; F64 draws the same numbers.
	b1 := &nn.Builder{Dev: dev, Seed: 1}
	b2 := &nn.Builder{Dev: dev, Seed: 2}
	b3 := &nn.Builder{Dev: dev, Seed: 1, DType: tensor.F64}
	p1, _ := b1.Param("w", []int{16}, nn.Normal(0, 1))
	p2, _ := b2.Param("w", []int{16}, nn.Normal(0, 1))
	p3, _ := b3.Param("w", []int{16}, nn.Normal(0, 1))
	if slices.Equal(p1.Float32s(), p2.Float32s()) {
		t.Error("model seeds 1 and 2 drew the same weights")
	}
	if !slices.Equal(p1.Float32s(), p3.Float32s()) {
		t.Error("an F64 parameter is not the F32 one's draw at higher precision")
	}
	for _, b := range []*nn.Builder{b1, b2, b3} {
		b.Abort()
	}
}

func TestInitDistributions(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 7}
	defer b.Abort()
	moments := func(p *tensor.Tensor) (mean, std, lo, hi float64) {
		v := p.Float64s()
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, x := range v {
			mean += x
			lo, hi = min(lo, x), max(hi, x)
		}
		mean /= float64(len(v))
		for _, x := range v {
			std += (x - mean) * (x - mean)
		}
		return mean, math.Sqrt(std / float64(len(v))), lo, hi
	}
	shape := []int{256, 128, 3, 3} // fan-in 1152, fan-out 2304
	fanIn, fanOut := nn.Fans(shape)
	if fanIn != 1152 || fanOut != 2304 {
		t.Fatalf("fans %d, %d", fanIn, fanOut)
	}
	cases := []struct {
		init     nn.Init
		std      float64
		bound    float64 // uniform: |x| < bound
		constant float64
	}{
		{init: nn.Normal(0, 0.02), std: 0.02},
		{init: nn.GPTResidual(6), std: 0.02 / math.Sqrt(12)},
		{init: nn.KaimingNormal(nn.ReLUGain), std: math.Sqrt(2.0 / 1152)},
		{init: nn.KaimingUniform(1), std: math.Sqrt(1.0 / 1152), bound: math.Sqrt(3.0 / 1152)},
		{init: nn.XavierNormal(1), std: math.Sqrt(2.0 / (1152 + 2304))},
		{init: nn.XavierUniform(1), std: math.Sqrt(2.0 / (1152 + 2304)), bound: math.Sqrt(6.0 / (1152 + 2304))},
		{init: nn.Uniform(-3, 3), std: math.Sqrt(3), bound: 3},
		{init: nn.Constant(0.5), constant: 0.5},
		{init: nn.Ones(), constant: 1},
		{init: nn.Zeros()},
	}
	for _, c := range cases {
		p, err := b.Param(c.init.String(), shape, c.init)
		if err != nil {
			t.Fatal(err)
		}
		mean, std, lo, hi := moments(p)
		switch {
		case c.std == 0:
			if lo != c.constant || hi != c.constant {
				t.Errorf("%v: values in [%g, %g], want all %g", c.init, lo, hi, c.constant)
			}
		default:
			if math.Abs(std-c.std) > 0.02*c.std || math.Abs(mean) > 0.02*c.std {
				t.Errorf("%v: mean %.4g std %.4g, want 0 and %.4g", c.init, mean, std, c.std)
			}
			if c.bound > 0 && (lo < -c.bound || hi >= c.bound) {
				t.Errorf("%v: values in [%g, %g], want inside ±%g", c.init, lo, hi, c.bound)
			}
		}
		if p.Category() != memory.Parameter || !p.RequiresGrad() || p.Name() != c.init.String() {
			t.Errorf("%v: category %v, requires grad %v, name %q", c.init, p.Category(), p.RequiresGrad(), p.Name())
		}
	}
}

func TestNewParameter(t *testing.T) {
	dev := cpu.New()
	p, err := nn.NewParameter(dev, "blocks.3.attn.qkv.weight", []int{6, 2}, nn.XavierUniform(1))
	if err != nil {
		t.Fatal(err)
	}
	b := &nn.Builder{Dev: dev}
	q, _ := b.Param("blocks.3.attn.qkv.weight", []int{6, 2}, nn.XavierUniform(1))
	if p.Name() != "blocks.3.attn.qkv.weight" || p.DType() != tensor.F32 || p.Bytes() != 48 || !slices.Equal(p.Float32s(), q.Float32s()) {
		t.Errorf("NewParameter gave %v", p)
	}
	if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 96 {
		t.Errorf("parameter bytes %d, want 96", got)
	}
	p.Release()
	q.Release()

	for _, c := range []struct {
		path  string
		shape []int
		init  nn.Init
		want  string
	}{
		{"", []int{2}, nn.Zeros(), "empty path"},
		{"w", []int{2, 0}, nn.Zeros(), `"w": dimension 1 of shape [2 0] is 0`},
		{"w", []int{2}, nn.Init{}, "no initialiser"},
	} {
		if _, err := nn.NewParameter(dev, c.path, c.shape, c.init); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewParameter(%q, %v, %v): error %v, want one containing %q", c.path, c.shape, c.init, err, c.want)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev}
	for _, c := range []struct {
		build func() error
		want  string
	}{
		{func() error { _, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 0, Out: 3}); return err }, `linear "fc": In is 0`},
		{func() error { _, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 2, Out: -1}); return err }, `linear "fc": Out is -1`},
		{func() error { _, err := nn.NewConv2d(b, "c", nn.Conv2dConfig{In: 1, Out: 2}); return err }, `conv2d "c": Kernel is 0`},
		{func() error {
			_, err := nn.NewConv2d(b, "c", nn.Conv2dConfig{In: 1, Out: 2, Kernel: 3, Pad: -1})
			return err
		}, `conv2d "c": Pad is -1`},
		{func() error { _, err := nn.NewLayerNorm(b, "ln", 0); return err }, `layer_norm "ln": dim is 0`},
		{func() error {
			_, err := nn.NewConv2d(b, "c", nn.Conv2dConfig{In: 4, Out: 3, Kernel: 3, Groups: 2})
			return err
		}, `conv2d "c": Groups is 2, want >= 0 and dividing In (4) and Out (3)`},
		{func() error { _, err := nn.NewLayerNormShape(b, "ln"); return err }, `layer_norm "ln": shape is empty`},
		{func() error { _, err := nn.NewLayerNormShape(b, "ln", 3, 0); return err }, `layer_norm "ln": dim is 0`},
		{func() error { _, err := nn.NewEmbedding(b, "e", nn.EmbeddingConfig{Num: 5}); return err }, `embedding "e": Dim is 0`},
		{func() error {
			_, err := nn.NewCausalSelfAttention(b, "a", nn.AttentionConfig{Dim: 10, Heads: 3})
			return err
		}, `attention "a": Heads is 3, which does not divide Dim 10`},
		{func() error {
			_, err := nn.NewCausalSelfAttention(b, "a", nn.AttentionConfig{Dim: 4, Heads: 2, Dropout: 1})
			return err
		}, `attention "a": Dropout is 1`},
		{func() error { _, err := nn.NewDropout("d", -0.1); return err }, `dropout "d": P is -0.1`},
	} {
		if err := c.build(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	if got := dev.Memory().Stats().Requested.Current; got != 0 {
		t.Errorf("failed constructors left %d bytes", got)
	}
}
