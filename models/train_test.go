package models_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Each model learns a synthetic task: with a fixed seed the mean loss of
// the last ten steps falls below a stated threshold within a stated number
// of plain SGD steps.
func TestModelsLearn(t *testing.T) {
	cases := []struct {
		name      string
		build     func(dev *cpu.Device) (nn.Module, error)
		batch     func(t *testing.T, dev *cpu.Device) batchFunc
		steps     int
		lr        float64
		threshold float64
	}{
		{
			name: "mlp/gaussian-clusters",
			build: func(dev *cpu.Device) (nn.Module, error) {
				return models.NewMLP(dev, models.MLPConfig{Widths: []int{8, 32, 32, 4}, Dropout: 0.1, Seed: 1})
			},
			batch: func(t *testing.T, dev *cpu.Device) batchFunc {
				rng := rand.New(rand.NewPCG(1, 2))
				centres := randomCentres(rng, 4, 8)
				return func(int) (x, y *tensor.Tensor) { return clusters(t, dev, rng, centres, 64) }
			},
			steps: 150, lr: 0.1, threshold: 0.1,
		},
		{
			name: "cnn/bright-square-quadrant",
			build: func(dev *cpu.Device) (nn.Module, error) {
				return models.NewCNN(dev, models.CNNConfig{Conv1: 4, Conv2: 8, Hidden: 32, Classes: 4, Seed: 1})
			},
			batch: func(t *testing.T, dev *cpu.Device) batchFunc {
				rng := rand.New(rand.NewPCG(3, 4))
				return func(int) (x, y *tensor.Tensor) { return squares(t, dev, rng, 32) }
			},
			steps: 30, lr: 0.05, threshold: 0.1,
		},
		{
			name: "gpt/repeating-pattern",
			build: func(dev *cpu.Device) (nn.Module, error) {
				return models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 32, Context: 16, Vocab: 16, Dropout: 0.1, Seed: 1})
			},
			batch: func(t *testing.T, dev *cpu.Device) batchFunc {
				rng := rand.New(rand.NewPCG(5, 6))
				pattern := []int32{3, 14, 7, 0, 11, 5, 9, 2}
				return func(int) (x, y *tensor.Tensor) { return cycle(t, dev, rng, pattern, 8, 16) }
			},
			steps: 120, lr: 0.3, threshold: 0.05 * math.Log(16), // ln(16) = 2.77: chance
		},
		{
			name: "llama/repeating-pattern",
			build: func(dev *cpu.Device) (nn.Module, error) {
				return models.NewDecoder(dev, models.DecoderConfig{Layers: 2, Heads: 4, KVHeads: 2, Dim: 32, Context: 16, Vocab: 16, Seed: 1})
			},
			batch: func(t *testing.T, dev *cpu.Device) batchFunc {
				rng := rand.New(rand.NewPCG(5, 6))
				pattern := []int32{3, 14, 7, 0, 11, 5, 9, 2}
				return func(int) (x, y *tensor.Tensor) { return cycle(t, dev, rng, pattern, 8, 16) }
			},
			steps: 120, lr: 0.3, threshold: 0.05 * math.Log(16),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, err := c.build(dev)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			losses := train(t, m, c.steps, c.lr, c.batch(t, dev))
			last := 0.0
			for _, l := range losses[len(losses)-10:] {
				last += l / 10
			}
			t.Logf("loss %.4f at the first step, %.4f over the last ten of %d (%v)", losses[0], last, c.steps, time.Since(start).Round(time.Millisecond))
			if last >= c.threshold {
				for i := 0; i < len(losses); i += len(losses) / 10 {
					t.Logf("  step %3d: %.4f", i, losses[i])
				}
				t.Errorf("mean loss of the last ten steps %.4f, want < %.4f", last, c.threshold)
			}
			nn.Release(m)
			if n := dev.Memory().Stats().Requested.Current; n != 0 {
				t.Errorf("%d bytes (%v) left after releasing the model", n, dev.Memory().Stats().ByCategory)
			}
		})
	}
}
