package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// adamReference is the Adam update in float64, element by element.
func adamReference(p, g, m, v []float64, h device.AdamHyper) {
	for i := range p {
		gi := g[i] * h.GradScale
		if h.WeightDecay != 0 {
			if h.Decoupled {
				p[i] -= h.LR * h.WeightDecay * p[i]
			} else {
				gi += h.WeightDecay * p[i]
			}
		}
		m[i] = h.Beta1*m[i] + (1-h.Beta1)*gi
		v[i] = h.Beta2*v[i] + (1-h.Beta2)*gi*gi
		p[i] -= h.LR / h.BiasCorrection1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(h.BiasCorrection2) + h.Eps)
	}
}

func TestAdamStepMatchesReference(t *testing.T) {
	d := New()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 15, 16, 17, 1000, 100003} {
		for _, decoupled := range []bool{false, true} {
			h := device.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: decoupled,
				BiasCorrection1: 1 - math.Pow(0.9, 3), BiasCorrection2: 1 - math.Pow(0.999, 3), GradScale: 0.5}
			ref := make([][]float64, 4)
			bufs := make([]device.Buffer, 4)
			views := make([]device.View, 4)
			for k := range ref {
				ref[k] = make([]float64, n)
				b, err := d.Alloc(int64(4*n), memory.Other)
				if err != nil {
					t.Fatal(err)
				}
				bufs[k] = b
				views[k] = device.View{Buf: b, DType: device.F32, Shape: []int{n}, Strides: []int{1}}
				data := f32s(views[k])
				for i := range ref[k] {
					x := float32(rng.NormFloat64())
					if k == 3 {
						x = x * x // v >= 0
					}
					data[i] = x
					ref[k][i] = float64(x)
				}
			}
			d.AdamStep(views[0], views[1], views[2], views[3], h)
			adamReference(ref[0], ref[1], ref[2], ref[3], h)
			for k, name := range []string{"param", "", "m", "v"} {
				if name == "" {
					continue
				}
				got := f32s(views[k])
				for i := range got {
					if diff := math.Abs(float64(got[i]) - ref[k][i]); diff > 1e-6*math.Max(1, math.Abs(ref[k][i])) {
						t.Fatalf("n=%d decoupled=%v %s[%d]: %v, reference %v", n, decoupled, name, i, got[i], ref[k][i])
					}
				}
			}
			for _, b := range bufs {
				d.Free(b)
			}
		}
	}
}

func BenchmarkAdamStep(b *testing.B) {
	d := New()
	const n = 1 << 20
	views := make([]device.View, 4)
	for k := range views {
		buf, _ := d.Alloc(4*n, memory.Other)
		views[k] = device.View{Buf: buf, DType: device.F32, Shape: []int{n}, Strides: []int{1}}
	}
	h := device.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection1: 0.1, BiasCorrection2: 0.001, GradScale: 1}
	b.SetBytes(16 * n)
	for range b.N {
		d.AdamStep(views[0], views[1], views[2], views[3], h)
	}
}
