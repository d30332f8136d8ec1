package tensor_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A WithModes view changes modes, not ownership: what its ops return (and
// its autocast weight copies) belongs to the scope it was made from, is
// released when that scope closes, and can be kept through either.
func TestWithModesSharesOwnership(t *testing.T) {
	dev := cpu.New()
	mem := dev.Memory()
	w, err := tensor.Rand(dev, tensor.F32, []int{8, 8}, device.Uniform, -1, 1, 1, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	w.SetRequiresGrad(true)
	x, err := tensor.Rand(dev, tensor.F32, []int{4, 8}, device.Uniform, -1, 1, 2, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	base := mem.Stats().Requested.Current

	s := tensor.NewScope()
	v := s.WithModes(tensor.NoGrad(), tensor.Autocast(tensor.BF16))
	if !s.Grad() || v.Grad() {
		t.Fatalf("Grad: scope %v, view %v; want true, false", s.Grad(), v.Grad())
	}
	y := v.MatMul(x, v.Transpose(w, 0, 1)) // an autocast copy of w is cached
	if y.RequiresGrad() {
		t.Error("a no-grad view recorded a graph")
	}
	kept := v.Keep(v.Relu(y))
	v.Close() // a view owns nothing: y must survive
	if got := y.Float32s(); len(got) != 32 {
		t.Fatalf("y has %d values after closing the view", len(got))
	}
	s.Close()
	if got := kept.Float32s(); len(got) != 32 {
		t.Fatalf("a tensor kept through the view has %d values after the scope closed", len(got))
	}
	kept.Release()
	if cur := mem.Stats().Requested.Current; cur != base {
		t.Errorf("%d bytes allocated after the scope closed, %d before: the view's results or casts leaked", cur, base)
	}
}
