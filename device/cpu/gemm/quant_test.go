package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/x448/float16"

	"github.com/memfit/memfit/device"
)

// quantOf quantizes a rows×cols matrix of normal values (each row its own
// scale) with device's reference definitions and returns it as a Quant
// with the values it stands for.
func quantOf(t testing.TB, f QuantFormat, rows, cols int, seed uint64) (*Quant, []float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i/cols%5-3)))
	}
	vals := make([]float32, len(x))
	q := &Quant{Format: f, Rows: rows, Cols: cols}
	if f == NF4 {
		p, err := device.QuantizeNF4(x)
		if err != nil {
			t.Fatal(err)
		}
		q.Codes, q.AbsmaxCodes, q.Nested, q.Offset, q.Levels, q.Map = p.Codes, p.AbsmaxCodes, p.Nested, p.Offset, &p.Levels, &p.Map
		for i := range vals {
			vals[i] = p.Value(i)
		}
	} else {
		p, err := device.QuantizeInt8(x)
		if err != nil {
			t.Fatal(err)
		}
		q.Absmax = p.Absmax
		q.Codes = make([]byte, len(p.Codes))
		for i, c := range p.Codes {
			q.Codes[i] = byte(c)
		}
		for i := range vals {
			vals[i] = p.Value(i)
		}
	}
	return q, vals
}

// TestQuantDecodeIsTheDefinition decodes rows and parts of rows at every
// alignment, in each target format, and compares with device's
// definition of each value rounded once (nearest even).
func TestQuantDecodeIsTheDefinition(t *testing.T) {
	for _, f := range []QuantFormat{NF4, Int8} {
		for _, cols := range []int{64, 100, 333} {
			q, vals := quantOf(t, f, 7, cols, uint64(cols))
			t.Run(fmt.Sprintf("%d/%d", f, cols), func(t *testing.T) {
				for r := range q.Rows {
					for _, span := range [][2]int{{0, cols}, {1, cols}, {3, 40}, {17, cols - 5}, {cols - 1, cols}} {
						c0, c1 := span[0], span[1]
						n := c1 - c0
						f32, f64 := make([]float32, n), make([]float64, n)
						b16, h16 := make([]uint16, n), make([]uint16, n)
						q.DecodeF32(f32, r, c0)
						q.DecodeF64(f64, r, c0)
						q.DecodeBF16(b16, r, c0)
						q.DecodeF16(h16, r, c0)
						for i := range n {
							v := vals[r*cols+c0+i]
							if math.Float32bits(f32[i]) != math.Float32bits(v) || f64[i] != float64(v) ||
								b16[i] != bf16Round(v) || h16[i] != float16.Fromfloat32(v).Bits() {
								t.Fatalf("row %d column %d: f32 %v f64 %v bf16 %#x f16 %#x, want %v (bf16 %#x f16 %#x)",
									r, c0+i, f32[i], f64[i], b16[i], h16[i], v, bf16Round(v), float16.Fromfloat32(v).Bits())
							}
						}
					}
				}
			})
		}
	}
}

// TestQuantProductsEqualDense holds every quantized product to the dense
// product of the same engine over B's decoded values, bit for bit: the
// decoded panel is packed by the engine's own packer, so the two differ
// only in where B's values come from. Shapes cover partial panels and
// K blocks, both orientations of B, a bias, and a split over threads.
func TestQuantProductsEqualDense(t *testing.T) {
	shapes := []struct{ m, n, k int }{{5, 7, 64}, {33, 70, 100}, {40, 96, 600}, {129, 200, 1700}}
	for _, f := range []QuantFormat{NF4, Int8} {
		for _, s := range shapes {
			for _, transB := range []bool{true, false} {
				for _, transA := range []bool{false, true} {
					name := fmt.Sprintf("%d/%dx%dx%d/tA=%v/tB=%v", f, s.m, s.n, s.k, transA, transB)
					t.Run(name, func(t *testing.T) {
						checkQuantProduct(t, f, s.m, s.n, s.k, transA, transB)
					})
				}
			}
		}
	}
}

// TestQuantProductsInStrips: a 16-bit C whose k spans several K blocks
// is computed in strips of partial sums, of rows for a dense B and of
// columns for a quantized one (of rows too when A is much taller than B
// is wide); the bits are the same.
func TestQuantProductsInStrips(t *testing.T) {
	defer func(old int) { accElems = old }(accElems)
	for _, limit := range []int{4096, 20000} {
		accElems = limit
		for _, n := range []int{200, 40} {
			for _, transB := range []bool{true, false} {
				checkQuantProduct(t, NF4, 129, n, 1700, false, transB)
			}
		}
	}
}

