package nn_test

import (
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Rotary pairs element j of a head with element j+HeadDim/2 (Hugging
// Face's rotate_half), rotating the unit vector e_j at position p into
// cos(p·f_j)·e_j + sin(p·f_j)·e_{j+half}.
func TestRotaryRotateHalf(t *testing.T) {
	const d, pos = 8, 7
	rope, err := nn.NewRotary(nn.RotaryConfig{HeadDim: d, Theta: 10000})
	if err != nil {
		t.Fatal(err)
	}
	inv := rope.InvFreq()
	dev := cpu.New()
	for j := range d / 2 {
		v := make([]float64, d)
		v[j] = 1
		x, err := tensor.FromFloat64(dev, v, []int{1, 1, 1, d}, memory.Data)
		if err != nil {
			t.Fatal(err)
		}
		s := tensor.NewScope(tensor.NoGrad())
		got := rope.Apply(nn.Eval(s), x, pos).Float64s()
		s.Close()
		x.Release()
		a := float64(float32(pos) * inv[j])
		want := make([]float64, d)
		want[j], want[j+d/2] = math.Cos(a), math.Sin(a)
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Errorf("e_%d at position %d: got %v, want %v", j, pos, got, want)
				break
			}
		}
	}
	if f := float64(inv[1]); math.Abs(f-math.Pow(10000, -2.0/d)) > 1e-7 {
		t.Errorf("f_1 = %v, want 10000^(-2/%d)", f, d)
	}
}

// Llama 3's scaling keeps high frequencies, divides low ones by the
// factor, and blends in between (Hugging Face's _compute_llama3_parameters).
func TestRotaryLlama3Scaling(t *testing.T) {
	sc := nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	plain, err := nn.NewRotary(nn.RotaryConfig{HeadDim: 128, Theta: 500000})
	if err != nil {
		t.Fatal(err)
	}
	scaled, err := nn.NewRotary(nn.RotaryConfig{HeadDim: 128, Theta: 500000, Scaling: sc})
	if err != nil {
		t.Fatal(err)
	}
	p, s := plain.InvFreq(), scaled.InvFreq()
	var kept, divided, blended int
	for j := range p {
		wave := 2 * math.Pi / float64(p[j])
		switch {
		case wave < 8192/4.0:
			kept++
			if s[j] != p[j] {
				t.Errorf("f_%d (wavelength %.0f) changed: %v -> %v", j, wave, p[j], s[j])
			}
		case wave > 8192/1.0:
			divided++
			if s[j] != float32(float64(p[j])/8) {
				t.Errorf("f_%d (wavelength %.0f): %v, want %v/8", j, wave, s[j], p[j])
			}
		default:
			blended++
			if !(s[j] < p[j] && s[j] > p[j]/8) {
				t.Errorf("f_%d (wavelength %.0f): %v not between %v/8 and %v", j, wave, s[j], p[j], p[j])
			}
		}
	}
	if kept == 0 || divided == 0 || blended == 0 {
		t.Errorf("kept %d, divided %d, blended %d: the test covers all three bands", kept, divided, blended)
	}
}

func TestRotaryConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  nn.RotaryConfig
		want string
	}{
		{nn.RotaryConfig{HeadDim: 5, Theta: 10000}, "HeadDim 5"},
		{nn.RotaryConfig{HeadDim: 4, Theta: 0}, "Theta 0"},
		{nn.RotaryConfig{HeadDim: 4, Theta: 10000, Scaling: nn.RopeScaling{Type: "yarn"}}, `"yarn"`},
		{nn.RotaryConfig{HeadDim: 4, Theta: 10000, Scaling: nn.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalContext: 10}}, "llama3"},
	} {
		if _, err := nn.NewRotary(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
}
