//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// adamConsts is the layout adamF32AVX512 reads.
type adamConsts struct {
	gradScale, beta1, oneMinusBeta1, beta2, oneMinusBeta2 float32
	stepSize, invSqrtBC2, eps, wd, decay                  float32
}

//go:noescape
func adamF32AVX512(p, grad, m, v *float32, n int, c *adamConsts)

var hasAVX512 = cpu.X86.HasAVX512F

// adamVector updates the largest multiple of 16 elements of contiguous F32
// rows with AVX-512 and returns how many it did (0 without AVX-512).
func adamVector(p, g, m, v []float32, c *adamConsts) int {
	n := len(p) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	adamF32AVX512(&p[0], &g[0], &m[0], &v[0], n, c)
	return n
}