func checkQuantProduct(t *testing.T, f QuantFormat, m, n, k int, transA, transB bool) {
	rows, cols := k, n
	if transB {
		rows, cols = n, k
	}
	q, _ := quantOf(t, f, rows, cols, uint64(m*n+k))
	rng := rand.New(rand.NewPCG(uint64(m), uint64(k)))
	a, lda := operand(rng, m, k, transA, 0, func(r *rand.Rand) float32 { return float32(r.NormFloat64()) })
	a16 := make([]uint16, len(a))
	h16 := make([]uint16, len(a))
	a64 := make([]float64, len(a))
	for i, v := range a {
		a16[i], h16[i], a64[i] = bf16Round(v), float16.Fromfloat32(v).Bits(), float64(v)
	}
	// B's values in each format, dense.
	b32 := make([]float32, rows*cols)
	b16 := make([]uint16, rows*cols)
	bh := make([]uint16, rows*cols)
	b64 := make([]float64, rows*cols)
	for r := range rows {
		q.DecodeF32(b32[r*cols:(r+1)*cols], r, 0)
		q.DecodeBF16(b16[r*cols:(r+1)*cols], r, 0)
		q.DecodeF16(bh[r*cols:(r+1)*cols], r, 0)
		q.DecodeF64(b64[r*cols:(r+1)*cols], r, 0)
	}
	bias := make([]float32, n)
	for i := range bias {
		bias[i] = float32(i%7) - 3
	}
	for _, threads := range []int{1, 3} {
		for _, withBias := range []bool{false, true} {
			o := Options{Threads: threads}
			if withBias {
				o.Bias = bias
			}
			beta := float32(0.5)
			if withBias {
				beta = 0
			}
			c0 := make([]float32, m*n)
			for i := range c0 {
				c0[i] = float32(i % 5)
			}
			want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
			o.Sgemm(transA, transB, m, n, k, 1.5, a, lda, b32, cols, beta, want, n)
			o.SgemmQ(transA, transB, m, n, k, 1.5, a, lda, q, beta, got, n)
			sameBits(t, "SgemmQ", got, want)

			want, got = append([]float32(nil), c0...), append([]float32(nil), c0...)
			o.GemmBF16(transA, transB, m, n, k, 1.5, a16, lda, b16, cols, beta, want, n)
			o.GemmBF16Q(transA, transB, m, n, k, 1.5, a16, lda, q, beta, got, n)
			sameBits(t, "GemmBF16Q", got, want)

			want, got = append([]float32(nil), c0...), append([]float32(nil), c0...)
			o.GemmF16(transA, transB, m, n, k, 1.5, h16, lda, bh, cols, beta, want, n)
			o.GemmF16Q(transA, transB, m, n, k, 1.5, h16, lda, q, beta, got, n)
			sameBits(t, "GemmF16Q", got, want)

			w16, g16 := make([]uint16, m*n), make([]uint16, m*n)
			for i := range w16 {
				w16[i] = bf16Round(c0[i])
				g16[i] = w16[i]
			}
			o.GemmBF16To(transA, transB, m, n, k, 1.5, a16, lda, b16, cols, beta, w16, n)
			o.GemmBF16ToQ(transA, transB, m, n, k, 1.5, a16, lda, q, beta, g16, n)
			sameU16(t, "GemmBF16ToQ", g16, w16)

			for i := range w16 {
				w16[i] = float16.Fromfloat32(c0[i]).Bits()
				g16[i] = w16[i]
			}
			o.GemmF16To(transA, transB, m, n, k, 1.5, h16, lda, bh, cols, beta, w16, n)
			o.GemmF16ToQ(transA, transB, m, n, k, 1.5, h16, lda, q, beta, g16, n)
			sameU16(t, "GemmF16ToQ", g16, w16)

			if !withBias {
				w64, g64 := make([]float64, m*n), make([]float64, m*n)
				o.Dgemm(transA, transB, m, n, k, 1.5, a64, lda, b64, cols, 0.5, w64, n)
				o.DgemmQ(transA, transB, m, n, k, 1.5, a64, lda, q, 0.5, g64, n)
				for i := range w64 {
					if w64[i] != g64[i] {
						t.Fatalf("DgemmQ[%d] = %v, dense %v", i, g64[i], w64[i])
					}
				}
			}
		}
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, the dense product gives %v", what, i, got[i], want[i])
		}
	}
}

func sameU16(t *testing.T, what string, got, want []uint16) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s[%d] = %#x, the dense product gives %#x", what, i, got[i], want[i])
		}
	}
}

