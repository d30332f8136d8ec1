//go:build !purego

package cpu

import "github.com/memfit/memfit/device"

//go:noescape
func maxF32AVX512(x *float32, n int) float32

//go:noescape
func sumF32AVX512(x *float32, n int) float32

//go:noescape
func dotF32AVX512(a, b *float32, n int) float32

//go:noescape
func scaleF32AVX512(y *float32, n int, s float32)

//go:noescape
func softmaxGradF32AVX512(out, y, gr *float32, n int, s float32)

//go:noescape
func softmaxBF16AVX512(y, x *uint16, tmp *float32, rows, n int, c *geluConsts)

//go:noescape
func softmaxGradBF16AVX512(dx, y, dy *uint16, rows, n int, c *geluConsts)

// softmaxBF16Rows computes softmax over the rows of n bfloat16s in x into
// y (both rows·n long) with tmp (n float32s) as scratch, and reports
// whether it could: the rows need a multiple of 16 elements and AVX-512.
func softmaxBF16Rows(y, x []uint16, tmp []float32, n int) bool {
	if !hasAVX512 || n == 0 || n%16 != 0 || len(tmp) < n || len(y) == 0 {
		return false
	}
	_ = x[len(y)-1]
	softmaxBF16AVX512(&y[0], &x[0], &tmp[0], len(y)/n, n, &geluTable)
	return true
}

// softmaxGradBF16Rows is softmaxBF16Rows for the gradient.
func softmaxGradBF16Rows(dx, y, dy []uint16, n int) bool {
	if !hasAVX512 || n == 0 || n%16 != 0 || len(dx) == 0 {
		return false
	}
	_, _ = y[len(dx)-1], dy[len(dx)-1]
	softmaxGradBF16AVX512(&dx[0], &y[0], &dy[0], len(dx)/n, n, &geluTable)
	return true
}

// The ...Vector functions below do the largest multiple of 16 elements
// with AVX-512 and return how many they did (0 without AVX-512); the
// callers finish the tail.

func maxVector(x []float32) (float32, int) {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0, 0
	}
	return maxF32AVX512(&x[0], n), n
}

func sumVector(x []float32) (float32, int) {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0, 0
	}
	return sumF32AVX512(&x[0], n), n
}

func dotVector(a, b []float32) (float32, int) {
	n := len(a) &^ 15
	if !hasAVX512 || n == 0 {
		return 0, 0
	}
	b = b[:len(a)]
	return dotF32AVX512(&a[0], &b[0], n), n
}

func scaleVector(y []float32, s float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	scaleF32AVX512(&y[0], n, s)
	return n
}

func softmaxGradVector(out, y, g []float32, s float32) int {
	n := len(out) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	y, g = y[:len(out)], g[:len(out)]
	softmaxGradF32AVX512(&out[0], &y[0], &g[0], n, s)
	return n
}

//go:noescape
func sumSqDevF32AVX512(x *float32, n int, mu float32) float32

//go:noescape
func lnApplyF32AVX512(y, x, gm, bt *float32, n int, mu, rs float32)

//go:noescape
func lnGradStatsF32AVX512(x, gr, gm, dg, db *float32, n int, mu, rs float32, s *[2]float32)

//go:noescape
func lnGradDxF32AVX512(out, x, gr, gm *float32, n int, mu, rs, a, b float32)

func sumSqDevVector(x []float32, mu float32) (float32, int) {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0, 0
	}
	return sumSqDevF32AVX512(&x[0], n, mu), n
}

func lnApplyVector(y, x, gm, bt []float32, mu, rs float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	x, gm, bt = x[:len(y)], gm[:len(y)], bt[:len(y)]
	lnApplyF32AVX512(&y[0], &x[0], &gm[0], &bt[0], n, mu, rs)
	return n
}

func lnGradStatsVector(x, g, gm, dg, db []float32, mu, rs float32) (s1, s2 float32, done int) {
	n := len(x) &^ 15
	if !hasAVX512 || n == 0 {
		return 0, 0, 0
	}
	g, gm, dg, db = g[:len(x)], gm[:len(x)], dg[:len(x)], db[:len(x)]
	var s [2]float32
	lnGradStatsF32AVX512(&x[0], &g[0], &gm[0], &dg[0], &db[0], n, mu, rs, &s)
	return s[0], s[1], n
}

func lnGradDxVector(out, x, g, gm []float32, mu, rs, a, b float32) int {
	n := len(out) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	x, g, gm = x[:len(out)], g[:len(out)], gm[:len(out)]
	lnGradDxF32AVX512(&out[0], &x[0], &g[0], &gm[0], n, mu, rs, a, b)
	return n
}

//go:noescape
func binaryF32AVX512(op int, y, a, b *float32, n int)

// binaryVector computes y = a op b for Add, Sub and Mul over the largest
// multiple of 16 elements and returns how many it did.
func binaryVector(op device.BinaryOp, y, a, b []float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	var code int
	switch op {
	case device.Add:
		code = 0
	case device.Sub:
		code = 1
	case device.Mul:
		code = 2
	default:
		return 0
	}
	a, b = a[:len(y)], b[:len(y)]
	binaryF32AVX512(code, &y[0], &a[0], &b[0], n)
	return n
}

//go:noescape
func binaryBF16AVX512(op int, y, a, b *uint16, n int)

// binaryBF16Vector is binaryVector on bfloat16 bits.
func binaryBF16Vector(op device.BinaryOp, y, a, b []uint16) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 || op > device.Mul {
		return 0
	}
	a, b = a[:len(y)], b[:len(y)]
	binaryBF16AVX512(int(op), &y[0], &a[0], &b[0], n)
	return n
}
