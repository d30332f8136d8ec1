package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type shape struct{ m, n, k int }

var testShapes = []shape{
	{1, 1, 1}, {1, 37, 5}, {37, 1, 5}, {1, 1, 40}, {5, 7, 1}, {17, 31, 13}, {13, 17, 31},
	{4, 4, 4}, {14, 32, 9}, {15, 33, 10}, {28, 64, 2}, {29, 65, 3}, {6, 16, 8}, {7, 17, 300},
	{45, 70, 300}, {100, 3, 520}, {3, 100, 257}, {64, 64, 64},
	{0, 5, 5}, {5, 0, 5}, {5, 5, 0}, {0, 0, 0},
}

type scal struct {
	alpha, beta float64
	nanC        bool
}

var testScalars = []scal{{1, 0, true}, {0.5, 0, true}, {1.5, -0.5, false}, {0, 2, false}, {0, 0, true}, {1, 1, false}, {-2, 1, false}}

// operand builds storage for an op(X) of rows×cols, transposed or not, with
// padded stride, filled by gen, and returns storage and stride.
func operand[T any](rng *rand.Rand, rows, cols int, trans bool, pad int, gen func(*rand.Rand) T) ([]T, int) {
	r, c := rows, cols
	if trans {
		r, c = cols, rows
	}
	ld := c + pad
	n := 0
	if r > 0 {
		n = (r-1)*ld + c
	}
	s := make([]T, n+pad) // trailing slack, must not be touched either
	for i := range s {
		s[i] = gen(rng)
	}
	return s, ld
}

func at[T any](s []T, ld int, trans bool, i, j int) T {
	if trans {
		return s[j*ld+i]
	}
	return s[i*ld+j]
}

// check compares C against a float64 reference computed from the inputs.
func check[T any](t *testing.T, name string, sh shape, tA, tB bool, sc scal, a []T, lda int, b []T, ldb int, c0, c []float64, ldc int, conv func(T) float64, tol float64) {
	t.Helper()
	bad := 0
	for i := 0; i < sh.m; i++ {
		for j := 0; j < sh.n; j++ {
			var sum, mag float64
			for p := 0; p < sh.k; p++ {
				x := conv(at(a, lda, tA, i, p)) * conv(at(b, ldb, tB, p, j))
				sum += x
				mag += math.Abs(x)
			}
			want := sc.alpha * sum
			bound := math.Abs(sc.alpha) * mag
			if sc.beta != 0 {
				want += sc.beta * c0[i*ldc+j]
				bound += math.Abs(sc.beta * c0[i*ldc+j])
			}
			got := c[i*ldc+j]
			if math.IsNaN(got) || math.Abs(got-want) > tol*bound+1e-30 {
				if bad < 5 {
					t.Errorf("%s %v tA=%v tB=%v %+v: C[%d,%d]=%g want %g", name, sh, tA, tB, sc, i, j, got, want)
				}
				bad++
			}
		}
	}
	// Padding between rows of C and after it must be untouched.
	for i := range c {
		r, col := i/ldc, i%ldc
		if r < sh.m && col < sh.n {
			continue
		}
		if !(c[i] == c0[i] || math.IsNaN(c[i]) && math.IsNaN(c0[i])) {
			t.Fatalf("%s %v: wrote outside C at %d", name, sh, i)
		}
	}
}

func f32gen(r *rand.Rand) float32 { return float32(r.NormFloat64()) }

func toF64[T float32 | float64](s []T) []float64 {
	o := make([]float64, len(s))
	for i, v := range s {
		o[i] = float64(v)
	}
	return o
}

// forAll runs f over every shape, transpose combination, stride and scalar case.
func forAll(t *testing.T, f func(sh shape, tA, tB bool, pad int, sc scal)) {
	for _, sh := range testShapes {
		if testing.Short() && sh.m*sh.n*sh.k > 20000 {
			continue // keeps go test -race -short quick
		}
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for si, sc := range testScalars {
					pad := 0
					if si%2 == 1 {
						pad = 3
					}
					f(sh, tA, tB, pad, sc)
				}
			}
		}
	}
}

func cmatrix(rng *rand.Rand, m, n, pad int, nan bool) ([]float32, int) {
	c, ldc := operand(rng, m, n, false, pad, f32gen)
	if nan {
		for i := range c {
			if i%(ldc) < n {
				c[i] = float32(math.NaN())
			}
		}
	}
	return c, ldc
}

