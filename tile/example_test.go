package tile_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/tile"
)

// Tiles of 2048 rows from the first; a last run of up to 1536 rows joins
// the tile before it.
func ExampleRunner_Tiles() {
	run, _ := tile.New(2048)
	fmt.Println(run.Tiles(1000))
	fmt.Println(run.Tiles(6000))
	fmt.Println(run.Tiles(5000))
	// Output:
	// [{0 1000}]
	// [{0 2048} {2048 2048} {4096 1904}]
	// [{0 2048} {2048 2952}]
}

// A Llama's blocks run their norms, projections and MLP over tiles of
// 2048 tokens: the loss and the gradients are the untiled ones.
func ExampleNew() {
	dev := cpu.New()
	m, _ := models.NewDecoder(dev, models.DecoderConfig{Layers: 1, Heads: 2, Dim: 16, Context: 4096, Vocab: 32, Seed: 1})
	defer nn.Release(m)
	ids := make([]int32, 4096)
	for i := range ids {
		ids[i] = int32(i*7) % 32
	}
	x, _ := tensor.FromInt32(dev, ids, []int{1, 4096}, memory.Data)
	defer x.Release()
	step := func() (loss float64, grad float32) {
		tensor.Step(func(s *tensor.Scope) error {
			l := m.TokenLoss(nn.NewRun(s, 1), x, x, tensor.CrossEntropyOptions{})
			l.Backward()
			loss = l.Item()
			return nil
		})
		w := m.Blocks()[0].(*models.DecoderBlock).MLP.Up.Weight
		grad = w.Grad().Float32s()[0]
		for _, p := range m.Parameters() {
			p.SetGrad(nil)
		}
		return loss, grad
	}
	l0, g0 := step()
	run, _ := tile.New(2048)
	m.SetTokenRunner(run)
	l1, g1 := step()
	fmt.Println(run.Tiles(4096), l1 == l0, g1 == g0)
	// Output: [{0 2048} {2048 2048}] true true
}
