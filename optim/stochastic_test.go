package optim_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// A BF16 parameter updated with stochastic rounding follows the F32
// parameter on average, where round-to-nearest loses every update below
// half a bf16 unit; the same seed gives the same bits.
func TestStochasticRoundingBF16(t *testing.T) {
	for _, name := range []string{"sgd", "adam", "adamw8bit", "adafactor"} {
		t.Run(name, func(t *testing.T) {
			run := func(dt tensor.DType, sr bool, seed uint64) []float64 {
				dev := cpu.New()
				n := 3000
				vals := make([]float32, n)
				for i := range vals {
					vals[i] = 1 + float32(i%7)/8
				}
				p, err := tensor.New(dev, dt, []int{30, 100}, memory.Parameter)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Release()
				if err := p.SetFloat32s(vals); err != nil {
					t.Fatal(err)
				}
				p.SetName("w").SetRequiresGrad(true)
				o, err := optim.New(name, []*tensor.Tensor{p}, optim.Settings{LR: 1e-4})
				if err != nil {
					t.Fatal(err)
				}
				defer o.Release()
				if sr {
					o.SetStochasticRounding(seed)
				}
				for range 50 {
					g, err := tensor.Full(dev, dt, p.Shape(), 0.5, memory.Gradient)
					if err != nil {
						t.Fatal(err)
					}
					p.SetGrad(g)
					if err := o.Step(); err != nil {
						t.Fatal(err)
					}
					o.ZeroGrad()
				}
				return p.Float64s()
			}
			ref := run(tensor.F32, false, 0)
			sr := run(tensor.BF16, true, 1)
			rne := ref // the 8-bit and factored rules take bf16 parameters only through rounding
			if name == "sgd" || name == "adam" {
				rne = run(tensor.BF16, false, 0)
			}
			if again := run(tensor.BF16, true, 1); !equal(sr, again) {
				t.Fatal("the same seed gave different bits")
			}
			mean := func(v []float64) float64 {
				var s float64
				for _, x := range v {
					s += x
				}
				return s / float64(len(v))
			}
			dRef, dRNE, dSR := mean(ref), mean(rne), mean(sr)
			t.Logf("mean after 50 steps: f32 %.6f, bf16 nearest %.6f, bf16 stochastic %.6f", dRef, dRNE, dSR)
			// Adafactor scales its step by the parameter's RMS, which rounding
			// moves a little: within 5e-4 of the f32 mean.
			if math.Abs(dSR-dRef) > max(math.Abs(dRNE-dRef)/4, 5e-4) {
				t.Errorf("stochastic rounding's mean %v is not close to the f32 mean %v (nearest: %v)", dSR, dRef, dRNE)
			}
		})
	}
}

func equal(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
