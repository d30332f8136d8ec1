//go:build !purego

package gemm

import (
	"fmt"
	"testing"
)

func kexpBcst14x32(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexp6x64(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexp8x48(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexpBcst8x48(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexpBcst6x64(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexp14x32np(kq int, a, b, c *float32, ldc int, alpha, beta float32)
func kexp12x32(kq int, a, b, c *float32, ldc int, alpha, beta float32)

func BenchmarkExp(b *testing.B) {
	for _, k := range []struct {
		name   string
		mr, nr int
		f      func(kq int, a, b, c *float32, ldc int, alpha, beta float32)
	}{{"bcst14x32", 14, 32, kexpBcst14x32}, {"6x64", 6, 64, kexp6x64}, {"8x48", 8, 48, kexp8x48}, {"bcst8x48", 8, 48, kexpBcst8x48}, {"bcst6x64", 6, 64, kexpBcst6x64}, {"14x32np", 14, 32, kexp14x32np}, {"12x32", 12, 32, kexp12x32}, {"cur14x32", 14, 32, kernF32AVX512}} {
		kq := 256
		b.Run(fmt.Sprintf("%s/kc=%d", k.name, kq), func(b *testing.B) {
			a, bb := make([]float32, k.mr*kq), make([]float32, k.nr*kq)
			c := make([]float32, k.mr*k.nr)
			for b.Loop() {
				k.f(kq, &a[0], &bb[0], &c[0], k.nr, 1, 0)
			}
			b.ReportMetric(2*float64(k.mr*k.nr*kq)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
