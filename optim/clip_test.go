package optim_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// norm64 is the float64 norm of the gradients of ps that require grad.
func norm64(ps []*tensor.Tensor) float64 {
	var sum float64
	for _, p := range ps {
		if p.RequiresGrad() && p.Grad() != nil {
			for _, x := range p.Grad().Float64s() {
				sum += x * x
			}
		}
	}
	return math.Sqrt(sum)
}

func TestClipGradNorm(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 12, 32, 5, 8, 11)
	m.backward(t)
	noGrad := param(t, dev, "unused", []float32{1, 2})                        // trainable, no gradient: skipped
	frozen := param(t, dev, "frozen", []float32{3, 4}).SetRequiresGrad(false) // not trainable: skipped
	setGrad(t, frozen, []float64{100, 100})                                   // even with a gradient
	ps := append(m.params(), noGrad, frozen, m.w1)                            // w1 twice: counted once
	want := norm64(m.params())
	if want == 0 {
		t.Fatal("zero gradient norm: the test would prove nothing")
	}

	got, err := optim.GradNorm(ps)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-12*want {
		t.Errorf("GradNorm = %.17g, want %.17g", got, want)
	}

	// A max above the norm leaves the gradients bit-identical.
	before := m.w2.Grad().Float64s()
	got, err = optim.ClipGradNorm(ps, 2*want)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-12*want {
		t.Errorf("ClipGradNorm returned %v, want %v", got, want)
	}
	assertClose(t, "unclipped grad", m.w2.Grad().Float64s(), before, 0)

	// A max below it scales every gradient by max/norm.
	maxNorm := want / 3
	got, err = optim.ClipGradNorm(ps, maxNorm)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-want) > 1e-12*want {
		t.Errorf("ClipGradNorm returned %v, want the norm before clipping %v", got, want)
	}
	if after := norm64(m.params()); math.Abs(after-maxNorm) > 1e-6*maxNorm {
		t.Errorf("norm after clipping %v, want %v", after, maxNorm)
	}
	wantW2 := make([]float64, len(before))
	for i := range before {
		wantW2[i] = before[i] * maxNorm / want
	}
	assertClose(t, "clipped fc2.weight grad", m.w2.Grad().Float64s(), wantW2, 1e-6)
	assertClose(t, "frozen grad", frozen.Grad().Float64s(), []float64{100, 100}, 0)

	if got := dev.Memory().Stats().Category(memory.Temporary).Current; got != 0 {
		t.Errorf("%d temporary bytes left by clipping", got)
	}
	for _, bad := range []float64{0, -1, math.NaN()} {
		if _, err := optim.ClipGradNorm(ps, bad); err == nil {
			t.Errorf("ClipGradNorm(max %v) gave no error", bad)
		}
	}
}

// A gradient holding inf or NaN is reported, not spread to the others.
func TestClipNonFinite(t *testing.T) {
	dev := cpu.New()
	a := param(t, dev, "a", p0)
	b := param(t, dev, "b", p0)
	setGrad(t, a, []float64{1, math.Inf(1), 0})
	setGrad(t, b, []float64{1, 2, 3})
	opt, err := optim.NewAdam([]*tensor.Tensor{a, b}, optim.Adam{LR: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	if opt.GradsFinite() {
		t.Error("GradsFinite with an inf gradient")
	}
	n, err := opt.ClipGradNorm(1)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(n, 1) {
		t.Errorf("norm %v, want +Inf", n)
	}
	assertClose(t, "b's gradient", b.Grad().Float64s(), []float64{1, 2, 3}, 0)
	setGrad(t, a, []float64{1, 1, 1})
	if !opt.GradsFinite() {
		t.Error("GradsFinite false with finite gradients")
	}
}