func testSgemm(t *testing.T, name string) {
	rng := rand.New(rand.NewPCG(1, 2))
	forAll(t, func(sh shape, tA, tB bool, pad int, sc scal) {
		a, lda := operand(rng, sh.m, sh.k, tA, pad, f32gen)
		b, ldb := operand(rng, sh.k, sh.n, tB, pad+1, f32gen)
		c, ldc := cmatrix(rng, sh.m, sh.n, pad+2, sc.nanC)
		c0 := toF64(c)
		Sgemm(tA, tB, sh.m, sh.n, sh.k, float32(sc.alpha), a, lda, b, ldb, float32(sc.beta), c, ldc)
		check(t, name, sh, tA, tB, sc, a, lda, b, ldb, c0, toF64(c), ldc, func(v float32) float64 { return float64(v) }, 1e-5)
	})
}

// withEngine runs f with e as the float32 engine, also with a copy of e
// whose cache blocks are tiny so that every blocking loop runs many times.
func withF32Engine(t *testing.T, e *engine[float32, float32, float32], f func(t *testing.T)) {
	old := sgemmEngine
	defer setF32Engine(old)
	setF32Engine(e)
	t.Run(e.name, f)
	tiny := *e
	tiny.mc, tiny.kc, tiny.nc = 2*e.mr, 5*e.kg, 3*e.nr
	tiny.kcOne = 0 // the small blocks above, whatever k
	tiny.name += "-tinyblocks"
	setF32Engine(&tiny)
	t.Run(tiny.name, f)
}

func TestSgemm(t *testing.T) {
	for _, e := range f32Engines {
		withF32Engine(t, e, func(t *testing.T) { testSgemm(t, e.name) })
	}
}

func TestSgemmThreads(t *testing.T) {
	defer SetThreads(SetThreads(2))
	rng := rand.New(rand.NewPCG(3, 4))
	for _, e := range f32Engines {
		withF32Engine(t, e, func(t *testing.T) {
			for _, sh := range []shape{{130, 97, 100}, {97, 130, 100}, {300, 40, 90}, {40, 300, 90}} {
				for _, tA := range []bool{false, true} {
					for _, tB := range []bool{false, true} {
						sc := scal{1.25, 0.5, false}
						a, lda := operand(rng, sh.m, sh.k, tA, 1, f32gen)
						b, ldb := operand(rng, sh.k, sh.n, tB, 2, f32gen)
						c, ldc := cmatrix(rng, sh.m, sh.n, 3, false)
						c0 := toF64(c)
						Sgemm(tA, tB, sh.m, sh.n, sh.k, float32(sc.alpha), a, lda, b, ldb, float32(sc.beta), c, ldc)
						check(t, e.name, sh, tA, tB, sc, a, lda, b, ldb, c0, toF64(c), ldc, func(v float32) float64 { return float64(v) }, 1e-5)
					}
				}
			}
		})
	}
}

func TestDgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	gen := func(r *rand.Rand) float64 { return r.NormFloat64() }
	forAll(t, func(sh shape, tA, tB bool, pad int, sc scal) {
		a, lda := operand(rng, sh.m, sh.k, tA, pad, gen)
		b, ldb := operand(rng, sh.k, sh.n, tB, pad+1, gen)
		c, ldc := operand(rng, sh.m, sh.n, false, pad+2, gen)
		if sc.nanC {
			for i := range c {
				c[i] = math.NaN()
			}
		}
		c0 := append([]float64(nil), c...)
		Dgemm(tA, tB, sh.m, sh.n, sh.k, sc.alpha, a, lda, b, ldb, sc.beta, c, ldc)
		check(t, "dgemm", sh, tA, tB, sc, a, lda, b, ldb, c0, c, ldc, func(v float64) float64 { return v }, 1e-12)
	})
}

func bf16gen(r *rand.Rand) uint16 { return uint16(math.Float32bits(float32(r.NormFloat64())) >> 16) }

func f16gen(r *rand.Rand) uint16 {
	// Mostly normal values of moderate size, some subnormals and zeros.
	switch r.IntN(16) {
	case 0:
		return uint16(r.IntN(1 << 10)) // subnormal or zero
	case 1:
		return 0x8000
	}
	return uint16(r.IntN(2))<<15 | uint16(10+r.IntN(10))<<10 | uint16(r.IntN(1<<10))
}

