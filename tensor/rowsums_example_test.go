package tensor_test

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A weight's gradient over 4096 rows, computed in two runs of 2048 rows
// whose sums continue one another (SumRows): the same bits as one pass.
func ExampleSumRows() {
	dev := cpu.New()
	x, _ := tensor.Rand(dev, tensor.F32, []int{4096, 8}, device.Normal, 0, 1, 1, memory.Activation)
	w, _ := tensor.Rand(dev, tensor.F32, []int{4, 8}, device.Normal, 0, 1, 2, memory.Parameter)
	defer x.Release()
	defer w.Release()
	w.SetRequiresGrad(true)
	loss := func(s *tensor.Scope, x *tensor.Tensor) { s.Sum(s.Linear(x, w, nil), false).Backward() }

	tensor.Step(func(s *tensor.Scope) error { loss(s, x); return nil })
	whole := w.Grad().Float32s()
	w.SetGrad(nil)

	sums := tensor.NewRowSums([]*tensor.Tensor{w})
	defer sums.Release()
	for _, start := range []int{0, 2048} {
		tensor.Step(func(s *tensor.Scope) error { loss(s, s.Narrow(x, 0, start, 2048)); return nil }, tensor.SumRows(sums))
	}
	g := sums.Gradient(w)
	defer g.Release()
	same := true
	for i, v := range g.Float32s() {
		same = same && v == whole[i]
	}
	fmt.Println(w.Grad() == nil, same)
	// Output: true true
}
