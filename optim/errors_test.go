package optim_test

import (
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// Bad hyper-parameters are errors naming the field.
func TestBadHyperParameters(t *testing.T) {
	dev := cpu.New()
	ps := []*tensor.Tensor{param(t, dev, "w", p0)}
	nan := math.NaN()
	cases := []struct {
		name string
		err  func() error
		want string
	}{
		{"sgd lr", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: -0.1}); return err }, "SGD.LR = -0.1 is negative"},
		{"sgd lr zero", func() error { _, err := optim.NewSGD(ps, optim.SGD{}); return err }, "SGD.LR is 0"},
		{"sgd lr nan", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: nan}); return err }, "SGD.LR = NaN is not a finite number"},
		{"sgd momentum", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: 1, Momentum: 1}); return err }, "SGD.Momentum = 1 is outside [0, 1)"},
		{"sgd dampening", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: 1, Dampening: -1}); return err }, "SGD.Dampening"},
		{"sgd decay", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: 1, WeightDecay: -1}); return err }, "SGD.WeightDecay = -1 is negative"},
		{"sgd nesterov", func() error { _, err := optim.NewSGD(ps, optim.SGD{LR: 1, Nesterov: true}); return err }, "SGD.Nesterov needs Momentum > 0"},
		{"adam beta1", func() error { _, err := optim.NewAdam(ps, optim.Adam{LR: 1, Beta1: 1}); return err }, "Adam.Beta1 = 1 is outside [0, 1)"},
		{"adam beta2", func() error { _, err := optim.NewAdam(ps, optim.Adam{LR: 1, Beta2: -0.5}); return err }, "Adam.Beta2 = -0.5 is outside [0, 1)"},
		{"adam eps", func() error { _, err := optim.NewAdam(ps, optim.Adam{LR: 1, Eps: -1}); return err }, "Adam.Eps = -1 is negative"},
		{"adamw lr", func() error { _, err := optim.NewAdamW(ps, optim.AdamW{LR: -1}); return err }, "AdamW.LR = -1 is negative"},
		{"adamw beta2", func() error { _, err := optim.NewAdamW(ps, optim.AdamW{LR: 1, Beta2: 1.5}); return err }, "AdamW.Beta2 = 1.5 is outside [0, 1)"},
		{"adamw decay", func() error { _, err := optim.NewAdamW(ps, optim.AdamW{LR: 1, WeightDecay: nan}); return err }, "AdamW.WeightDecay = NaN"},
		{"group lr", func() error {
			_, err := optim.NewAdamW(nil, optim.AdamW{}, optim.Group{Params: ps, LR: -2})
			return err
		}, "groups[0] LR = -2 is negative"},
		{"nil param", func() error { _, err := optim.NewSGD([]*tensor.Tensor{nil}, optim.SGD{LR: 1}); return err }, "parameter 0 is nil"},
		{"twice", func() error { _, err := optim.NewSGD([]*tensor.Tensor{ps[0], ps[0]}, optim.SGD{LR: 1}); return err }, "parameter w is listed twice"},
		{"add params lr", func() error {
			o, _ := optim.NewSGD(nil, optim.SGD{})
			return o.AddParams(-1, ps...)
		}, "AddParams LR = -1 is negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want an error containing %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "optim: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

// Problems found at Step are errors, and leave the parameters alone.
func TestStepErrors(t *testing.T) {
	dev := cpu.New()
	w := param(t, dev, "w", p0)
	opt, err := optim.NewAdam([]*tensor.Tensor{w}, optim.Adam{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	g, err := tensor.FromFloat32(dev, []float32{1, 2}, []int{2}, memory.Gradient)
	if err != nil {
		t.Fatal(err)
	}
	w.SetGrad(g)
	err = opt.Step()
	if err == nil || !strings.Contains(err.Error(), "the gradient of w has shape [2] but the parameter is [3]") {
		t.Fatalf("Step with a misshapen gradient: %v", err)
	}
	w.Release()
	if err := opt.Step(); err == nil || !strings.Contains(err.Error(), "w was released") {
		t.Fatalf("Step with a released parameter: %v", err)
	}
}

// Running out of memory while creating state is an error that leaves
// parameters and state as they were; the step can be retried with room,
// and the update's temporaries stay small.
func TestStepOutOfMemory(t *testing.T) {
	const elems = 1 << 16 // 256 KiB per tensor
	defer optim.SetChunkElems(1 << 12)()
	// Room for parameter, gradient, Adam's two buffers and the step's
	// temporaries (a few chunks of 16 KiB), not for a fifth tensor.
	dev := cpu.New(cpu.Capacity(4*4*elems + 128<<10))
	vals := make([]float32, elems)
	for i := range vals {
		vals[i] = float32(i%7) - 3
	}
	w := param(t, dev, "w", vals)
	gv := make([]float64, elems)
	for i := range gv {
		gv[i] = 0.5
	}
	setGrad(t, w, gv)
	blocker, err := tensor.New(dev, tensor.F32, []int{elems}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewAdam([]*tensor.Tensor{w}, optim.Adam{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	err = opt.Step()
	if !tensor.IsOOM(err) || !strings.Contains(err.Error(), "creating adam state for w") {
		t.Fatalf("Step on a full device: %v", err)
	}
	if opt.Steps() != 0 || opt.StateBytes() != 0 || category(dev, memory.OptimizerState) != 0 {
		t.Error("a failed step left state behind")
	}
	blocker.Release() // reading values back needs room for a copy
	assertClose(t, "parameter after a failed step", w.Float64s(), f64(vals), 0)
	if err := opt.Step(); err != nil {
		t.Fatalf("retry: %v", err)
	}
}
