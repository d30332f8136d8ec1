package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// engineSetups are the ways the tests run a product: every engine this CPU
// has for the source type, and each with cache blocks so small that every
// blocking loop (k over several K blocks included) runs many times.
func engineSetups() []struct {
	name  string
	setup func() (restore func())
} {
	var out []struct {
		name  string
		setup func() func()
	}
	add := func(name string, f func() func()) {
		out = append(out, struct {
			name  string
			setup func() func()
		}{name, f})
	}
	for _, e := range f32Engines {
		for _, tiny := range []bool{false, true} {
			add(fmt.Sprintf("f32:%s/tiny=%v", e.name, tiny), func() func() {
				old, oldBF16 := sgemmEngine, bf16Engine
				x := *e
				if tiny {
					x.mc, x.kc, x.nc, x.kcOne = 2*e.mr, 5*e.kg, 3*e.nr, 0
				}
				setF32Engine(&x)
				bf16Engine = nil // bfloat16 through the converting engine
				return func() { setF32Engine(old); bf16Engine = oldBF16 }
			})
		}
	}
	for _, e := range bf16Engines {
		for _, tiny := range []bool{false, true} {
			add(fmt.Sprintf("bf16:%s/tiny=%v", e.name, tiny), func() func() {
				old := bf16Engine
				x := *e
				if tiny {
					x.mc, x.kc, x.nc, x.kcOne = 2*e.mr, 5*e.kg, 3*e.nr, 0
				}
				bf16Engine = &x
				return func() { bf16Engine = old }
			})
		}
	}
	return out
}

// TestGemmBias: a product with Options.Bias is, bit for bit, the product
// with beta 1 onto a C that already holds the bias in every row (what a
// linear layer did before), for every engine, source type and split over
// threads; a 16-bit C is that float32 result rounded once.
func TestGemmBias(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	shapes := []shape{{1, 1, 1}, {5, 7, 1}, {17, 31, 13}, {14, 32, 9}, {29, 65, 3}, {45, 70, 300}, {100, 3, 520}, {3, 100, 257}, {64, 64, 64}, {9, 40, 0}, {150, 200, 40}, {200, 64, 48}}
	for _, es := range engineSetups() {
		restore := es.setup()
		for _, sh := range shapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, alpha := range []float32{1, 0.5, 0} {
						for _, threads := range []int{1, 2} {
							name := fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v/alpha=%v/threads=%d", es.name, sh.m, sh.n, sh.k, tA, tB, alpha, threads)
							testBias(t, name, rng, sh, tA, tB, alpha, threads)
						}
					}
				}
			}
		}
		restore()
	}
}

func testBias(t *testing.T, name string, rng *rand.Rand, sh shape, tA, tB bool, alpha float32, threads int) {
	t.Helper()
	m, n, k := sh.m, sh.n, sh.k
	bias := make([]float32, n+3)
	for i := range bias {
		bias[i] = float32(rng.NormFloat64()) // not bfloat16 values: the 16-bit C must get them unrounded
	}
	prefilled := func() []float32 {
		c := make([]float32, m*n)
		for i := range m {
			copy(c[i*n:(i+1)*n], bias)
		}
		return c
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s %s: element %d is %v, want %v", name, what, i, got[i], want[i])
			}
		}
	}
	o := Options{Threads: threads, Bias: bias}
	ref := Options{Threads: threads}

	af, lda := operand(rng, m, k, tA, 0, f32gen)
	bf, ldb := operand(rng, k, n, tB, 0, f32gen)
	got, want := make([]float32, m*n), prefilled()
	for i := range got {
		got[i] = float32(math.NaN()) // beta 0: never read
	}
	o.Sgemm(tA, tB, m, n, k, alpha, af, lda, bf, ldb, 0, got, n)
	ref.Sgemm(tA, tB, m, n, k, alpha, af, lda, bf, ldb, 1, want, n)
	same("Sgemm", got, want)

	for _, f := range []struct {
		name  string
		gen   func(*rand.Rand) uint16
		gemm  func(Options, bool, bool, int, int, int, float32, []uint16, int, []uint16, int, float32, []float32, int)
		gemmT func(Options, bool, bool, int, int, int, float32, []uint16, int, []uint16, int, float32, []uint16, int)
		round tileFunc
	}{
		{"bf16", bf16gen, Options.GemmBF16, Options.GemmBF16To, tileBF16Go},
		{"f16", f16gen, Options.GemmF16, Options.GemmF16To, tileF16},
	} {
		a, lda := operand(rng, m, k, tA, 0, f.gen)
		b, ldb := operand(rng, k, n, tB, 0, f.gen)
		got, want := make([]float32, m*n), prefilled()
		f.gemm(o, tA, tB, m, n, k, alpha, a, lda, b, ldb, 0, got, n)
		f.gemm(ref, tA, tB, m, n, k, alpha, a, lda, b, ldb, 1, want, n)
		same(f.name, got, want)
		got16, want16 := make([]uint16, m*n), make([]uint16, m*n)
		for i := range got16 {
			got16[i] = 0x7fc1
		}
		f.gemmT(o, tA, tB, m, n, k, alpha, a, lda, b, ldb, 0, got16, n)
		for i := range want {
			f.round(want16[i:], 1, want[i:], 1, 1, 1, 0)
			if got16[i] != want16[i] {
				t.Fatalf("%s %s to 16 bits: element %d is %#x, want %#x (%v rounded)", name, f.name, i, got16[i], want16[i], want[i])
			}
		}
	}
}

// A bias needs n values and beta 0; Dgemm and triangular products have
// none.
func TestGemmBiasMisuse(t *testing.T) {
	a, c := make([]float32, 16), make([]float32, 16)
	a64, c64 := make([]float64, 16), make([]float64, 16)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"short", func() { Options{Bias: make([]float32, 3)}.Sgemm(false, false, 4, 4, 4, 1, a, 4, a, 4, 0, c, 4) }},
		{"beta", func() { Options{Bias: make([]float32, 4)}.Sgemm(false, false, 4, 4, 4, 1, a, 4, a, 4, 1, c, 4) }},
		{"dgemm", func() { Options{Bias: make([]float32, 4)}.Dgemm(false, false, 4, 4, 4, 1, a64, 4, a64, 4, 0, c64, 4) }},
		{"triangle", func() {
			Options{Bias: make([]float32, 4), Triangle: LowerC}.Sgemm(false, true, 4, 4, 4, 1, a, 4, a, 4, 0, c, 4)
		}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
}
