package optim_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// After one Adam step each model holds exactly 4 bytes of parameter,
// 4 of gradient and 8 of optimizer state per parameter, and nothing else;
// after ZeroGrad (set-to-none) no gradient bytes.
func TestAdamAccountingPerModel(t *testing.T) {
	cases := []struct {
		name  string
		build func(dev *cpu.Device) (nn.Module, *tensor.Tensor, *tensor.Tensor)
	}{
		{"mlp", func(dev *cpu.Device) (nn.Module, *tensor.Tensor, *tensor.Tensor) {
			m, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{20, 32, 32, 5}, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			x, _ := tensor.Full(dev, tensor.F32, []int{8, 20}, 0.5, memory.Data)
			y, _ := tensor.FromInt32(dev, []int32{0, 1, 2, 3, 4, 0, 1, 2}, []int{8}, memory.Data)
			return m, x, y
		}},
		{"cnn", func(dev *cpu.Device) (nn.Module, *tensor.Tensor, *tensor.Tensor) {
			m, err := models.NewCNN(dev, models.CNNConfig{Conv1: 4, Conv2: 8, Hidden: 16, Classes: 10, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			x, _ := tensor.Full(dev, tensor.F32, []int{4, 1, 28, 28}, 0.5, memory.Data)
			y, _ := tensor.FromInt32(dev, []int32{0, 1, 2, 3}, []int{4}, memory.Data)
			return m, x, y
		}},
		{"gpt", func(dev *cpu.Device) (nn.Module, *tensor.Tensor, *tensor.Tensor) {
			m, err := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 8, Vocab: 32, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			x, _ := tensor.Full(dev, tensor.I32, []int{2, 8}, 3, memory.Data)
			y, _ := tensor.Full(dev, tensor.I32, []int{2, 8}, 4, memory.Data)
			return m, x, y
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, x, y := c.build(dev)
			opt, err := optim.NewAdam(m.Parameters(), optim.Adam{LR: 1e-3})
			if err != nil {
				t.Fatal(err)
			}
			err = tensor.Step(func(s *tensor.Scope) error {
				logits := m.Forward(nn.NewRun(s, 1), x)
				v := logits.Shape()[logits.Dim()-1]
				s.CrossEntropy(s.Reshape(logits, -1, v), s.Reshape(y, -1), tensor.CrossEntropyOptions{}).Backward()
				return opt.Step()
			})
			if err != nil {
				t.Fatal(err)
			}
			p := int64(nn.Count(m))
			st := dev.Memory().Stats()
			for _, want := range []struct {
				cat   memory.Category
				bytes int64
			}{{memory.Parameter, 4 * p}, {memory.Gradient, 4 * p}, {memory.OptimizerState, 8 * p}, {memory.Activation, 0}, {memory.Temporary, 0}} {
				if got := st.Category(want.cat).Current; got != want.bytes {
					t.Errorf("%s: %d bytes, want %d (P = %d)", want.cat, got, want.bytes, p)
				}
			}
			opt.ZeroGrad()
			if got := dev.Memory().Stats().Category(memory.Gradient).Current; got != 0 {
				t.Errorf("after ZeroGrad: %d gradient bytes", got)
			}
		})
	}
}
