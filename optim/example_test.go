package optim_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// Minimise (w-3)² with AdamW, freeing the gradient after every step.
func ExampleNewAdamW() {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{0}, []int{1}, memory.Parameter)
	w.SetRequiresGrad(true).SetName("w")
	target, _ := tensor.FromFloat32(dev, []float32{3}, []int{1}, memory.Data)

	opt, err := optim.NewAdamW([]*tensor.Tensor{w}, optim.AdamW{LR: 0.1})
	if err != nil {
		panic(err)
	}
	for range 200 {
		err := tensor.Step(func(s *tensor.Scope) error {
			s.MSE(w, target).Backward()
			return opt.Step()
		})
		if err != nil {
			panic(err)
		}
		opt.ZeroGrad() // set-to-none: the gradient's memory goes back
	}
	st := dev.Memory().Stats()
	fmt.Printf("w = %.2f\n", w.Item())
	fmt.Println("optimizer state:", st.Category(memory.OptimizerState).Current, "bytes")
	fmt.Println("gradients:", st.Category(memory.Gradient).Current, "bytes")
	// Output:
	// w = 3.00
	// optimizer state: 8 bytes
	// gradients: 0 bytes
}

// Two groups: no weight decay for biases, and a schedule shared by both.
func ExampleNewSGD() {
	dev := cpu.New()
	weight, _ := tensor.FromFloat32(dev, []float32{1, 2}, []int{2}, memory.Parameter)
	bias, _ := tensor.FromFloat32(dev, []float32{0}, []int{1}, memory.Parameter)
	opt, err := optim.NewSGD([]*tensor.Tensor{weight}, optim.SGD{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4},
		optim.Group{Params: []*tensor.Tensor{bias}, LR: 0.1})
	if err != nil {
		panic(err)
	}
	if err := opt.SetSchedule(optim.Warmup{Steps: 10}); err != nil {
		panic(err)
	}
	for i, g := range opt.Groups() {
		fmt.Printf("group %d: %d parameter(s), lr %.2f now, weight decay %g\n", i, len(g.Params), opt.LR(i), g.WeightDecay)
	}
	// Output:
	// group 0: 1 parameter(s), lr 0.01 now, weight decay 0.0001
	// group 1: 1 parameter(s), lr 0.01 now, weight decay 0
}

func ExampleWarmupCosine() {
	s := optim.WarmupCosine{Warmup: 100, Total: 1000, Floor: 0.1}
	for _, step := range []int{0, 49, 99, 550, 1000} {
		fmt.Printf("step %4d: %.3f\n", step, s.Factor(step))
	}
	// Output:
	// step    0: 0.010
	// step   49: 0.500
	// step   99: 1.000
	// step  550: 0.550
	// step 1000: 0.100
}

func ExampleClipGradNorm() {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1, 1}, []int{2}, memory.Parameter)
	w.SetRequiresGrad(true)
	g, _ := tensor.FromFloat32(dev, []float32{3, 4}, []int{2}, memory.Gradient)
	w.SetGrad(g)

	norm, err := optim.ClipGradNorm([]*tensor.Tensor{w}, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println("norm before:", norm)
	fmt.Printf("gradient now: %.2f\n", w.Grad().Float64s())
	// Output:
	// norm before: 5
	// gradient now: [0.60 0.80]
}

// A loss-scaled (fp16-style) step: check the gradients, then let the update
// divide them by the loss scale.
func ExampleOptimizer_StepScaled() {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1}, []int{1}, memory.Parameter)
	w.SetRequiresGrad(true)
	const lossScale = 1024
	g, _ := tensor.FromFloat32(dev, []float32{0.5 * lossScale}, []int{1}, memory.Gradient)
	w.SetGrad(g)

	opt, _ := optim.NewSGD([]*tensor.Tensor{w}, optim.SGD{LR: 0.1})
	if opt.GradsFinite() {
		if err := opt.StepScaled(1.0 / lossScale); err != nil {
			panic(err)
		}
	}
	fmt.Printf("w = %.2f\n", w.Item())
	// Output:
	// w = 0.95
}

// Save the optimizer's state and resume it in another optimizer.
func ExampleOptimizer_Export() {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1, 2}, []int{2}, memory.Parameter)
	w.SetRequiresGrad(true).SetName("layer.weight")
	g, _ := tensor.FromFloat32(dev, []float32{0.1, 0.2}, []int{2}, memory.Gradient)
	w.SetGrad(g)
	opt, _ := optim.NewAdam([]*tensor.Tensor{w}, optim.Adam{LR: 1e-3})
	_ = opt.Step()

	st, err := opt.Export()
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"layer.weight.exp_avg", "layer.weight.exp_avg_sq"} {
		fmt.Println(key, st.Tensors[key].Shape)
	}

	resumed, _ := optim.NewAdam([]*tensor.Tensor{w}, optim.Adam{LR: 1e-3})
	if err := resumed.Import(st); err != nil {
		panic(err)
	}
	fmt.Println("resumed at step", resumed.Steps())
	// Output:
	// layer.weight.exp_avg [2]
	// layer.weight.exp_avg_sq [2]
	// resumed at step 1
}

// 8-bit Adam keeps 2 bytes per element plus two F32 scales per block of
// 2048 elements: 2·4096 + 8·2 bytes for a 64×64 weight, against Adam's
// 8·4096.
func ExampleNewAdam8bit() {
	dev := cpu.New()
	w, _ := tensor.Full(dev, tensor.F32, []int{64, 64}, 0.5, memory.Parameter)
	w.SetRequiresGrad(true).SetName("w")
	opt, err := optim.NewAdam8bit([]*tensor.Tensor{w}, optim.Adam8bit{LR: 1e-3})
	if err != nil {
		panic(err)
	}
	err = tensor.Step(func(s *tensor.Scope) error {
		s.Sum(s.Square(w), false).Backward()
		return opt.Step()
	})
	if err != nil {
		panic(err)
	}
	opt.ZeroGrad()
	fmt.Println("optimizer state:", opt.StateBytes(), "bytes;", opt.Buffers())
	// Output:
	// optimizer state: 8208 bytes; [exp_avg_codes exp_avg_sq_codes exp_avg_scale exp_avg_sq_scale]
}

// Adafactor keeps a row and a column of second-moment statistics per
// matrix: (64 + 32)·4 bytes for a 64×32 weight, and the whole second
// moment of a vector.
func ExampleNewAdafactor() {
	dev := cpu.New()
	w, _ := tensor.Full(dev, tensor.F32, []int{64, 32}, 0.5, memory.Parameter)
	b, _ := tensor.Full(dev, tensor.F32, []int{32}, 0, memory.Parameter)
	w.SetRequiresGrad(true).SetName("w")
	b.SetRequiresGrad(true).SetName("b")
	opt, err := optim.NewAdafactor([]*tensor.Tensor{w, b}, optim.Adafactor{LR: 1e-2}) // the paper's relative step
	if err != nil {
		panic(err)
	}
	err = tensor.Step(func(s *tensor.Scope) error {
		s.Add(s.Sum(s.Square(w), false), s.Sum(s.Square(b), false)).Backward()
		return opt.Step()
	})
	if err != nil {
		panic(err)
	}
	opt.ZeroGrad()
	fmt.Println("optimizer state:", opt.StateBytes(), "bytes")
	// Output:
	// optimizer state: 512 bytes
}
