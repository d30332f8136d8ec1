package tensor_test

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// TestLeafAdoptsGradient: a weight's first gradient, computed into a
// buffer of its own, becomes the leaf's gradient by moving that buffer to
// memory.Gradient, not by a copy; the values and the byte counts are those
// a copy would give.
func TestLeafAdoptsGradient(t *testing.T) {
	dev := cpu.New()
	dev.Memory().EnableHistory(1 << 10)
	x, err := tensor.FromFloat32(dev, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	w, err := tensor.FromFloat32(dev, []float32{1, 0, -1, 2, 0.5, 3}, []int{2, 3}, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	w.SetRequiresGrad(true)
	err = tensor.Step(func(s *tensor.Scope) error {
		y := s.Linear(x, w, nil) // dL/dw = Σ_rows x for each output
		s.Sum(y, false).Backward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.Grad().Float32s(), []float32{5, 7, 9, 5, 7, 9}; !slices.Equal(got, want) {
		t.Fatalf("gradient %v, want %v", got, want)
	}
	st := dev.Memory().Stats()
	if got := st.Category(memory.Gradient).Current; got != 24 {
		t.Errorf("gradient bytes %d, want 24", got)
	}
	if got := st.Category(memory.Temporary).Current + st.Category(memory.Activation).Current; got != 0 {
		t.Errorf("%d temporary and activation bytes left after the step", got)
	}
	adopted := 0
	for _, e := range dev.Memory().History() {
		if e.Kind == memory.EventRecategorize && e.Category == memory.Gradient {
			adopted++
		}
	}
	if adopted != 1 {
		t.Errorf("%d buffers moved to the gradient category, want 1", adopted)
	}
}