func testLow(t *testing.T, name string, f func(bool, bool, int, int, int, float32, []uint16, int, []uint16, int, float32, []float32, int), gen func(*rand.Rand) uint16, conv func(uint16) float32) {
	rng := rand.New(rand.NewPCG(7, 8))
	forAll(t, func(sh shape, tA, tB bool, pad int, sc scal) {
		a, lda := operand(rng, sh.m, sh.k, tA, pad, gen)
		b, ldb := operand(rng, sh.k, sh.n, tB, pad+1, gen)
		c, ldc := cmatrix(rng, sh.m, sh.n, pad+2, sc.nanC)
		c0 := toF64(c)
		f(tA, tB, sh.m, sh.n, sh.k, float32(sc.alpha), a, lda, b, ldb, float32(sc.beta), c, ldc)
		check(t, name, sh, tA, tB, sc, a, lda, b, ldb, c0, toF64(c), ldc, func(v uint16) float64 { return float64(conv(v)) }, 1e-5)
	})
}

func TestGemmBF16(t *testing.T) {
	old := bf16Engine
	defer func() { bf16Engine = old }()
	bf16Engine = nil
	t.Run("convert", func(t *testing.T) { testLow(t, "bf16-cvt", GemmBF16, bf16gen, BF16ToF32) })
	for _, e := range bf16Engines {
		bf16Engine = e
		t.Run(e.name, func(t *testing.T) { testLow(t, e.name, GemmBF16, bf16gen, BF16ToF32) })
		tiny := *e
		tiny.mc, tiny.kc, tiny.nc = 2*e.mr, 5*e.kg, 3*e.nr
		tiny.kcOne = 0 // the small blocks above, whatever k
		bf16Engine = &tiny
		t.Run(e.name+"-tinyblocks", func(t *testing.T) { testLow(t, e.name, GemmBF16, bf16gen, BF16ToF32) })
	}
}

func TestGemmF16(t *testing.T) {
	for _, e := range f32Engines {
		withF32Engine(t, e, func(t *testing.T) { testLow(t, "f16", GemmF16, f16gen, F16ToF32) })
	}
}

func TestF16ToF32(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := F16ToF32(uint16(h))
		sign := 1.0
		if h>>15 == 1 {
			sign = -1
		}
		e, man := (h>>10)&0x1f, h&0x3ff
		var want float64
		switch {
		case e == 0x1f && man == 0:
			want = math.Inf(int(sign))
		case e == 0x1f:
			if !math.IsNaN(float64(got)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, got)
			}
			continue
		case e == 0:
			want = sign * math.Ldexp(float64(man), -24)
		default:
			want = sign * math.Ldexp(1+float64(man)/1024, e-15)
		}
		if float64(got) != want || math.Signbit(float64(got)) != (sign < 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestPanicsOnShortSlices(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"short a", func() {
			Sgemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
		{"short b", func() {
			Sgemm(false, true, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 3), 2, 0, make([]float32, 4), 2)
		}},
		{"short c", func() {
			Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		}},
		{"small ldc", func() {
			Sgemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 4), 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.f()
		})
	}
}

func TestSetThreads(t *testing.T) {
	old := SetThreads(3)
	if got := SetThreads(0); got != 3 {
		t.Fatalf("SetThreads returned %d, want 3", got)
	}
	if got := SetThreads(old); got != 1 {
		t.Fatalf("SetThreads(0) stored %d, want 1", got)
	}
}

func TestSgemmNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, thr := range []int{1, 2} {
		t.Run(fmt.Sprint("threads", thr), func(t *testing.T) {
			defer SetThreads(SetThreads(thr))
			n := 128
			a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
			f := func() { Sgemm(false, true, n, n, n, 1, a, n, b, n, 0, c, n) }
			f()
			if allocs := testing.AllocsPerRun(20, f); allocs != 0 {
				t.Errorf("Sgemm %dx%dx%d allocates %v times per call", n, n, n, allocs)
			}
		})
	}
}

// testLow16 checks a product with a 16-bit C against the float64
// reference, within the inputs' tolerance plus one rounding of the result.
func testLow16(t *testing.T, name string, f func(bool, bool, int, int, int, float32, []uint16, int, []uint16, int, float32, []uint16, int), gen func(*rand.Rand) uint16, conv func(uint16) float32, nan uint16, tol float64) {
	rng := rand.New(rand.NewPCG(9, 10))
	widen := func(s []uint16) []float64 {
		o := make([]float64, len(s))
		for i, v := range s {
			o[i] = float64(conv(v))
		}
		return o
	}
	forAll(t, func(sh shape, tA, tB bool, pad int, sc scal) {
		a, lda := operand(rng, sh.m, sh.k, tA, pad, gen)
		b, ldb := operand(rng, sh.k, sh.n, tB, pad+1, gen)
		c, ldc := operand(rng, sh.m, sh.n, false, pad+2, gen)
		if sc.nanC {
			for i := range c {
				if i%ldc < sh.n {
					c[i] = nan
				}
			}
		}
		c0 := widen(c)
		f(tA, tB, sh.m, sh.n, sh.k, float32(sc.alpha), a, lda, b, ldb, float32(sc.beta), c, ldc)
		check(t, name, sh, tA, tB, sc, a, lda, b, ldb, c0, widen(c), ldc, func(v uint16) float64 { return float64(conv(v)) }, tol)
	})
}

