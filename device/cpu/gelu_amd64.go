//go:build !purego

package cpu

import "math"

// geluConsts is the table gelu_amd64.s reads (see the offsets there).
type geluConsts struct {
	c, k, k3, nine, log2e, magic, ln2hi, ln2lo float32
	poly                                       [7]float32 // c7..c1
	one, half                                  float32
	absMask, signMask                          uint32
	bias                                       int32
}

var geluTable = geluConsts{
	c: geluC, k: 0.044715 * geluC, k3: 3 * 0.044715 * geluC, nine: 9, log2e: log2e, magic: roundMagic,
	ln2hi: ln2Hi, ln2lo: ln2Lo,
	poly: [7]float32{expC7, expC6, expC5, expC4, expC3, expC2, expC1},
	one:  1, half: 0.5,
	absMask: math.MaxInt32, signMask: 1 << 31, bias: 127,
}

//go:noescape
func geluF32AVX512(y, x *float32, n int, c *geluConsts)

//go:noescape
func geluGradF32AVX512(out, x, gr *float32, n int, c *geluConsts)

// geluVector computes the largest multiple of 16 elements with AVX-512 and
// returns how many it did.
func geluVector(y, x []float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	geluF32AVX512(&y[0], &x[0], n, &geluTable)
	return n
}

// geluGradVector is geluVector for the gradient.
func geluGradVector(out, x, g []float32) int {
	n := len(out) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	geluGradF32AVX512(&out[0], &x[0], &g[0], n, &geluTable)
	return n
}

//go:noescape
func expShiftF32AVX512(y, x *float32, n int, shift float32, c *geluConsts)

// expShiftVector writes y = exp(x - shift) for the largest multiple of 16
// elements (x - shift <= 0) and returns how many it did.
func expShiftVector(y, x []float32, shift float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	expShiftF32AVX512(&y[0], &x[0], n, shift, &geluTable)
	return n
}
