package tensor_test

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A training step in a Scope: everything the step makes is released when
// it returns, so only the parameter and its gradient remain.
func ExampleStep() {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{3, 4}, device.Normal, 0, 0.1, 1, memory.Parameter)
	w.SetRequiresGrad(true)
	x, _ := tensor.Full(dev, tensor.F32, []int{2, 4}, 1, memory.Data)
	y, _ := tensor.FromInt32(dev, []int32{0, 2}, []int{2}, memory.Data)

	err := tensor.Step(func(s *tensor.Scope) error {
		loss := s.CrossEntropy(s.Linear(x, w, nil), y, tensor.CrossEntropyOptions{})
		loss.Backward()
		return nil
	})
	st := dev.Memory().Stats()
	fmt.Println(err, w.Grad().Shape(), st.Category(memory.Activation).Current, st.Category(memory.Gradient).Current)
	// Output: <nil> [3 4] 0 48
}

// Inference in a NoGrad scope saves nothing for backward: each activation
// is freed as soon as the next op has used it.
func ExampleNoGrad() {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{64, 64}, device.Normal, 0, 0.1, 1, memory.Parameter)
	w.SetRequiresGrad(true)
	x, _ := tensor.Full(dev, tensor.F32, []int{8, 64}, 1, memory.Data)
	for _, opts := range [][]tensor.ScopeOption{nil, {tensor.NoGrad()}} {
		dev.Memory().ResetPeak()
		s := tensor.NewScope(opts...)
		h := x
		for range 10 {
			l := s.Linear(h, w, nil)
			next := s.Relu(l)
			l.Release() // as library layers do: a scope frees at Close only what is left
			if h != x {
				h.Release()
			}
			h = next
		}
		s.Close()
		fmt.Println(dev.Memory().Stats().Category(memory.Activation).Peak)
	}
	// Output:
	// 22528
	// 6144
}

// A gradient-ready hook: data-parallel engines reduce a parameter's
// gradient as soon as backward has finished with it, and may release it
// right away, before backward reaches the layers below.
func ExampleTensor_OnGradReady() {
	dev := cpu.New()
	w1, _ := tensor.Full(dev, tensor.F32, []int{2}, 3, memory.Parameter)
	w2, _ := tensor.Full(dev, tensor.F32, []int{2}, 5, memory.Parameter)
	report := func(w *tensor.Tensor) { fmt.Println(w.Name(), "ready:", w.Grad().Float32s()) }
	w1.SetName("w1").SetRequiresGrad(true).OnGradReady(report)
	w2.SetName("w2").SetRequiresGrad(true).OnGradReady(report)
	tensor.Step(func(s *tensor.Scope) error {
		h := s.Mul(w1, w1)                    // layer 1
		s.Sum(s.Mul(h, w2), false).Backward() // layer 2: its weight is ready first
		return nil
	})
	// Output:
	// w2 ready: [9 9]
	// w1 ready: [30 30]
}
