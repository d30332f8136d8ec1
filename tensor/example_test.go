package tensor_test

import (
	"fmt"
	"math"

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

// Causal self-attention as three ops: CausalScores computes only the lower
// triangle of q·kᵀ and fills the rest with −Inf, Softmax turns those into
// zeros, and CausalMatMul skips them, so both products do half the work of
// a masked full product.
func ExampleScope_CausalScores() {
	dev := cpu.New()
	// One head, T = 3 positions, D = 2.
	q, _ := tensor.FromFloat32(dev, []float32{1, 0, 0, 1, 1, 1}, []int{3, 2}, memory.Data)
	v, _ := tensor.FromFloat32(dev, []float32{1, 0, 0, 1, 2, 2}, []int{3, 2}, memory.Data)
	_ = tensor.Step(func(s *tensor.Scope) error {
		scores := s.CausalScores(q, q, 1, math.Inf(-1))
		p := s.Softmax(scores)
		out := s.CausalMatMul(p, v)
		fmt.Printf("%.3f\n%.3f\n", p.Float32s(), out.Float32s())
		return nil
	})
	// Output:
	// [1.000 0.000 0.000 0.269 0.731 0.000 0.212 0.212 0.576]
	// [1.000 0.000 0.269 0.731 1.364 1.364]
}

// ScaledMatMul folds a constant factor into the product instead of a
// separate multiply (and a separate activation) after it.
func ExampleScope_ScaledMatMul() {
	dev := cpu.New()
	a, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4}, []int{2, 2}, memory.Data)
	b, _ := tensor.FromFloat32(dev, []float32{1, 0, 0, 1}, []int{2, 2}, memory.Data)
	_ = tensor.Step(func(s *tensor.Scope) error {
		fmt.Println(s.ScaledMatMul(a, b, 0.5).Float32s())
		return nil
	})
	// Output: [0.5 1 1.5 2]
}

// Causal self-attention straight from a fused projection's output: the
// heads are read inside qkv [B, T, 3·H·D], no [B, H, T, T] tensor exists on
// a device with fused attention kernels, and backward hands the
// projection one [B, T, 3·H·D] gradient.
func ExampleScope_CausalSelfAttention() {
	dev := cpu.New()
	const b, t, heads, d = 2, 5, 3, 4
	qkv, _ := tensor.Rand(dev, tensor.F32, []int{b, t, 3 * heads * d}, device.Normal, 0, 1, 1, memory.Activation)
	qkv.SetRequiresGrad(true)
	err := tensor.Step(func(s *tensor.Scope) error {
		y := s.CausalSelfAttention(qkv, heads, 1/math.Sqrt(d), 0, 0) // [B, H, T, D]
		joined := s.Reshape(s.Permute(y, 0, 2, 1, 3), b, t, heads*d)
		s.Sum(joined, false).Backward()
		fmt.Println(y.Shape(), joined.Shape())
		return nil
	})
	fmt.Println(err, qkv.Grad().Shape())
	// Output:
	// [2 3 5 4] [2 5 12]
	// <nil> [2 5 36]
}
