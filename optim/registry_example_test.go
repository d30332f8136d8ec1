package optim_test

import (
	"fmt"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// Optimizers are made by name, as the train command's -optim names them.
func ExampleNew() {
	dev := cpu.New()
	p, _ := tensor.FromFloat32(dev, []float32{1, 2}, []int{2}, memory.Parameter)
	defer p.Release()
	p.SetRequiresGrad(true)
	o, err := optim.New("adamw", []*tensor.Tensor{p}, optim.Settings{LR: 0.1})
	if err != nil {
		panic(err)
	}
	defer o.Release()
	fmt.Println(o.Name(), optim.Names())
	// Output: adamw [adafactor adam adam8bit adamw adamw8bit sgd]
}
