package offload_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// A custom loop with activations and optimizer state in host memory: the
// hooks go on the step's scope, the runner on the model, and the
// optimizer is built over the host copies of the parameters.
func Example() {
	dev, host := cpu.New(), cpu.New() // host: a CPU device with its own allocator
	model, _ := models.NewGPT(dev, models.GPTConfig{Layers: 4, Heads: 2, Dim: 32, Context: 16, Vocab: 64, Seed: 1})

	acts, _ := offload.NewActivations(host, 0)
	model.SetBlockRunner(acts.Runner(nil)) // or acts.Runner(checkpoint.Sqrt.Runner())
	off, _ := offload.NewOptimizer(host, model.Parameters())
	defer off.Release()
	opt, _ := optim.New("adamw", off.Masters(), optim.Settings{LR: 1e-3})
	defer opt.Release()

	toks := make([]int32, 2*16)
	for i := range toks {
		toks[i] = int32(i % 64)
	}
	x, _ := tensor.FromInt32(dev, toks, []int{2, 16}, memory.Data)
	y, _ := tensor.FromInt32(dev, toks, []int{32}, memory.Data)
	defer x.Release()
	defer y.Release()
	err := tensor.Step(func(s *tensor.Scope) error {
		logits := model.Forward(nn.NewRun(s, 1), x)
		flat := s.Reshape(logits, -1, 64)
		loss := s.CrossEntropy(flat, y, tensor.CrossEntropyOptions{})
		flat.Release()
		logits.Release()
		loss.Backward()
		return off.Step(opt.Step) // gradients to the host, update there, parameters back
	}, tensor.SaveHooks(acts))
	fmt.Println("step:", err)

	d, h := dev.Memory().Stats(), host.Memory().Stats()
	fmt.Println("device optimizer state:", d.Category(memory.OptimizerState).Current)
	fmt.Println("host optimizer state = 2 × parameters:", h.Category(memory.OptimizerState).Current == 2*d.Category(memory.Parameter).Current)
	fmt.Println("activations saved on the host, none left:", h.Category(memory.Activation).Peak > 0, h.Category(memory.Activation).Current == 0)
	// Output:
	// step: <nil>
	// device optimizer state: 0
	// host optimizer state = 2 × parameters: true
	// activations saved on the host, none left: true true
}

// The update overlapped with backward: Arm before backward, Finish after
// it. The first armed step counts when each gradient completes and
// updates after backward; from the second on, each parameter's update
// runs on the host while backward goes on with the earlier layers.
func ExampleOptimizer_Arm() {
	dev, host := cpu.New(), cpu.New()
	model, _ := models.NewGPT(dev, models.GPTConfig{Layers: 2, Heads: 2, Dim: 32, Context: 16, Vocab: 64, Seed: 1})
	off, _ := offload.NewOptimizer(host, model.Parameters())
	defer off.Release()
	opt, _ := optim.New("adamw", off.Masters(), optim.Settings{LR: 1e-3})
	defer opt.Release()

	toks := make([]int32, 2*16)
	for i := range toks {
		toks[i] = int32(i % 64)
	}
	x, _ := tensor.FromInt32(dev, toks, []int{2, 16}, memory.Data)
	y, _ := tensor.FromInt32(dev, toks, []int{32}, memory.Data)
	defer x.Release()
	defer y.Release()
	for range 3 {
		err := tensor.Step(func(s *tensor.Scope) error {
			logits := model.Forward(nn.NewRun(s, 1), x)
			loss := s.CrossEntropy(s.Reshape(logits, -1, 64), y, tensor.CrossEntropyOptions{})
			if err := off.Arm(opt); err != nil { // reserves the host's gradients
				return err
			}
			loss.Backward() // hands each gradient over as it completes
			return off.Finish()
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	st := off.OverlapStats()
	fmt.Println("armed steps:", st.Steps)
	fmt.Println("updates during backward:", st.Background, "of", 2*int64(len(off.Params())))
	fmt.Println("gradients left on the device:", dev.Memory().Stats().Category(memory.Gradient).Current)
	// Output:
	// armed steps: 3
	// updates during backward: 56 of 56
	// gradients left on the device: 0
}
