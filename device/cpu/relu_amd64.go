//go:build !purego

package cpu

//go:noescape
func reluF32AVX512(y, x *float32, n int)

//go:noescape
func reluGradF32AVX512(out, v, grad *float32, n int)

// reluVector computes the largest multiple of 16 elements of y = max(x, 0)
// with AVX-512 and returns how many it did. Branch-free: the scalar loop's
// branch on the sign mispredicts half the time on activations.
func reluVector(y, x []float32) int {
	n := len(y) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	_ = x[n-1]
	reluF32AVX512(&y[0], &x[0], n)
	return n
}

// reluGradVector is reluVector for out = v > 0 ? g : 0.
func reluGradVector(out, v, g []float32) int {
	n := len(out) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	_, _ = v[n-1], g[n-1]
	reluGradF32AVX512(&out[0], &v[0], &g[0], n)
	return n
}
