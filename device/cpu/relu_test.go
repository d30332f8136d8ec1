package cpu

import (
	"math"
	"testing"
)

// TestReluVectorMatchesScalar: the AVX-512 ReLU and its gradient agree bit
// for bit with the scalar definitions (x > 0 ? x : 0), including NaN, ±0
// and ±Inf, at every length and offset.
func TestReluVectorMatchesScalar(t *testing.T) {
	special := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-45, -1e-45}
	x, g := make([]float32, 100), make([]float32, 100)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7)) * 3
		g[i] = float32(i) - 40.5
	}
	copy(x[20:], special)
	copy(x[51:], special)
	for off := 0; off < 3; off++ {
		for n := 0; n+off <= len(x); n += 7 {
			xs, gs := x[off:off+n], g[off:off+n]
			y, out := make([]float32, n), make([]float32, n)
			k := reluVector(y, xs)
			kg := reluGradVector(out, xs, gs)
			for i := range k {
				want := float32(0)
				if xs[i] > 0 {
					want = xs[i]
				}
				if math.Float32bits(y[i]) != math.Float32bits(want) {
					t.Fatalf("relu(%v) = %v, want %v", xs[i], y[i], want)
				}
			}
			for i := range kg {
				want := float32(0)
				if xs[i] > 0 {
					want = gs[i]
				}
				if math.Float32bits(out[i]) != math.Float32bits(want) {
					t.Fatalf("relu'(%v)·%v = %v, want %v", xs[i], gs[i], out[i], want)
				}
			}
		}
	}
}
