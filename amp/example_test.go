package amp_test

import (
	"fmt"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// An fp16 step: scale the loss, let the scaler unscale, step and adapt.
func ExampleGradScaler() {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1, 2}, []int{2}, memory.Parameter)
	w.SetName("w").SetRequiresGrad(true)
	opt, _ := optim.NewSGD([]*tensor.Tensor{w}, optim.SGD{LR: 0.1})
	scaler, _ := amp.NewGradScalerFor(tensor.F16, amp.ScalerConfig{InitScale: 1024})
	tensor.Step(func(s *tensor.Scope) error {
		loss := s.Sum(s.Square(s.Cast(w, tensor.F16)), false)
		scaler.Scale(s, loss).Backward()
		return nil
	}, tensor.Autocast(tensor.F16))
	stepped, _ := scaler.Step(opt)
	scaler.Update()
	fmt.Println(stepped, w.Float32s(), scaler.LossScale())
	// Output: true [0.8 1.6] 1024
}
