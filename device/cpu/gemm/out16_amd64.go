//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

// func tileBF16AVX512(c *uint16, ldc int, t *float32, ldt, rows, cols int, beta float32, withBeta bool)
//
//go:noescape
func tileBF16AVX512(c *uint16, ldc int, t *float32, ldt, rows, cols int, beta float32, withBeta bool)

func init() {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL {
		tileBF16 = tileBF16Vector
	}
}

func tileBF16Vector(c []uint16, ldc int, t []float32, ldt, rows, cols int, beta float32) {
	if rows == 0 || cols == 0 {
		return
	}
	_, _ = c[(rows-1)*ldc+cols-1], t[(rows-1)*ldt+cols-1]
	tileBF16AVX512(&c[0], ldc, &t[0], ldt, rows, cols, beta, beta != 0)
}
