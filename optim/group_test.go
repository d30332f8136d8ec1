package optim_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// adamCounter counts how an optimizer reaches a device's Adam kernels:
// group calls (device.AdamSteps) and single ones (device.AdamStep).
type adamCounter struct {
	device.Device
	groups, singles int
}

func (a *adamCounter) AdamStep(param, grad, m, v device.View, h device.AdamHyper) {
	a.singles++
	device.AdamStep(a.Device, param, grad, m, v, h)
}

func (a *adamCounter) AdamSteps(params, grads, ms, vs []device.View, h device.AdamHyper) {
	a.groups++
	device.AdamSteps(a.Device, params, grads, ms, vs, h)
}

// trainAdam runs three steps of name ("adam" or "adamw") on dev: two
// groups of parameters of several sizes (one of one element, one BF16),
// one without a gradient at the first step, one added at the third (so
// that parameters of one group differ in their update counts), a
// gradient scale; it returns the parameters' values and the exported
// state.
func trainAdam(t *testing.T, dev device.Device, name string) ([][]float64, optim.State) {
	t.Helper()
	mk := func(dt tensor.DType, pname string, shape ...int) *tensor.Tensor {
		p, err := tensor.New(dev, dt, shape, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Release)
		vals := make([]float32, p.Len())
		for i := range vals {
			vals[i] = float32(math.Sin(float64(i+len(pname)*7)) * 0.5)
		}
		if err := p.SetFloat32s(vals); err != nil {
			t.Fatal(err)
		}
		return p.SetName(pname).SetRequiresGrad(true)
	}
	a, b, c := mk(tensor.F32, "a", 3, 5), mk(tensor.F32, "b", 7), mk(tensor.F32, "c", 1)
	d, e, f := mk(tensor.F32, "d", 384), mk(tensor.BF16, "e", 33), mk(tensor.F32, "f", 2, 1000)
	late := mk(tensor.F32, "late", 9)
	groups := []optim.Group{{Params: []*tensor.Tensor{a, b, c}, LR: 1e-2, WeightDecay: 0.1}, {Params: []*tensor.Tensor{d, e, f}, LR: 3e-3}}
	var o *optim.Optimizer
	var err error
	if name == "adamw" {
		o, err = optim.NewAdamW(nil, optim.AdamW{LR: 1e-2, WeightDecay: 0.1}, groups...)
	} else {
		o, err = optim.NewAdam(nil, optim.Adam{LR: 1e-2, WeightDecay: 0.1}, groups...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Release)
	for step := range 3 {
		if step == 2 {
			if err := o.AddParams(2e-3, late); err != nil {
				t.Fatal(err)
			}
		}
		for k, p := range o.Params() {
			if step == 0 && p == c {
				continue
			}
			g := make([]float32, p.Len())
			for i := range g {
				g[i] = float32(math.Cos(float64(i*3+k+step*11)) * 0.1)
			}
			gt, err := tensor.New(dev, p.DType(), p.Shape(), memory.Gradient)
			if err != nil {
				t.Fatal(err)
			}
			if err := gt.SetFloat32s(g); err != nil {
				t.Fatal(err)
			}
			p.SetGrad(gt)
		}
		if err := o.StepScaled([]float64{1, 0.5, 0.25}[step]); err != nil {
			t.Fatal(err)
		}
		o.ZeroGrad()
	}
	var vals [][]float64
	for _, p := range o.Params() {
		vals = append(vals, p.Float64s())
	}
	st, err := o.Export()
	if err != nil {
		t.Fatal(err)
	}
	return vals, st
}

// checkGroupedAdam trains on base with the group kernel and without it
// (one update per parameter): parameters and state must be the same
// bits, the updates must go to the device as one call per group of
// parameters that share a learning rate, decay and update count, and
// none alone.
func checkGroupedAdam(t *testing.T, base device.Device) {
	for _, name := range []string{"adam", "adamw"} {
		t.Run(name, func(t *testing.T) {
			grouped := &adamCounter{Device: base}
			gotVals, gotState := trainAdam(t, grouped, name)
			alone := &adamCounter{Device: base}
			wantVals, wantState := trainAdam(t, device.Without(alone, device.CapAdamGroupStep), name)
			// Step 1: [a b], [d e f]; step 2: [a b], [c], [d e f];
			// step 3: [a b], [c], [d e f], [late]. Alone: one each.
			if grouped.groups != 9 || grouped.singles != 0 {
				t.Errorf("grouped: %d group and %d single calls, want 9 and 0", grouped.groups, grouped.singles)
			}
			if alone.groups != 0 || alone.singles != 5+6+7 {
				t.Errorf("alone: %d group and %d single calls, want 0 and %d", alone.groups, alone.singles, 5+6+7)
			}
			for i := range wantVals {
				if !sameBits(gotVals[i], wantVals[i]) {
					t.Errorf("parameter %d: grouped %v, alone %v", i, gotVals[i][:min(4, len(gotVals[i]))], wantVals[i][:min(4, len(wantVals[i]))])
				}
			}
			for k, w := range wantState.Tensors {
				g := gotState.Tensors[k]
				if !slices.Equal(g.Shape, w.Shape) || !sameBits(f64(g.Data), f64(w.Data)) {
					t.Errorf("state %s differs", k)
				}
			}
			gotState.Tensors, wantState.Tensors = nil, nil
			if !reflect.DeepEqual(gotState, wantState) {
				t.Errorf("state grouped %+v, alone %+v", gotState, wantState)
			}
		})
	}
}

func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// TestGroupedAdamMatchesPerParameter: on the CPU.
func TestGroupedAdamMatchesPerParameter(t *testing.T) {
	checkGroupedAdam(t, cpu.New())
}

// TestGroupedAdamSkipsRounded: a BF16 parameter rounded stochastically
// is updated alone (on an F32 copy), the others of its group together.
func TestGroupedAdamSkipsRounded(t *testing.T) {
	dev := &adamCounter{Device: cpu.New()}
	var ps []*tensor.Tensor
	for i, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F32} {
		p, err := tensor.Full(dev, dt, []int{10}, 1, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		ps = append(ps, p.SetName(fmt.Sprint("p", i)).SetRequiresGrad(true))
		g, err := tensor.Full(dev, dt, []int{10}, 0.5, memory.Gradient)
		if err != nil {
			t.Fatal(err)
		}
		p.SetGrad(g)
	}
	o, err := optim.NewAdamW(ps, optim.AdamW{LR: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Release()
	o.SetStochasticRounding(7)
	if err := o.Step(); err != nil {
		t.Fatal(err)
	}
	if dev.groups != 1 || dev.singles != 1 {
		t.Errorf("%d group and %d single calls, want 1 and 1", dev.groups, dev.singles)
	}
}
