package nn_test

import (
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

func TestLossOptions(t *testing.T) {
	dev := cpu.New()
	logits, _ := tensor.Rand(dev, tensor.F32, []int{2, 3, 5}, device.Normal, 0, 2, 1, memory.Data)
	targets, _ := tensor.FromInt32(dev, []int32{0, 4, 2, 2, 1, 3}, []int{2, 3}, memory.Data)
	defer logits.Release()
	defer targets.Release()
	s := tensor.NewScope(tensor.NoGrad())
	defer s.Close()

	// The options map onto tensor.CrossEntropyOptions.
	got := nn.CrossEntropy(s, logits, targets, nn.IgnoreIndex(2), nn.LabelSmoothing(0.1), nn.Reduce(nn.SumReduction)).Item()
	want := s.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(2), LabelSmoothing: 0.1, Reduction: tensor.SumReduction}).Item()
	if got != want {
		t.Errorf("cross-entropy with options %v, tensor's %v", got, want)
	}
	// Mean over the 4 targets that are not ignored.
	mean := nn.CrossEntropy(s, logits, targets, nn.IgnoreIndex(2), nn.LabelSmoothing(0.1)).Item()
	if math.Abs(mean-got/4) > 1e-6 {
		t.Errorf("mean %v, want sum/4 = %v", mean, got/4)
	}
	// Without options: the mean over all 6, above ln(1) = 0.
	if all := nn.CrossEntropy(s, logits, targets).Item(); all <= 0 {
		t.Errorf("plain cross-entropy %v", all)
	}

	pred, _ := tensor.Rand(dev, tensor.F32, []int{4, 3}, device.Normal, 0, 1, 2, memory.Data)
	tgt, _ := tensor.Rand(dev, tensor.F32, []int{4, 3}, device.Normal, 0, 1, 3, memory.Data)
	defer pred.Release()
	defer tgt.Release()
	ms, mm := nn.MSE(s, pred, tgt, nn.SumReduction).Item(), nn.MSE(s, pred, tgt, nn.MeanReduction).Item()
	if math.Abs(ms-12*mm) > 1e-5*ms {
		t.Errorf("MSE sum %v, mean %v: want sum = 12·mean", ms, mm)
	}

	// Misuse is a *tensor.Error at the boundary, naming the problem.
	col, _ := tensor.Rand(dev, tensor.F32, []int{4, 1}, device.Normal, 0, 1, 2, memory.Data)
	row, _ := tensor.Rand(dev, tensor.F32, []int{4}, device.Normal, 0, 1, 2, memory.Data)
	defer col.Release()
	defer row.Release()
	for _, c := range []struct {
		fn   func()
		want string
	}{
		{func() { nn.MSE(s, col, row, nn.MeanReduction) }, "differ in shape"},
		{func() { nn.CrossEntropy(s, logits, targets, nn.LabelSmoothing(1)) }, "label smoothing 1 outside [0, 1)"},
	} {
		err := tensor.Catch(func() error { c.fn(); return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}
