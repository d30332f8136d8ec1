package tensor_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// MulAs rounds an F32 product to bf16 as it writes it, where Mul and Cast
// would write it in F32 and then convert it; the gradients of the F32
// operands come back in F32, not rounded to bf16 on their way.
func ExampleScope_MulAs() {
	dev := cpu.New()
	x, _ := tensor.FromFloat32(dev, []float32{1.001, 2, 3}, []int{3}, memory.Data)
	w, _ := tensor.FromFloat32(dev, []float32{1, 1.5, 1.0001}, []int{3}, memory.Parameter)
	w.SetRequiresGrad(true)
	err := tensor.Step(func(s *tensor.Scope) error {
		y := s.MulAs(x, w, tensor.BF16)
		fmt.Println(y.DType(), y.Float32s())
		s.Sum(y, false).Backward()
		return nil
	})
	fmt.Println(err, w.Grad().DType(), w.Grad().Float32s())
	// Output:
	// bf16 [1 3 3]
	// <nil> f32 [1.001 2 3]
}
