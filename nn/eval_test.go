package nn_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// An inference loop over a user's own Sequential, written as users write it
// (one recording scope around the whole loop, no tensor.NoGrad), must not
// keep a graph: allocated bytes return to the same value after every
// forward, and the loop's peak is one no-grad forward's working set, not
// the sum of the activations a graph would save.
func TestEvalKeepsNoGraph(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 1}
	var layers []nn.Module
	widths := []int{64, 256, 256, 256, 256, 10}
	for i := 0; i+1 < len(widths); i++ {
		l, err := nn.NewLinear(b, nn.Join("layers", string(rune('0'+i))), nn.LinearConfig{In: widths[i], Out: widths[i+1]})
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
		if i+2 < len(widths) {
			layers = append(layers, nn.ReLU{})
		}
	}
	model := nn.NewSequential(layers...)
	defer nn.Release(model)
	x, err := tensor.Rand(dev, tensor.F32, []int{32, 64}, device.Uniform, -1, 1, 7, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	mem := dev.Memory()

	// The peak of a forward run with each mode, from the same starting point.
	peakOf := func(run func(s *tensor.Scope) *nn.Run, opts ...tensor.ScopeOption) int64 {
		s := tensor.NewScope(opts...)
		defer s.Close()
		mem.ResetPeak()
		model.Forward(run(s), x).Release()
		return mem.Stats().Requested.Peak
	}
	noGrad := peakOf(nn.Eval, tensor.NoGrad())
	recording := peakOf(func(s *tensor.Scope) *nn.Run { return &nn.Run{Scope: s} })
	if recording <= noGrad {
		t.Fatalf("a recording forward peaks at %d bytes, a no-grad one at %d: the model is too small to tell them apart", recording, noGrad)
	}

	s := tensor.NewScope() // records, as a user's scope does by default
	defer s.Close()
	base := mem.Stats().Requested.Current
	mem.ResetPeak()
	for i := range 1000 {
		r := nn.Eval(s)
		if r.Grad() {
			t.Fatal("nn.Eval's run records a graph")
		}
		out := model.Forward(r, x)
		if out.RequiresGrad() {
			t.Fatalf("forward %d: the eval output requires grad (it has a graph)", i)
		}
		out.Release()
		if cur := mem.Stats().Requested.Current; cur != base {
			t.Fatalf("after eval forward %d: %d bytes allocated, %d before the loop", i, cur, base)
		}
	}
	if peak := mem.Stats().Requested.Peak; peak != noGrad {
		t.Errorf("1000 eval forwards peaked at %d bytes; one no-grad forward peaks at %d (a recording one at %d)", peak, noGrad, recording)
	}
}
