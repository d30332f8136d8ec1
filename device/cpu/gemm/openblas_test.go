//go:build openblas && cgo

package gemm

import (
	"math/rand/v2"
	"testing"

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
