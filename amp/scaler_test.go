package amp_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

var _ amp.Optimizer = (*optim.Optimizer)(nil)

func setup(t *testing.T) (*tensor.Tensor, *optim.Optimizer) {
	dev := cpu.New()
	w, err := tensor.FromFloat32(dev, []float32{0.5, -1, 2}, []int{3}, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	w.SetName("w").SetRequiresGrad(true)
	opt, err := optim.NewAdam([]*tensor.Tensor{w}, optim.Adam{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	return w, opt
}

// backward accumulates the scaled gradient of Σ w²·c into w.
func backward(t *testing.T, sc *amp.GradScaler, w *tensor.Tensor, c float64) {
	err := tensor.Step(func(s *tensor.Scope) error {
		loss := s.MulScalar(s.Sum(s.Square(w), false), c)
		sc.Scale(s, loss).Backward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func bits(ts ...*tensor.Tensor) []uint32 {
	var out []uint32
	for _, t := range ts {
		for _, v := range t.Float32s() {
			out = append(out, math.Float32bits(v))
		}
	}
	return out
}

func TestInfSkipsStepAndBacksOff(t *testing.T) {
	w, opt := setup(t)
	sc := amp.NewGradScaler(amp.ScalerConfig{})
	// One clean step creates the optimizer state.
	backward(t, sc, w, 1)
	if ok, err := sc.Step(opt); !ok || err != nil {
		t.Fatalf("clean step: %v %v", ok, err)
	}
	sc.Update()
	opt.ZeroGrad()
	exported, _ := opt.Export()
	before := bits(w)
	// An overflowing loss makes an inf gradient.
	backward(t, sc, w, math.MaxFloat32)
	stepped, err := sc.Step(opt)
	if stepped || err != nil {
		t.Fatalf("step with inf gradients: stepped %v, err %v", stepped, err)
	}
	sc.Update()
	if got := bits(w); !equal(got, before) {
		t.Errorf("parameters changed on a skipped step")
	}
	after, _ := opt.Export()
	for k, v := range exported.Tensors {
		if !equalF(after.Tensors[k].Data, v.Data) {
			t.Errorf("optimizer state %s changed on a skipped step", k)
		}
	}
	if sc.LossScale() != 1<<15 || sc.Skipped() != 1 {
		t.Errorf("scale %v skipped %d, want 32768 and 1", sc.LossScale(), sc.Skipped())
	}
}

// TestAgreeSkipsOnEveryRank: a rank whose own gradients are finite still
// skips and backs off when another rank found an overflow, and Agree's
// error is returned.
func TestAgreeSkipsOnEveryRank(t *testing.T) {
	w, opt := setup(t)
	otherFound := true
	calls := 0
	sc := amp.NewGradScaler(amp.ScalerConfig{Agree: func(found bool) (bool, error) {
		calls++
		return found || otherFound, nil
	}})
	before := bits(w)
	backward(t, sc, w, 1)
	if stepped, err := sc.Step(opt); stepped || err != nil {
		t.Fatalf("another rank overflowed: stepped %v, err %v", stepped, err)
	}
	sc.Update()
	opt.ZeroGrad()
	if !equal(bits(w), before) || sc.LossScale() != 1<<15 || calls != 1 {
		t.Errorf("after another rank's overflow: weights changed %v, scale %v, Agree called %d times", !equal(bits(w), before), sc.LossScale(), calls)
	}
	otherFound = false
	backward(t, sc, w, 1)
	if stepped, err := sc.Step(opt); !stepped || err != nil {
		t.Fatalf("no rank overflowed: stepped %v, err %v", stepped, err)
	}
	sc.Update()
	opt.ZeroGrad()

	broken := errors.New("rank 1 is gone")
	sc = amp.NewGradScaler(amp.ScalerConfig{Agree: func(bool) (bool, error) { return false, broken }})
	backward(t, sc, w, 1)
	if err := sc.Unscale(opt); !errors.Is(err, broken) {
		t.Errorf("Unscale with a failing Agree: %v", err)
	}
}

func TestGrowthAfterCleanSteps(t *testing.T) {
	w, opt := setup(t)
	sc := amp.NewGradScaler(amp.ScalerConfig{})
	for i := 0; i < 2000; i++ {
		backward(t, sc, w, 1e-3)
		if _, err := sc.Step(opt); err != nil {
			t.Fatal(err)
		}
		sc.Update()
		opt.ZeroGrad()
		if i < 1999 && sc.LossScale() != 1<<16 {
			t.Fatalf("scale grew early, at step %d", i)
		}
	}
	if sc.LossScale() != 1<<17 {
		t.Errorf("after 2000 clean steps the scale is %v, want 131072", sc.LossScale())
	}
}

func TestUnscaleTwiceAndF16Gradients(t *testing.T) {
	w, opt := setup(t)
	sc := amp.NewGradScaler(amp.ScalerConfig{})
	backward(t, sc, w, 1)
	if err := sc.Unscale(opt); err != nil {
		t.Fatal(err)
	}
	// Unscaling divided the gradient by the scale: it is 2w·1 again.
	g := w.Grad().Float64s()
	if math.Abs(g[0]-1) > 1e-6 || math.Abs(g[2]-4) > 1e-6 {
		t.Errorf("unscaled gradient %v, want [1 -2 4]", g)
	}
	if err := sc.Unscale(opt); !errors.Is(err, amp.ErrUnscaledTwice) {
		t.Errorf("second Unscale: %v", err)
	}
	sc.Update()

	f16, _ := tensor.New(w.Device(), tensor.F16, []int{3}, memory.Gradient)
	w.SetGrad(f16)
	err := sc.Unscale(opt)
	if err == nil || !strings.Contains(err.Error(), "f16") || !strings.Contains(err.Error(), "w") {
		t.Errorf("f16 gradient: %v", err)
	}
}

func TestScalerOnlyForF16(t *testing.T) {
	if _, err := amp.NewGradScalerFor(device.BF16, amp.ScalerConfig{}); err == nil || !strings.Contains(err.Error(), "needs no loss scaling") {
		t.Errorf("bf16: %v", err)
	}
	if _, err := amp.NewGradScalerFor(device.F16, amp.ScalerConfig{}); err != nil {
		t.Errorf("f16: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	sc := amp.NewGradScaler(amp.ScalerConfig{})
	sc2 := amp.NewGradScaler(amp.ScalerConfig{InitScale: 8})
	if err := sc2.SetState(sc.State()); err != nil || sc2.State() != sc.State() {
		t.Errorf("round trip: %v %+v", err, sc2.State())
	}
	if err := sc2.SetState(amp.ScalerState{Scale: -1}); err == nil {
		t.Error("negative scale accepted")
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalF(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