func TestGemmBF16To(t *testing.T) {
	old, oldTile := bf16Engine, tileBF16
	defer func() { bf16Engine, tileBF16 = old, oldTile }()
	const tol = 1.0 / 256 // one bfloat16 rounding of the result
	for _, tile := range []struct {
		name string
		fn   tileFunc
	}{{"go", tileBF16Go}, {"native", oldTile}} {
		tileBF16 = tile.fn
		bf16Engine = nil
		t.Run(tile.name+"/convert", func(t *testing.T) {
			testLow16(t, "bf16-cvt", Options{Threads: 2}.GemmBF16To, bf16gen, BF16ToF32, 0x7fc0, tol)
		})
		for _, e := range bf16Engines {
			bf16Engine = e
			for _, threads := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/threads=%d", tile.name, e.name, threads), func(t *testing.T) {
					testLow16(t, e.name, Options{Threads: threads}.GemmBF16To, bf16gen, BF16ToF32, 0x7fc0, tol)
				})
			}
			tiny := *e // k spans several K blocks: partial sums in scratch
			tiny.mc, tiny.kc, tiny.nc = 2*e.mr, 5*e.kg, 3*e.nr
			tiny.kcOne = 0 // the small blocks above, whatever k
			bf16Engine = &tiny
			t.Run(tile.name+"/"+e.name+"-tinyblocks", func(t *testing.T) {
				testLow16(t, e.name, Options{Threads: 2}.GemmBF16To, bf16gen, BF16ToF32, 0x7fc0, tol)
			})
		}
	}
}

// TestTileBF16 checks the vector tile rounding against the Go one bit for
// bit, at every width up to a tile's, with and without beta, including
// ties, NaN and infinities.
func TestTileBF16(t *testing.T) {
	const rows, ld = 3, 40
	src := make([]float32, rows*ld)
	for i := range src {
		src[i] = math.Float32frombits(uint32(0x3f800000 + i*0x8000 + (i%3)*0x7fff)) // ties and near-ties
	}
	src[5], src[6], src[7] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
	for cols := 0; cols <= maxTileCols; cols++ {
		for _, beta := range []float32{0, 1, -0.5} {
			c1, c2 := make([]uint16, rows*ld), make([]uint16, rows*ld)
			for i := range c1 {
				c1[i] = uint16(0x3f00 + i)
				c2[i] = c1[i]
			}
			t1, t2 := append([]float32(nil), src...), append([]float32(nil), src...)
			tileBF16Go(c1, ld, t1, ld, rows, cols, beta)
			tileBF16(c2, ld, t2, ld, rows, cols, beta)
			for i := range c1 {
				if c1[i] != c2[i] {
					t.Fatalf("cols=%d beta=%v: element %d: %#04x, want %#04x", cols, beta, i, c2[i], c1[i])
				}
			}
		}
	}
}

func TestGemmF16To(t *testing.T) {
	// Values of at most 3 significant bits below 1, so no sum overflows
	// half precision.
	gen := func(r *rand.Rand) uint16 { return f32ToF16(float32(r.IntN(15)-7) / 8) }
	for _, e := range f32Engines {
		withF32Engine(t, e, func(t *testing.T) {
			testLow16(t, "f16", Options{Threads: 2}.GemmF16To, gen, F16ToF32, 0x7e00, 1.0/1024)
		})
	}
}

