package cpu

import "math"

// Row primitives of the float32 softmax kernels: vector code for the bulk
// (rowops_amd64.s), scalar Go for the tail and on other platforms.

// rowMax returns the largest element of x (-Inf for an empty row). A NaN
// anywhere makes the row's softmax NaN whatever this returns.
func rowMax(x []float32) float32 {
	m, k := maxVector(x)
	if k == 0 {
		m = float32(math.Inf(-1))
	}
	for _, v := range x[k:] {
		m = max(m, v)
	}
	return m
}

// rowSum returns the sum of x, accumulated in float32 over 64 lanes.
func rowSum(x []float32) float32 {
	s, k := sumVector(x)
	for _, v := range x[k:] {
		s += v
	}
	return s
}

// rowDot returns the dot product of a and b (len(b) >= len(a)).
func rowDot(a, b []float32) float32 {
	s, k := dotVector(a, b)
	for i := k; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

// rowScale multiplies y by s in place.
func rowScale(y []float32, s float32) {
	for i := scaleVector(y, s); i < len(y); i++ {
		y[i] *= s
	}
}
