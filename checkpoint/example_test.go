package checkpoint_test

import (
	"fmt"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// A model runs its blocks through a policy's runner; with Every, only each
// block's input is kept between forward and backward.
func ExamplePolicy_Runner() {
	dev := cpu.New()
	gpt, _ := models.NewGPT(dev, models.GPTConfig{Layers: 4, Heads: 2, Dim: 32, Context: 16, Vocab: 64, Seed: 1})
	tokens, _ := tensor.Full(dev, tensor.I32, []int{4, 16}, 3, memory.Data)
	peak := func(p checkpoint.Policy) int64 {
		gpt.SetBlockRunner(p.Runner())
		dev.Memory().ResetPeak()
		tensor.Step(func(s *tensor.Scope) error {
			logits := gpt.Forward(nn.NewRun(s, 1), tokens)
			s.Sum(logits, false).Backward()
			return nil
		})
		return dev.Memory().Stats().Category(memory.Activation).Peak
	}
	off, every := peak(checkpoint.Off), peak(checkpoint.Every)
	fmt.Println(every < off/2)
	// Output: true
}
