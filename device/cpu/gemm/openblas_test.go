//go:build openblas && cgo

package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu/gemm/internal/openblas"
)

// BenchmarkOpenBLAS runs the square and model-shape benchmarks through
// cblas_sgemm so that one `go test -tags openblas -bench 'Sgemm|OpenBLAS'`
// run measures the ratio. Unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE to get its AVX-512
// kernel on this machine.
func BenchmarkOpenBLAS(b *testing.B) {
	defer openblas.SetThreads(openblas.SetThreads(1))
	benchAll(b, f32gen, func(tA, tB bool, m, n, k int, a []float32, lda int, bb []float32, ldb int, c []float32, ldc int) {
		openblas.Sgemm(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}, openblas.SetThreads, true)
}

// BenchmarkSgemmVsOpenBLAS alternates memfit's Sgemm and OpenBLAS's on the
// same operands, a block of about 50 ms of each per iteration, so that both
// see the machine in the same state (this VM's throughput drifts by 10-15%
// over minutes, which separate benchmarks read as a difference between the
// libraries). It reports each one's GFLOP/s and memfit's speed as a
// fraction of OpenBLAS's. A pause follows each block: OpenBLAS's idle
// threads spin for up to 2^28 cycles (OPENBLAS_THREAD_TIMEOUT) after a
// call, and on two cores a spinning thread would halve memfit's next
// product on two threads.
func BenchmarkSgemmVsOpenBLAS(b *testing.B) {
	defer openblas.SetThreads(openblas.SetThreads(1))
	memfit := func(tA, tB bool, m, n, k int, a []float32, lda int, bb []float32, ldb int, c []float32, ldc int) {
		Sgemm(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}
	blas := func(tA, tB bool, m, n, k int, a []float32, lda int, bb []float32, ldb int, c []float32, ldc int) {
		openblas.Sgemm(tA, tB, m, n, k, 1, a, lda, bb, ldb, 0, c, ldc)
	}
	shapes := []benchShape{}
	for _, n := range squareSizes {
		shapes = append(shapes, benchShape{name: fmt.Sprintf("square/n=%d", n), m: n, n: n, k: n})
	}
	shapes = append(shapes, modelShapes...)
	for _, s := range shapes {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s.name, threads), func(b *testing.B) {
				defer SetThreads(SetThreads(threads))
				defer openblas.SetThreads(openblas.SetThreads(threads))
				bc := newBenchCase(s, f32gen)
				reps := max(1, int(5e9*float64(threads)/bc.flops())) // ~50 ms at 100 GFLOP/s per thread
				block := func(f gemmFunc[float32]) time.Duration {
					t0 := time.Now()
					for range reps {
						bc.run(f)
					}
					d := time.Since(t0)
					time.Sleep(150 * time.Millisecond)
					return d
				}
				var tm, to time.Duration
				for b.Loop() {
					tm += block(memfit)
					to += block(blas)
				}
				f := bc.flops() * float64(reps*b.N) / 1e9
				b.ReportMetric(f/tm.Seconds(), "memfit-GFLOP/s")
				b.ReportMetric(f/to.Seconds(), "openblas-GFLOP/s")
				b.ReportMetric(to.Seconds()/tm.Seconds(), "memfit/openblas")
			})
		}
	}
}

func TestOpenBLASAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	sh := shape{37, 41, 53}
	a, lda := operand(rng, sh.m, sh.k, true, 2, f32gen)
	bb, ldb := operand(rng, sh.k, sh.n, false, 1, f32gen)
	c1, c2 := make([]float32, sh.m*sh.n), make([]float32, sh.m*sh.n)
	Sgemm(true, false, sh.m, sh.n, sh.k, 1, a, lda, bb, ldb, 0, c1, sh.n)
	openblas.Sgemm(true, false, sh.m, sh.n, sh.k, 1, a, lda, bb, ldb, 0, c2, sh.n)
	for i := range c1 {
		if d := c1[i] - c2[i]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("C[%d]: memfit %v, OpenBLAS %v", i, c1[i], c2[i])
		}
	}
}
