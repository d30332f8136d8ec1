package optim_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// randomParams makes named parameters of the given shapes with random
// values and gradients.
func randomParams(t testing.TB, dev device.Device, rng *rand.Rand, shapes ...[]int) []*tensor.Tensor {
	t.Helper()
	var ps []*tensor.Tensor
	for i, sh := range shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		ps = append(ps, param(t, dev, "p"+string(rune('a'+i)), v, sh...))
	}
	return ps
}

// randomGrads gives every parameter a gradient whose magnitudes span
// several orders (log-normal), as real gradients do.
func randomGrads(t testing.TB, rng *rand.Rand, ps []*tensor.Tensor) {
	t.Helper()
	for _, p := range ps {
		g := make([]float64, p.Len())
		for j := range g {
			g[j] = rng.NormFloat64() * math.Exp(2*rng.NormFloat64()) * 1e-2
		}
		setGrad(t, p, g)
	}
}

// TestAdam8bitStateBytes: 2 bytes per element and 8 per block of 2048, as
// the allocator counts them, for every parameter size.
func TestAdam8bitStateBytes(t *testing.T) {
	for _, name := range []string{"adam8bit", "adamw8bit"} {
		dev := cpu.New()
		rng := rand.New(rand.NewPCG(1, 1))
		ps := randomParams(t, dev, rng, []int{3}, []int{384}, []int{64, 64}, []int{2049}, []int{3, 2048}, []int{100, 50})
		opt, err := optim.New(name, ps, optim.Settings{LR: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		randomGrads(t, rng, ps)
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, p := range ps {
			want += 2*int64(p.Len()) + 8*int64((p.Len()+2047)/2048)
		}
		if got := category(dev, memory.OptimizerState); got != want {
			t.Errorf("%s: optimizer state %d bytes, want %d", name, got, want)
		}
		if got := opt.StateBytes(); got != want {
			t.Errorf("%s: StateBytes %d, want %d", name, got, want)
		}
		for _, p := range ps {
			p.SetGrad(nil)
		}
		opt.Release()
		if got := category(dev, memory.OptimizerState); got != 0 {
			t.Errorf("%s: %d bytes of state after Release", name, got)
		}
		if got := category(dev, memory.Temporary); got != 0 {
			t.Errorf("%s: %d bytes of temporaries left", name, got)
		}
	}
}

// nearest is the code whose value (table) is nearest x, ties to the even
// code, found by search in float64: the definition the F32 bit rounding
// implements.
func nearest(x float64, signed bool) uint8 {
	type cv struct {
		c uint8
		v float64
	}
	var all []cv
	for c := range 256 {
		if signed {
			if c == 0x80 {
				continue // negative zero is never produced
			}
			all = append(all, cv{uint8(c), float64(device.Quant8SignedValue(uint8(c)))})
		} else {
			all = append(all, cv{uint8(c), float64(device.Quant8UnsignedValue(uint8(c)))})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	i := sort.Search(len(all), func(i int) bool { return all[i].v >= x })
	best := -1
	for _, j := range []int{i - 1, i} {
		if j < 0 || j >= len(all) {
			continue
		}
		d := math.Abs(all[j].v - x)
		if best < 0 || d < math.Abs(all[best].v-x) || (d == math.Abs(all[best].v-x) && all[j].c%2 == 0) {
			best = j
		}
	}
	return all[best].c
}

func TestQuant8RoundsToNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for range 20000 {
		x := float32(math.Exp(-20*rng.Float64()) * float64(1-2*rng.IntN(2)))
		if got, want := device.Quant8Signed(x), nearest(float64(x), true); got != want &&
			math.Abs(float64(device.Quant8SignedValue(got)-x)) != math.Abs(float64(device.Quant8SignedValue(want)-x)) {
			t.Fatalf("Quant8Signed(%g) = %d (%g), nearest is %d (%g)", x, got, device.Quant8SignedValue(got), want, device.Quant8SignedValue(want))
		}
		y := float32(math.Exp(-40 * rng.Float64()))
		if got, want := device.Quant8Unsigned(y), nearest(float64(y), false); got != want &&
			math.Abs(float64(device.Quant8UnsignedValue(got)-y)) != math.Abs(float64(device.Quant8UnsignedValue(want)-y)) {
			t.Fatalf("Quant8Unsigned(%g) = %d (%g), nearest is %d (%g)", y, got, device.Quant8UnsignedValue(got), want, device.Quant8UnsignedValue(want))
		}
	}
	for _, c := range []struct {
		x    float32
		want uint8
	}{{0, 0}, {1, 0x7f}, {-1, 0xff}} {
		if got := device.Quant8Signed(c.x); got != c.want {
			t.Errorf("Quant8Signed(%v) = %#x, want %#x", c.x, got, c.want)
		}
	}
	if device.Quant8SignedValue(0x7f) != 1 || device.Quant8UnsignedValue(0xff) != 1 || device.Quant8Unsigned(1) != 0xff {
		t.Error("the largest codes are not exactly 1")
	}
}

// adam8Reference is one step of 8-bit Adam in float64 on the host: the
// same dequantise, update, requantise per block, with exact nearest-code
// rounding.
func adam8Reference(p, g []float64, mc, vc []uint8, ms, vs []float64, h device.AdamHyper) {
	for b := range ms {
		lo, hi := b*device.Quant8Block, min((b+1)*device.Quant8Block, len(p))
		mw, vw := make([]float64, hi-lo), make([]float64, hi-lo)
		var am, av float64
		for i := lo; i < hi; i++ {
			gi := g[i] * h.GradScale
			if h.WeightDecay != 0 {
				if h.Decoupled {
					p[i] -= h.LR * h.WeightDecay * p[i]
				} else {
					gi += h.WeightDecay * p[i]
				}
			}
			m := h.Beta1*float64(device.Quant8SignedValue(mc[i]))*ms[b] + (1-h.Beta1)*gi
			v := h.Beta2*float64(device.Quant8UnsignedValue(vc[i]))*vs[b] + (1-h.Beta2)*gi*gi
			p[i] -= h.LR / h.BiasCorrection1 * m / (math.Sqrt(v)/math.Sqrt(h.BiasCorrection2) + h.Eps)
			mw[i-lo], vw[i-lo] = m, v
			am, av = math.Max(am, math.Abs(m)), math.Max(av, v)
		}
		ms[b], vs[b] = am, av
		for i := lo; i < hi; i++ {
			mc[i], vc[i] = 0, 0
			if am > 0 {
				mc[i] = nearest(mw[i-lo]/am, true)
			}
			if av > 0 {
				vc[i] = nearest(vw[i-lo]/av, false)
			}
		}
	}
}

// TestAdam8bitMatchesReference steps 8-bit Adam and AdamW for several
// steps and checks each step against the float64 reference started from
// the optimizer's own state: parameters within F32 rounding, scales
// likewise, and codes equal except where F32 and float64 fall on either
// side of a rounding boundary (then one code apart).
func TestAdam8bitMatchesReference(t *testing.T) {
	for _, decoupled := range []bool{false, true} {
		dev := cpu.New()
		rng := rand.New(rand.NewPCG(3, 3))
		ps := randomParams(t, dev, rng, []int{5000}, []int{7, 3})
		var opt *optim.Optimizer
		var err error
		if decoupled {
			opt, err = optim.NewAdamW8bit(ps, optim.AdamW8bit{LR: 1e-2, WeightDecay: 0.1})
		} else {
			opt, err = optim.NewAdam8bit(ps, optim.Adam8bit{LR: 1e-2, WeightDecay: 0.1})
		}
		if err != nil {
			t.Fatal(err)
		}
		for step := 1; step <= 4; step++ {
			randomGrads(t, rng, ps)
			before, err := opt.Export()
			if err != nil {
				t.Fatal(err)
			}
			type ref struct {
				p, g, ms, vs []float64
				mc, vc       []uint8
			}
			refs := make([]ref, len(ps))
			for i, p := range ps {
				r := ref{p: f64(p.Float32s()), g: f64(p.Grad().Float32s())}
				nb := (p.Len() + 2047) / 2048
				r.mc, r.vc = make([]uint8, p.Len()), make([]uint8, p.Len())
				r.ms, r.vs = make([]float64, nb), make([]float64, nb)
				if step > 1 {
					codes := func(k string) []uint8 {
						var out []uint8
						for _, v := range before.Tensors[p.Name()+"."+k].Data {
							out = append(out, uint8(v))
						}
						return out
					}
					r.mc, r.vc = codes("exp_avg_codes"), codes("exp_avg_sq_codes")
					r.ms, r.vs = f64(before.Tensors[p.Name()+".exp_avg_scale"].Data), f64(before.Tensors[p.Name()+".exp_avg_sq_scale"].Data)
				}
				h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: decoupled,
					BiasCorrection1: 1 - math.Pow(0.9, float64(step)), BiasCorrection2: 1 - math.Pow(0.999, float64(step)), GradScale: 1}
				adam8Reference(r.p, r.g, r.mc, r.vc, r.ms, r.vs, h)
				refs[i] = r
			}
			if err := opt.Step(); err != nil {
				t.Fatal(err)
			}
			after, err := opt.Export()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range ps {
				r := refs[i]
				assertClose(t, p.Name()+" param", f64(p.Float32s()), r.p, 1e-5)
				assertClose(t, p.Name()+" m scale", f64(after.Tensors[p.Name()+".exp_avg_scale"].Data), r.ms, 1e-5)
				assertClose(t, p.Name()+" v scale", f64(after.Tensors[p.Name()+".exp_avg_sq_scale"].Data), r.vs, 1e-5)
				for _, k := range []struct {
					key  string
					want []uint8
				}{{"exp_avg_codes", r.mc}, {"exp_avg_sq_codes", r.vc}} {
					got := after.Tensors[p.Name()+"."+k.key].Data
					off := 0
					for j, c := range got {
						if d := int(c) - int(k.want[j]); d != 0 {
							if d != 1 && d != -1 && !(k.key == "exp_avg_codes" && (c == 0 || k.want[j] == 0 || c == 0x80 || k.want[j] == 0x80)) {
								t.Fatalf("step %d %s %s[%d] = %v, reference %d", step, p.Name(), k.key, j, c, k.want[j])
							}
							off++
						}
					}
					if off*1000 > len(got) {
						t.Errorf("step %d %s %s: %d of %d codes differ from the reference", step, p.Name(), k.key, off, len(got))
					}
				}
			}
		}
	}
}

// TestAdam8bitResumeBitwise: a run exported and imported into a fresh
// optimizer continues bitwise as the uninterrupted run.
func TestAdam8bitResumeBitwise(t *testing.T) {
	for _, name := range []string{"adam8bit", "adamw8bit", "adafactor"} {
		run := func(resumeAt int) [][]float32 {
			dev := cpu.New()
			rng := rand.New(rand.NewPCG(4, 4))
			ps := randomParams(t, dev, rng, []int{3000}, []int{20, 30}, []int{2, 3, 4}, []int{7})
			settings := optim.Settings{LR: 1e-2, WeightDecay: 0.01}
			opt, err := optim.New(name, ps, settings)
			if err != nil {
				t.Fatal(err)
			}
			for step := range 5 {
				if step == resumeAt {
					st, err := opt.Export()
					if err != nil {
						t.Fatal(err)
					}
					opt.Release()
					if opt, err = optim.New(name, ps, settings); err != nil {
						t.Fatal(err)
					}
					if err := opt.Import(st); err != nil {
						t.Fatal(err)
					}
				}
				randomGrads(t, rng, ps)
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
			}
			var out [][]float32
			for _, p := range ps {
				out = append(out, p.Float32s())
			}
			st, err := opt.Export()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range st.Tensors {
					if !yield(k) {
						return
					}
				}
			}) {
				out = append(out, st.Tensors[k].Data)
			}
			return out
		}
		want, got := run(-1), run(3)
		for i := range want {
			for j := range want[i] {
				if math.Float32bits(want[i][j]) != math.Float32bits(got[i][j]) {
					t.Fatalf("%s: tensor %d element %d: %v resumed, %v uninterrupted", name, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
}
