package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// BenchmarkAdam8bitVsAdam alternates the 8-bit Adam step and the F32 Adam
// step on the same 2²⁰ parameters and reports the ratio of their summed
// times (8-bit / F32) as "ratio", so that both see the same machine load.
func BenchmarkAdam8bitVsAdam(b *testing.B) {
	d := New()
	const n = 1 << 20
	nb := device.Quant8Blocks(n)
	view := func(dt device.DType, k int) device.View {
		buf, err := d.Alloc(int64(k*dt.Size()), memory.Other)
		if err != nil {
			b.Fatal(err)
		}
		return device.View{Buf: buf, DType: dt, Shape: []int{k}, Strides: []int{1}}
	}
	p, g, m, v := view(device.F32, n), view(device.F32, n), view(device.F32, n), view(device.F32, n)
	mq, vq, ms, vs := view(device.U8, n), view(device.U8, n), view(device.F32, nb), view(device.F32, nb)
	d.Random(g, device.Normal, 0, 1e-2, 1)
	d.Random(p, device.Normal, 0, 1, 2)
	h := device.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection1: 0.1, BiasCorrection2: 0.001, GradScale: 1}
	d.Adam8bitStep(p, g, mq, vq, ms, vs, h) // non-trivial state
	var t8, t32 time.Duration
	b.ResetTimer()
	for range b.N {
		s := time.Now()
		d.Adam8bitStep(p, g, mq, vq, ms, vs, h)
		t8 += time.Since(s)
		s = time.Now()
		d.AdamStep(p, g, m, v, h)
		t32 += time.Since(s)
	}
	b.ReportMetric(float64(t8)/float64(t32), "ratio")
	b.ReportMetric(float64(t8.Nanoseconds())/float64(b.N)/n, "ns/elem-8bit")
	b.ReportMetric(float64(t32.Nanoseconds())/float64(b.N)/n, "ns/elem-f32")
}

// TestAdam8bitVectorIsBitwise: the AVX-512 block step gives
// device.Adam8bitBlock's bits, on ordinary blocks and on edge cases (a
// zero gradient on zero state, one outlier, subnormal-code magnitudes).
func TestAdam8bitVectorIsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const n = device.Quant8Block
	cases := map[string]func(i int) float32{
		"normal": func(int) float32 { return float32(rng.NormFloat64() * 1e-2) },
		"zero":   func(int) float32 { return 0 },
		"outlier": func(i int) float32 {
			return float32(map[bool]float64{true: 1e3, false: 1e-6}[i == 7] * rng.NormFloat64())
		},
		"spread": func(int) float32 { return float32(rng.NormFloat64() * math.Exp(4*rng.NormFloat64())) },
	}
	for name, grad := range cases {
		for _, dec := range []bool{false, true} {
			p, g := make([]float32, n), make([]float32, n)
			m, v := make([]uint8, n), make([]uint8, n)
			var ms, vs float32
			for i := range p {
				p[i] = float32(rng.NormFloat64())
			}
			p2, m2, v2, ms2, vs2 := slices.Clone(p), slices.Clone(m), slices.Clone(v), ms, vs
			work, work2 := make([]float32, 2*n), make([]float32, 2*n)
			for step := 1; step <= 3; step++ {
				for i := range g {
					g[i] = grad(i)
				}
				h := device.AdamHyper{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Decoupled: dec,
					BiasCorrection1: 1 - math.Pow(0.9, float64(step)), BiasCorrection2: 1 - math.Pow(0.999, float64(step)), GradScale: 0.25}
				c := device.NewAdam8bitConsts(h)
				if !adam8Vector(p, g, m, v, &ms, &vs, &c, work) {
					t.Skip("no vector path on this machine")
				}
				device.Adam8bitBlock(p2, g, m2, v2, &ms2, &vs2, h, work2)
				for i := range p {
					if math.Float32bits(p[i]) != math.Float32bits(p2[i]) || m[i] != m2[i] || v[i] != v2[i] {
						t.Fatalf("%s decoupled=%v step %d element %d: vector p %v m %d v %d, Go p %v m %d v %d", name, dec, step, i, p[i], m[i], v[i], p2[i], m2[i], v2[i])
					}
				}
				if math.Float32bits(ms) != math.Float32bits(ms2) || math.Float32bits(vs) != math.Float32bits(vs2) {
					t.Fatalf("%s step %d: scales %v %v, Go %v %v", name, step, ms, vs, ms2, vs2)
				}
			}
		}
	}
}
