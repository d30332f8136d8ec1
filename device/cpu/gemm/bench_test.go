package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchShape is one product of a model layer: op(A) m×k, op(B) k×n.
type benchShape struct {
	name           string
	m, n, k        int
	transA, transB bool
	batch          int
}

// modelShapes are the products of the MLP (batch 256, 784-1024-1024-10) and
// the GPT (4096 tokens, d 384, 6 heads of 64, context 256) with their
// backward products: dX = dY·Wᵀ (transB) and dW = Xᵀ·dY (transA).
var modelShapes = func() []benchShape {
	var s []benchShape
	layer := func(net string, m, k, n int) {
		s = append(s,
			benchShape{name: fmt.Sprintf("%s/fwd_%dx%dx%d", net, m, k, n), m: m, k: k, n: n},
			benchShape{name: fmt.Sprintf("%s/dx_%dx%dx%d", net, m, n, k), m: m, k: n, n: k, transB: true},
			benchShape{name: fmt.Sprintf("%s/dw_%dx%dx%d", net, k, m, n), m: k, k: m, n: n, transA: true})
	}
	layer("mlp", 256, 784, 1024)
	layer("mlp", 256, 1024, 1024)
	layer("mlp", 256, 1024, 10)
	layer("gpt", 4096, 384, 1152)
	layer("gpt", 4096, 384, 384)
	layer("gpt", 4096, 384, 1536)
	layer("gpt", 4096, 1536, 384)
	s = append(s,
		benchShape{name: "gpt/attn_qk_96x256x64x256", m: 256, k: 64, n: 256, transB: true, batch: 96},
		benchShape{name: "gpt/attn_av_96x256x256x64", m: 256, k: 256, n: 64, batch: 96})
	return s
}()

var squareSizes = []int{256, 512, 1024, 2048}

// gemmFunc runs one product on operands of element type T.
type gemmFunc[T any] func(transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []float32, ldc int)

// benchCase is one shape's operands: distinct A and B per batch entry, as
// in attention.
type benchCase[T any] struct {
	s        benchShape
	as, bs   [][]T
	lda, ldb int
	c        []float32
}

func newBenchCase[T any](s benchShape, gen func(*rand.Rand) T) *benchCase[T] {
	rng := rand.New(rand.NewPCG(1, 1))
	batch := max(s.batch, 1)
	a, lda := operand(rng, s.m, s.k, s.transA, 0, gen)
	bb, ldb := operand(rng, s.k, s.n, s.transB, 0, gen)
	bc := &benchCase[T]{s: s, as: make([][]T, batch), bs: make([][]T, batch), lda: lda, ldb: ldb, c: make([]float32, s.m*s.n)}
	for i := range bc.as {
		bc.as[i] = append([]T(nil), a...)
		bc.bs[i] = append([]T(nil), bb...)
	}
	return bc
}

// run computes every product of the batch with f.
func (bc *benchCase[T]) run(f gemmFunc[T]) {
	s := bc.s
	for i := range bc.as {
		f(s.transA, s.transB, s.m, s.n, s.k, bc.as[i], bc.lda, bc.bs[i], bc.ldb, bc.c, s.n)
	}
}

// flops is the floating-point operations of one run.
func (bc *benchCase[T]) flops() float64 {
	return 2 * float64(bc.s.m) * float64(bc.s.n) * float64(bc.s.k) * float64(len(bc.as))
}

func benchOne[T any](b *testing.B, s benchShape, gen func(*rand.Rand) T, f gemmFunc[T]) {
	bc := newBenchCase(s, gen)
	b.ResetTimer()
	for b.Loop() {
		bc.run(f)
	}
	b.ReportMetric(bc.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchAll[T any](b *testing.B, gen func(*rand.Rand) T, f gemmFunc[T], setThreads func(int) int, models bool) {
	for _, n := range squareSizes {
		for _, thr := range []int{1, 2} {
			b.Run(fmt.Sprintf("square/n=%d/threads=%d", n, thr), func(b *testing.B) {
				defer setThreads(setThreads(thr))
				benchOne(b, benchShape{m: n, n: n, k: n}, gen, f)
			})
		}
	}
	if !models {
		return
	}
	for _, s := range modelShapes {
		for _, thr := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s.name, thr), func(b *testing.B) {
				defer setThreads(setThreads(thr))
				benchOne(b, s, gen, f)
			})
		}
	}
}

func BenchmarkSgemm(b *testing.B) {
	benchAll(b, f32gen, func(tA, tB bool, m, n, k int, a []float32, lda int, bb []float32, ldb int, c []float32, ldc int) {
		Sgemm(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}, SetThreads, true)
}

func BenchmarkGemmBF16(b *testing.B) {
	benchAll(b, bf16gen, func(tA, tB bool, m, n, k int, a []uint16, lda int, bb []uint16, ldb int, c []float32, ldc int) {
		GemmBF16(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}, SetThreads, true)
}

func BenchmarkGemmF16(b *testing.B) {
	gen := func(r *rand.Rand) uint16 { return f32ToF16(float32(r.NormFloat64())) }
	benchAll(b, gen, func(tA, tB bool, m, n, k int, a []uint16, lda int, bb []uint16, ldb int, c []float32, ldc int) {
		GemmF16(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}, SetThreads, false)
}

func BenchmarkDgemm(b *testing.B) {
	for _, n := range []int{128, 256} {
		b.Run(fmt.Sprintf("square/n=%d", n), func(b *testing.B) {
			x := make([]float64, n*n)
			for i := range x {
				x[i] = float64(i%7) - 3
			}
			c := make([]float64, n*n)
			for b.Loop() {
				Dgemm(false, false, n, n, n, 1, x, n, x, n, 0, c, n)
			}
			b.ReportMetric(2*math.Pow(float64(n), 3)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// f32ToF16 rounds a normal-range float32 to half precision by truncation
// (good enough for benchmark data).
func f32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	e := int(u>>23&0xff) - 127 + 15
	if e <= 0 {
		return sign
	}
	if e >= 0x1f {
		return sign | 0x7c00
	}
	return sign | uint16(e)<<10 | uint16(u>>13&0x3ff)
}

// BenchmarkGemmBF16To runs the GPT's products with a bfloat16 C, as the
// CPU device runs them under bf16 autocast (compare GemmBF16/gpt/…/threads=2).
func BenchmarkGemmBF16To(b *testing.B) {
	for _, s := range modelShapes {
		if s.name[:3] != "gpt" {
			continue
		}
		b.Run(s.name+"/threads=2", func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			batch := max(s.batch, 1)
			a, lda := operand(rng, s.m, s.k, s.transA, 0, bf16gen)
			bb, ldb := operand(rng, s.k, s.n, s.transB, 0, bf16gen)
			c := make([]uint16, s.m*s.n)
			for b.Loop() {
				for i := 0; i < batch; i++ {
					Options{Threads: 2}.GemmBF16To(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
				}
			}
			flops := 2 * float64(s.m) * float64(s.n) * float64(s.k) * float64(batch)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
