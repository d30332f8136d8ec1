package models_test

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// A custom training loop: a small GPT learns to continue a repeating
// pattern, with plain SGD, and every byte it allocated is given back.
func Example() {
	dev := cpu.New(cpu.Capacity(64 << 20))
	gpt, err := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 32, Context: 8, Vocab: 8, Seed: 1})
	if err != nil {
		panic(err)
	}
	seq := func(from int) []int32 { // 8 tokens of 0 1 2 3 0 1 2 3 … starting at from
		s := make([]int32, 8)
		for i := range s {
			s[i] = int32((from + i) % 4)
		}
		return s
	}
	x, _ := tensor.FromInt32(dev, append(seq(0), seq(2)...), []int{2, 8}, memory.Data)
	y, _ := tensor.FromInt32(dev, append(seq(1), seq(3)...), []int{2, 8}, memory.Data) // the next tokens

	var loss float64
	for step := range 100 {
		err := tensor.Step(func(s *tensor.Scope) error { // releases the step's tensors, returns OOM and shape errors
			l := nn.CrossEntropy(s, gpt.Forward(nn.NewRun(s, uint64(step)), x), y)
			l.Backward() // frees each activation as soon as backward has used it
			loss = l.Item()
			for _, p := range nn.Trainable(gpt) {
				tensor.SGDStep(p, p.Grad(), nil, device.SGDHyper{LR: 0.3})
				p.SetGrad(nil) // set-to-none: the gradient's memory goes back now
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	st := dev.Memory().Stats()
	fmt.Printf("loss below 0.1: %v\nheld between steps: %d parameter bytes (4·%d), %d gradient, %d activation\n", loss < 0.1,
		st.Category(memory.Parameter).Current, nn.Count(gpt), st.Category(memory.Gradient).Current, st.Category(memory.Activation).Current)
	x.Release()
	y.Release()
	nn.Release(gpt)
	fmt.Printf("after releasing model and data: %d bytes\n", dev.Memory().Stats().Requested.Current)
	// Output:
	// loss below 0.1: true
	// held between steps: 103936 parameter bytes (4·25984), 0 gradient, 0 activation
	// after releasing model and data: 0 bytes
}