// GemmBF16To gives the bits of GemmBF16 into a float32 C rounded to
// bfloat16 afterwards, whichever path writes a tile (whole tiles straight
// from the micro-kernel, edge tiles through a float32 tile): with beta 0,
// and with beta·C where k is one K block (over several, GemmBF16 adds C to
// the first block's sums, GemmBF16To to the last's).
func TestGemmBF16ToRoundsAsGemmBF16(t *testing.T) {
	oneBlock := func(k int) bool {
		if bf16Engine != nil {
			_, kc := bf16Engine.blocks(k)
			return k <= kc
		}
		_, kc := bf16CvtEngine.blocks(k)
		return k <= kc
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, tc := range []struct {
		m, n, k int
		beta    float32
	}{
		{14, 32, 64, 0}, {28, 64, 384, 0.5}, {29, 70, 130, 0}, {29, 70, 130, -1},
		{100, 96, 1536, 0.25}, {100, 96, 1536, 0}, {33, 40, 1600, 0},
	} {
		if tc.beta != 0 && !oneBlock(tc.k) {
			continue
		}
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				for _, threads := range []int{1, 2} {
					a, lda := operand(rng, tc.m, tc.k, tA, 0, bf16gen)
					b, ldb := operand(rng, tc.k, tc.n, tB, 0, bf16gen)
					c16 := make([]uint16, tc.m*tc.n)
					for i := range c16 {
						c16[i] = bf16gen(rng)
					}
					c32 := make([]float32, len(c16))
					for i, v := range c16 {
						c32[i] = BF16ToF32(v)
					}
					o := Options{Threads: threads}
					o.GemmBF16To(tA, tB, tc.m, tc.n, tc.k, 0.75, a, lda, b, ldb, tc.beta, c16, tc.n)
					o.GemmBF16(tA, tB, tc.m, tc.n, tc.k, 0.75, a, lda, b, ldb, tc.beta, c32, tc.n)
					for i, v := range c32 {
						if want := roundBF16(v); c16[i] != want {
							t.Fatalf("m=%d n=%d k=%d beta=%v tA=%v tB=%v threads=%d: C[%d,%d] = %#04x, GemmBF16 rounded %#04x",
								tc.m, tc.n, tc.k, tc.beta, tA, tB, threads, i/tc.n, i%tc.n, c16[i], want)
						}
					}
				}
			}
		}
	}
}

// TestGemm16StripsAreBitwise: a 16-bit product whose k spans several K
// blocks keeps its float32 partial sums in strips of at most accElems
// elements; strips of a few tiles (rows only, and rows and columns) give
// the same bits as one strip, for full and triangular products.
func TestGemm16StripsAreBitwise(t *testing.T) {
	defer func(old int) { accElems = old }(accElems)
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 77, 90, 1700 // k > every kcOne
	a, lda := operand(rng, m, k, false, 0, bf16gen)
	b, ldb := operand(rng, k, n, true, 0, bf16gen)
	for _, c := range []struct {
		name string
		f    func(c []uint16)
	}{
		{"full", func(c []uint16) { Options{Threads: 2}.GemmBF16To(false, true, m, n, k, 1, a, lda, b, ldb, 0.5, c, n) }},
		{"f16", func(c []uint16) { Options{Threads: 1}.GemmF16To(false, true, m, n, k, 1, a, lda, b, ldb, 0, c, n) }},
		{"lowerC", func(c []uint16) {
			Options{Threads: 2, Triangle: LowerC}.GemmBF16To(false, true, m, m, k, 1, a, lda, a, lda, 0, c, n)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(limit int) []uint16 {
				accElems = limit
				out := make([]uint16, m*n)
				for i := range out {
					out[i] = bf16gen(rng)
				}
				c.f(out)
				return out
			}
			rng = rand.New(rand.NewPCG(5, 6))
			want := run(1 << 30)
			// Row strips; then (a row of 14×32 tiles being wider) row and
			// column strips.
			for _, limit := range []int{40 * 90, 14 * 64} {
				rng = rand.New(rand.NewPCG(5, 6))
				got := run(limit)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("accElems %d: C[%d,%d] = %#04x, one strip gives %#04x", limit, i/n, i%n, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestGemm16ToNoAllocs: a product with a 16-bit C allocates nothing per
// call once its workspaces have grown, with k in one K block or several
// (the partial-sum strips come from a pool too).
func TestGemm16ToNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, k := range []int{256, 2048} {
		for _, thr := range []int{1, 2} {
			t.Run(fmt.Sprintf("k=%d/threads=%d", k, thr), func(t *testing.T) {
				const m, n = 96, 128
				a, b, c := make([]uint16, m*k), make([]uint16, n*k), make([]uint16, m*n)
				f := func() { Options{Threads: thr}.GemmBF16To(false, true, m, n, k, 1, a, k, b, k, 0, c, n) }
				f()
				if allocs := testing.AllocsPerRun(20, f); allocs != 0 {
					t.Errorf("GemmBF16To %dx%dx%d allocates %v times per call", m, n, k, allocs)
				}
			})
		}
	}
}
