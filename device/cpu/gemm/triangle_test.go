package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// triProduct is a product under test: it computes C from row-major A
// (m×k) and B (k×n) into row-major C (m×n), or (for 16-bit outputs) into
// C's float64 values.
type triProduct func(o Options, transA, transB bool, m, n, k int, a, b []float32, lda, ldb int) []float64

// TestTriangles: LowerC computes C's lower triangle and zeroes the rest;
// LowerA and UpperA skip the zeros of a triangular op(A) and give the full
// product. Every engine, split over goroutines or not, transposed or not,
// at sizes around the micro-tile and the K block.
func TestTriangles(t *testing.T) {
	products := map[string]triProduct{
		"sgemm": func(o Options, tA, tB bool, m, n, k int, a, b []float32, lda, ldb int) []float64 {
			c := make([]float32, m*n)
			for i := range c {
				c[i] = float32(math.NaN()) // beta 0 ignores what C held
			}
			o.Sgemm(tA, tB, m, n, k, 1, a, lda, b, ldb, 0, c, n)
			return toF64(c)
		},
		"bf16to": func(o Options, tA, tB bool, m, n, k int, a, b []float32, lda, ldb int) []float64 {
			a16, b16 := toBF16(a), toBF16(b)
			c := make([]uint16, m*n)
			for i := range c {
				c[i] = 0x7fc0
			}
			o.GemmBF16To(tA, tB, m, n, k, 1, a16, lda, b16, ldb, 0, c, n)
			out := make([]float64, len(c))
			for i, v := range c {
				out[i] = float64(BF16ToF32(v))
			}
			return out
		},
	}
	oldF32, oldBF16 := sgemmEngine, bf16Engine
	defer func() { setF32Engine(oldF32); bf16Engine = oldBF16 }()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{1, 13, 15, 33, 64, 100, 300} {
		for _, tri := range []Triangle{LowerC, LowerA, UpperA} {
			for _, tA := range []bool{false, true} {
				for _, threads := range []int{1, 3} {
					m, n, k := size, size+5, size // LowerA/UpperA: m == k
					if tri == LowerC {
						n, k = size, size+3
					}
					// Small integers: every product is exact in float32 and
					// bfloat16, so results must match the reference exactly.
					a := make([]float32, m*k)
					b := make([]float32, k*n)
					for i := range a {
						a[i] = float32(rng.IntN(7) - 3)
					}
					for i := range b {
						b[i] = float32(rng.IntN(5) - 2)
					}
					for i := 0; i < m; i++ {
						for p := 0; p < k; p++ {
							if tri == LowerA && p > i || tri == UpperA && p < i {
								a[i*k+p] = 0
							}
						}
					}
					want := make([]float64, m*n)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							if tri == LowerC && j > i {
								continue
							}
							for p := 0; p < k; p++ {
								want[i*n+j] += float64(a[i*k+p]) * float64(b[p*n+j])
							}
						}
					}
					as, lda := a, k
					if tA { // store A transposed
						as, lda = make([]float32, k*m), m
						for i := 0; i < m; i++ {
							for p := 0; p < k; p++ {
								as[p*m+i] = a[i*k+p]
							}
						}
					}
					for name, f := range products {
						for _, eng := range engineVariants(name) {
							eng.use()
							label := fmt.Sprintf("%s/%s/%v/size=%d/tA=%v/threads=%d", name, eng.name, tri, size, tA, threads)
							got := f(Options{Threads: threads, Triangle: tri}, tA, false, m, n, k, as, b, lda, n)
							for i := range want {
								if got[i] != want[i] {
									t.Fatalf("%s: C[%d,%d] = %v, want %v", label, i/n, i%n, got[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

func (t Triangle) String() string {
	return [...]string{"Full", "LowerC", "LowerA", "UpperA"}[t]
}

type engineVariant struct {
	name string
	use  func()
}

// engineVariants lists the engines a product can run on, with a variant
// of tiny blocks that makes k span several K blocks.
func engineVariants(product string) []engineVariant {
	var out []engineVariant
	if product == "sgemm" {
		for _, e := range f32Engines {
			tiny := *e
			tiny.mc, tiny.kc, tiny.nc = 2*e.mr, 7*e.kg, 3*e.nr
			tiny.kcOne = 0 // the small blocks above, whatever k
			out = append(out, engineVariant{e.name, func() { setF32Engine(e) }},
				engineVariant{e.name + "-tiny", func() { setF32Engine(&tiny) }})
		}
		return out
	}
	out = append(out, engineVariant{"convert", func() { bf16Engine = nil }})
	for _, e := range bf16Engines {
		tiny := *e
		tiny.mc, tiny.kc, tiny.nc = 2*e.mr, 7*e.kg, 3*e.nr
		tiny.kcOne = 0 // the small blocks above, whatever k
		out = append(out, engineVariant{e.name, func() { bf16Engine = e }},
			engineVariant{e.name + "-tiny", func() { bf16Engine = &tiny }})
	}
	return out
}

func toBF16(s []float32) []uint16 {
	o := make([]uint16, len(s))
	for i, v := range s {
		o[i] = roundBF16(v)
	}
	return o
}