// TestQuantProductRefusesWrongShapes: a B whose stored shape does not fit
// op(B), or whose slices are short, panics (a caller's bug).
func TestQuantProductRefusesWrongShapes(t *testing.T) {
	q, _ := quantOf(t, NF4, 8, 64, 1)
	a := make([]float32, 4*64)
	c := make([]float32, 4*8)
	for name, f := range map[string]func(){
		"orientation": func() { Options{}.SgemmQ(false, false, 4, 8, 64, 1, a, 64, q, 0, c, 8) },
		"short codes": func() {
			s := *q
			s.Codes = s.Codes[:10]
			Options{}.SgemmQ(false, true, 4, 8, 64, 1, a, 64, &s, 0, c, 8)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestQuantProductNoAllocs(t *testing.T) {
	q, _ := quantOf(t, NF4, 256, 512, 3)
	a := make([]uint16, 64*512)
	c := make([]uint16, 64*256)
	o := Options{Threads: 2}
	o.GemmBF16ToQ(false, true, 64, 256, 512, 1, a, 512, q, 0, c, 256)
	if n := testing.AllocsPerRun(20, func() {
		o.GemmBF16ToQ(false, true, 64, 256, 512, 1, a, 512, q, 0, c, 256)
		o.GemmBF16ToQ(false, false, 64, 512, 256, 1, c, 256, q, 0, a, 512)
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

// BenchmarkQuantLinear times a Linear layer's products at Llama-8B's
// shapes in bf16 (GemmBF16To: bf16 activations and output) against the
// same products with the weight in NF4 and Int8: forward x·Wᵀ (fwd) and
// the input gradient dy·W (dx). Each iteration runs the three once, in
// turn, and the metrics are the least time of each and the ratios of
// those. With -cpu 1 a product runs on the benchmark's own locked thread
// and is timed by that thread's CPU clock (Linux), so that on a machine
// shared with other work the ratios compare the products, not the
// moments' loads; with more threads they are wall times. BENCHMARKS.md
// has the figures.
func BenchmarkQuantLinear(b *testing.B) {
	for _, s := range []struct{ m, in, out int }{{256, 4096, 14336}, {1024, 4096, 14336}, {2048, 4096, 14336}, {1024, 14336, 4096}, {1024, 4096, 4096}} {
		rng := rand.New(rand.NewPCG(1, 2))
		w := make([]uint16, s.out*s.in)
		xs := make([]float32, len(w))
		for i := range w {
			w[i] = bf16Round(float32(rng.NormFloat64() * 0.02))
			xs[i] = BF16ToF32(w[i])
		}
		x := make([]uint16, s.m*max(s.in, s.out))
		for i := range x {
			x[i] = bf16Round(float32(rng.NormFloat64()))
		}
		y := make([]uint16, s.m*max(s.in, s.out))
		nf := &Quant{Format: NF4, Rows: s.out, Cols: s.in}
		p4, _ := device.QuantizeNF4(xs)
		nf.Codes, nf.AbsmaxCodes, nf.Nested, nf.Offset, nf.Levels, nf.Map = p4.Codes, p4.AbsmaxCodes, p4.Nested, p4.Offset, &p4.Levels, &p4.Map
		i8 := &Quant{Format: Int8, Rows: s.out, Cols: s.in}
		p8, _ := device.QuantizeInt8(xs)
		i8.Absmax = p8.Absmax
		i8.Codes = make([]byte, len(p8.Codes))
		for i, c := range p8.Codes {
			i8.Codes[i] = byte(c)
		}
		o := Options{Threads: int(threads.Load())}
		for _, dir := range []string{"fwd", "dx"} {
			m, n, k, transB := s.m, s.out, s.in, true
			if dir == "dx" {
				n, k, transB = s.in, s.out, false
			}
			b.Run(fmt.Sprintf("%s_%dx%dx%d", dir, m, k, n), func(b *testing.B) {
				clock := func() time.Duration { return time.Duration(time.Now().UnixNano()) }
				if o.Threads == 1 {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					if _, ok := threadTime(); ok {
						clock = func() time.Duration { t, _ := threadTime(); return t }
					}
				}
				best := [3]time.Duration{math.MaxInt64, math.MaxInt64, math.MaxInt64}
				for b.Loop() {
					for v, q := range []*Quant{nil, nf, i8} {
						start := clock()
						if q == nil {
							o.GemmBF16To(false, transB, m, n, k, 1, x, k, w, s.in, 0, y, n)
						} else {
							o.GemmBF16ToQ(false, transB, m, n, k, 1, x, k, q, 0, y, n)
						}
						best[v] = min(best[v], clock()-start)
					}
				}
				b.ReportMetric(float64(best[0].Microseconds())/1e3, "bf16-ms")
				b.ReportMetric(float64(best[1])/float64(best[0]), "nf4/bf16")
				b.ReportMetric(float64(best[2])/float64(best[0]), "int8/bf16")
				b.ReportMetric(2*float64(m)*float64(n)*float64(k)/best[0].Seconds()/1e9, "bf16-GFLOP/s")
			})
		}
	}
}
