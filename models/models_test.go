package models_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/internal/goldenfile"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	dev := cpu.New()
	gpt := models.GPTConfig{Layers: 2, Heads: 2, Dim: 8, Context: 4, Vocab: 10}
	with := func(f func(c *models.GPTConfig)) models.GPTConfig { c := gpt; f(&c); return c }
	cnn := models.CNNConfig{Conv1: 2, Conv2: 2, Hidden: 4, Classes: 3}
	for _, c := range []struct {
		build func() error
		want  string
	}{
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Heads = 3 }))
			return err
		}, "GPTConfig.Heads is 3, which does not divide Dim 8"},
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Layers = 0 }))
			return err
		}, "GPTConfig.Layers is 0"},
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Vocab = 0 }))
			return err
		}, "GPTConfig.Vocab is 0"},
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Context = -1 }))
			return err
		}, "GPTConfig.Context is -1"},
		{func() error { _, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Dim = 0 })); return err }, "GPTConfig.Dim is 0"},
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.Dropout = 1 }))
			return err
		}, "GPTConfig.Dropout is 1"},
		{func() error {
			_, err := models.NewGPT(dev, with(func(c *models.GPTConfig) { c.DType = tensor.I32 }))
			return err
		}, "GPTConfig.DType is i32"},
		{func() error { _, err := models.NewGPT(nil, gpt); return err }, "GPTConfig: nil device"},
		{func() error { _, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{4}}); return err }, "MLPConfig.Widths has 1 entries"},
		{func() error { _, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{4, 0, 2}}); return err }, "MLPConfig.Widths[1] is 0"},
		{func() error {
			_, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{4, 2}, Dropout: -1})
			return err
		}, "MLPConfig.Dropout is -1"},
		{func() error { c := cnn; c.Conv2 = 0; _, err := models.NewCNN(dev, c); return err }, "CNNConfig.Conv2 is 0"},
		{func() error { c := cnn; c.Classes = 0; _, err := models.NewCNN(dev, c); return err }, "CNNConfig.Classes is 0"},
	} {
		if err := c.build(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
	// A constructor that fails after allocating releases what it made.
	small := cpu.New(cpu.Capacity(1 << 20))
	_, err := models.NewGPT(small, models.GPTConfig{Layers: 4, Heads: 4, Dim: 128, Context: 64, Vocab: 256})
	if !tensor.IsOOM(err) || !strings.Contains(err.Error(), "models: gpt: nn: parameter") {
		t.Errorf("error %v, want an out-of-memory error naming the parameter", err)
	}
	if got := small.Memory().Stats().Requested.Current; got != 0 {
		t.Errorf("failed constructor left %d bytes", got)
	}
}

// Forward gives the documented shapes, and inputs it cannot use are errors
// at the step boundary.
func TestForwardShapesAndErrors(t *testing.T) {
	dev := cpu.New()
	gpt, _ := models.NewGPT(dev, models.GPTConfig{Layers: 1, Heads: 2, Dim: 8, Context: 6, Vocab: 10, Seed: 1})
	mlp, _ := models.NewMLP(dev, models.MLPConfig{Widths: []int{784, 16, 10}, Seed: 1})
	cnn, _ := models.NewCNN(dev, models.CNNConfig{Conv1: 2, Conv2: 3, Hidden: 8, Classes: 10, Seed: 1})
	defer nn.Release(gpt)
	defer nn.Release(mlp)
	defer nn.Release(cnn)
	var made []*tensor.Tensor
	defer func() {
		for _, x := range made {
			x.Release()
		}
	}()
	// tokens makes [n, steps] ids counting up from first, modulo v.
	tokens := func(n, steps, first, v int) *tensor.Tensor {
		ids := make([]int32, n*steps)
		for i := range ids {
			ids[i] = int32((first + i) % v)
		}
		x := mustI32(t, dev, ids, n, steps)
		made = append(made, x)
		return x
	}
	images, _ := tensor.Rand(dev, tensor.F32, []int{3, 1, 28, 28}, device.Uniform, 0, 1, 1, memory.Data)
	flat, _ := tensor.Rand(dev, tensor.F32, []int{3, 784}, device.Uniform, 0, 1, 1, memory.Data)
	wrong, _ := tensor.Rand(dev, tensor.F32, []int{3, 1, 14, 14}, device.Uniform, 0, 1, 1, memory.Data)
	made = append(made, images, flat, wrong)
	ok := []struct {
		m    nn.Module
		x    *tensor.Tensor
		want []int
	}{
		{gpt, tokens(2, 6, 0, 10), []int{2, 6, 10}},
		{gpt, tokens(3, 1, 0, 10), []int{3, 1, 10}},
		{mlp, images, []int{3, 10}},
		{mlp, flat, []int{3, 10}},
		{cnn, images, []int{3, 10}},
	}
	for _, c := range ok {
		err := tensor.Step(func(s *tensor.Scope) error {
			out := c.m.Forward(nn.Eval(s), c.x)
			if !slices.Equal(out.Shape(), c.want) {
				t.Errorf("%T on %v: output %v, want %v", c.m, c.x, out.Shape(), c.want)
			}
			return nil
		}, tensor.NoGrad())
		if err != nil {
			t.Errorf("%T on %v: %v", c.m, c.x, err)
		}
	}
	bad := []struct {
		m    nn.Module
		x    *tensor.Tensor
		want string
	}{
		{gpt, tokens(2, 7, 0, 10), "gpt: 7 tokens per sequence exceed the context of 6 (GPTConfig.Context)"},
		{gpt, tokens(2, 3, 5, 11), "index 10 at position 5 is outside [0, 10)"},
		{gpt, flat, "gpt: tokens tensor(f32 [3 784]) must be non-empty i32 or i64 [batch, time]"},
		{mlp, wrong, "mlp: input tensor(f32 [3 1 14 14]) must be [batch, 784]"},
		{cnn, flat, "cnn: input tensor(f32 [3 784]) must be [batch, 1, 28, 28]"},
	}
	mem := dev.Memory()
	for _, c := range bad {
		before := mem.Stats().Category(memory.Activation).Current
		err := tensor.Step(func(s *tensor.Scope) error {
			c.m.Forward(nn.NewRun(s, 1), c.x)
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
		st := mem.Stats()
		leak := st.Category(memory.Activation).Current - before
		if _, index := errors.AsType[*device.IndexError](err); index && leak > 0 {
			// tensor.Scope.Embedding allocates its output before the
			// gather that panics and never releases it (reported to the
			// tensor owner).
			t.Logf("known tensor issue: the failed embedding lookup leaked its %d-byte output", leak)
			continue
		}
		if leak != 0 || st.Category(memory.Temporary).Current != 0 {
			t.Errorf("%q: %d activation and %d temporary bytes left by the failed forward", c.want, leak, st.Category(memory.Temporary).Current)
		}
	}
}

// One config gives bit-identical weights every time; another seed others.
func TestSameConfigSameWeights(t *testing.T) {
	dev := cpu.New()
	c := models.GPTConfig{Layers: 2, Heads: 2, Dim: 8, Context: 4, Vocab: 10, Seed: 9}
	a, _ := models.NewGPT(dev, c)
	b, _ := models.NewGPT(dev, c)
	c.Seed = 10
	z, _ := models.NewGPT(dev, c)
	for i, p := range a.Parameters() {
		if !slices.Equal(p.Float32s(), b.Parameters()[i].Float32s()) {
			t.Errorf("%s differs between two builds of one config", p.Name())
		}
		if zp := z.Parameters()[i]; strings.HasSuffix(p.Name(), "weight") && !strings.Contains(p.Name(), "ln") && !strings.Contains(p.Name(), "norm") && slices.Equal(p.Float32s(), zp.Float32s()) {
			t.Errorf("%s is the same under another seed", p.Name())
		}
	}
	for _, m := range []nn.Module{a, b, z} {
		nn.Release(m)
	}
}

// The parameter paths documented in doc.go, with shapes and sizes.
func TestSummaryGolden(t *testing.T) {
	dev := cpu.New()
	gpt, _ := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 4, Dim: 32, Context: 16, Vocab: 64, Seed: 1})
	mlp, _ := models.NewMLP(dev, models.MLPConfig{Widths: []int{784, 128, 10}, Dropout: 0.1, Seed: 1})
	cnn, _ := models.NewCNN(dev, models.CNNConfig{Conv1: 6, Conv2: 16, Hidden: 120, Classes: 10, Seed: 1})
	got := "GPT\n" + nn.Summary(gpt) + "\nMLP\n" + nn.Summary(mlp) + "\nCNN\n" + nn.Summary(cnn)
	goldenfile.Check(t, "summary.golden", got)
	if n := len(gpt.Blocks()); n != 2 {
		t.Errorf("GPT has %d blocks, want 2", n)
	}
	if n := len(cnn.Blocks()); n != 7 {
		t.Errorf("CNN has %d layers, want 7", n)
	}
	for _, m := range []nn.Module{gpt, mlp, cnn} {
		nn.Release(m)
	}
}
