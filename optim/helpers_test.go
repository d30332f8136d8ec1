package optim_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// param makes a named F32 leaf that requires grad.
func param(t testing.TB, dev device.Device, name string, vals []float32, shape ...int) *tensor.Tensor {
	t.Helper()
	if shape == nil {
		shape = []int{len(vals)}
	}
	p, err := tensor.FromFloat32(dev, vals, shape, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	return p.SetRequiresGrad(true).SetName(name)
}

// setGrad gives p the gradient vals.
func setGrad(t testing.TB, p *tensor.Tensor, vals []float64) {
	t.Helper()
	f := make([]float32, len(vals))
	for i, v := range vals {
		f[i] = float32(v)
	}
	g, err := tensor.FromFloat32(p.Device(), f, p.Shape(), memory.Gradient)
	if err != nil {
		t.Fatal(err)
	}
	p.SetGrad(g)
}

// f64 widens float32 values.
func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func assertClose(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > tol*math.Max(1, math.Abs(want[i])) || math.IsNaN(got[i]) {
			t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g)", what, i, got[i], want[i], d)
		}
	}
}

func category(dev device.Device, c memory.Category) int64 {
	return dev.Memory().Stats().Category(c).Current
}
