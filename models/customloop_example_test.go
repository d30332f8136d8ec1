package models_test

import (
	"context"
	"fmt"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// The README's custom loop: an MLP trained with AdamW under bf16 autocast
// on the synthetic spirals, one epoch of batches from a data.Loader. Inputs
// must be device tensors: Batch.ToDevice makes them.
func Example_customLoop() {
	dev := cpu.New(cpu.Capacity(256 << 20))
	spirals, err := data.NewSpirals(data.SpiralsConfig{N: 4096, Seed: 1})
	if err != nil {
		panic(err)
	}
	batches, err := data.NewLoader(spirals, data.LoaderConfig{Batch: 64, Shuffle: true, Seed: 1})
	if err != nil {
		panic(err)
	}
	model, err := models.NewMLP(dev, models.MLPConfig{Widths: []int{32, 256, 256, 10}, Seed: 1})
	if err != nil {
		panic(err)
	}
	defer nn.Release(model)
	opt, err := optim.NewAdamW(model.Parameters(), optim.AdamW{LR: 1e-3})
	if err != nil {
		panic(err)
	}
	defer opt.Release()

	var seed uint64 // dropout seed: one per step
	for b, err := range batches.All(context.Background()) {
		if err != nil {
			panic(err)
		}
		err = tensor.Step(func(s *tensor.Scope) error {
			inputs, targets, err := b.ToDevice(dev)
			if err != nil {
				return err
			}
			defer inputs.Release()
			defer targets.Release()
			logits := model.Forward(nn.NewRun(s, seed), inputs)
			s.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{}).Backward()
			return opt.Step()
		}, tensor.Autocast(tensor.BF16))
		if err != nil {
			panic(err)
		}
		opt.ZeroGrad() // frees the gradients (set-to-none)
		seed++
	}
	fmt.Println(seed, "steps; between steps:", dev.Memory().Stats().Requested.Current == 3*4*int64(nn.Count(model)))
	// Output: 64 steps; between steps: true
}
