//go:build !purego

package cpu

import "math"

// geluConsts is the table gelu_amd64.s reads (see the offsets there).
type geluConsts struct {
	log2e, magic, ln2hi, ln2lo float32
	poly                       [7]float32 // c7..c1
	one                        float32
	absMask                    uint32
	bias                       int32
	m2c, m2k, wMin, wMax       float32 // w = v·(m2c + m2k·v²), clamped
	p2c, p6ck                  float32 // d(2u)/dv = p2c + p6ck·v²
	rBias, rOne, rInf, rQuiet  uint32  // bfloat16 rounding
}

var geluTable = geluConsts{
	log2e: log2e, magic: roundMagic, ln2hi: ln2Hi, ln2lo: ln2Lo,
	poly:    [7]float32{expC7, expC6, expC5, expC4, expC3, expC2, expC1},
	one:     1,
	absMask: math.MaxInt32, bias: 127,
	m2c: geluM2C, m2k: geluM2K, wMin: geluWMin, wMax: geluWMax,
	p2c: 2 * geluC, p6ck: 6 * 0.044715 * geluC,
	rBias: 0x7fff, rOne: 1, rInf: 0x7f800000, rQuiet: 0x40,
}

//go:noescape
func geluF32AVX512(y, x *float32, n int, c *geluConsts)

//go:noescape
func geluGradF32AVX512(out, x, gr *float32, n int, c *geluConsts)

//go:noescape
func geluBF16AVX512(y, x *uint16, n int, c *geluConsts)

//go:noescape
func geluGradBF16AVX512(out, x, gr *uint16, n int, c *geluConsts)

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

// geluBF16Vector is geluVector on bfloat16 bits, computed in float32 and
// rounded once to nearest even, as Unary's float32 path and a store would.
func geluBF16Vector(y, x []uint16) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	_ = x[n-1]
	geluBF16AVX512(&y[0], &x[0], n, &geluTable)
	return n
}

// geluGradBF16Vector is geluGradVector on bfloat16 bits.
func geluGradBF16Vector(out, x, g []uint16) int {
	n := len(out) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	_, _ = x[n-1], g[n-1]
	geluGradBF16AVX512(&out[0], &x[0], &g[0], n, &geluTable)
	return n
}

//go:noescape
func expShiftF32AVX512(y, x *float32, n int, shift float32, c *geluConsts)

// expShiftVector writes y = exp(x - shift) (x - shift <= 0) and returns
// how many elements it did: all of them with AVX-512, the last partial
// vector under a mask, so that a row's every exponential rounds alike
// whatever its length.
func expShiftVector(y, x []float32, shift float32) int {
	n := len(y)
	if !hasAVX512 || n == 0 {
		return 0
	}
	_ = x[n-1]
	expShiftF32AVX512(&y[0], &x[0], n, shift, &geluTable)
	return n
}
