package tensor_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A frozen weight quantized in place, then used by Linear: the product
// dequantizes it as it reads it, and the input gets its gradient.
func ExampleTensor_ConvertTo_nf4() {
	dev := cpu.New()
	vals := make([]float32, 2*64)
	for i := range vals {
		vals[i] = float32(i%64-32) / 64
	}
	w, _ := tensor.FromFloat32(dev, vals, []int{2, 64}, memory.Parameter)
	defer w.Release()
	if err := w.ConvertTo(tensor.NF4); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(w.DType(), w.Bytes(), "bytes")
	fmt.Printf("%.4f %.4f\n", w.Float32s()[:3], vals[:3])

	ones := make([]float32, 64)
	for i := range ones {
		ones[i] = 1
	}
	x, _ := tensor.FromFloat32(dev, ones, []int{1, 64}, memory.Data)
	defer x.Release()
	x.SetRequiresGrad(true)
	_ = tensor.Step(func(s *tensor.Scope) error {
		y := s.Linear(x, w, nil)
		fmt.Printf("y %.4f\n", y.Float32s())
		s.Sum(y, false).Backward()
		fmt.Printf("dx %.4f\n", x.Grad().Float32s()[:3])
		return nil
	})
	// Output:
	// nf4 1162 bytes
	// [-0.5000 -0.5000 -0.5000] [-0.5000 -0.4844 -0.4688]
	// y [-0.4937 -0.4937]
	// dx [-1.0000 -1.0000 -1.0000]
}
