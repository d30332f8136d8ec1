package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestLayerNorm32MatchesFloat64: the float32 layer norm (vector bulk,
// scalar tail) matches the float64 kernel on the same inputs, forward and
// backward, with parameter gradients added to what was there.
func TestLayerNorm32MatchesFloat64(t *testing.T) {
	for _, c := range []struct{ rows, n int }{{3, 5}, {7, 37}, {200, 384}, {9, 400}} {
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("%dx%d/threads=%d", c.rows, c.n, threads), func(t *testing.T) {
				d := New(Threads(threads))
				rows, n := c.rows, c.n
				mk := func(dt device.DType, shape ...int) device.View {
					k := 1
					for _, s := range shape {
						k *= s
					}
					return hostView(t, d, dt, shape, contiguous(shape), k)
				}
				// f64 inputs, f32 copies of them.
				x64, dy64, g64, b64 := mk(device.F64, rows, n), mk(device.F64, rows, n), mk(device.F64, n), mk(device.F64, n)
				for i := range rows * n {
					f64s(x64)[i] = math.Sin(float64(i)*0.7)*3 + float64(i%n)*0.01
					f64s(dy64)[i] = math.Cos(float64(i) * 1.3)
				}
				for i := range n {
					f64s(g64)[i] = 1 + 0.1*math.Sin(float64(i))
					f64s(b64)[i] = 0.05 * float64(i%7)
				}
				x32, dy32, g32, b32 := mk(device.F32, rows, n), mk(device.F32, rows, n), mk(device.F32, n), mk(device.F32, n)
				d.Copy(x32, x64)
				d.Copy(dy32, dy64)
				d.Copy(g32, g64)
				d.Copy(b32, b64)
				d.Copy(x64, x32) // both sides see the same rounded inputs
				d.Copy(dy64, dy32)
				d.Copy(g64, g32)
				d.Copy(b64, b32)

				y64, m64, r64 := mk(device.F64, rows, n), mk(device.F32, rows), mk(device.F32, rows)
				y32, m32, r32 := mk(device.F32, rows, n), mk(device.F32, rows), mk(device.F32, rows)
				layerNorm[float64](d, y64, device.View{}, m64, r64, x64, g64, b64, 1e-5)
				d.LayerNorm(y32, device.View{}, m32, r32, x32, g32, b32, 1e-5)
				closeViews(t, d, "y", y32, y64, 1e-5)
				closeViews(t, d, "rstd", r32, r64, 1e-5)

				dx64, dg64, db64 := mk(device.F64, rows, n), mk(device.F64, n), mk(device.F64, n)
				dx32, dg32, db32 := mk(device.F32, rows, n), mk(device.F32, n), mk(device.F32, n)
				d.Fill(dg64, 0.5)
				d.Fill(db64, -0.25)
				d.Fill(dg32, 0.5)
				d.Fill(db32, -0.25)
				layerNormBackward[float64](d, dx64, dg64, db64, dy64, x64, m64, r64, g64)
				d.LayerNormBackward(dx32, dg32, db32, dy32, x32, m32, r32, g32)
				closeViews(t, d, "dx", dx32, dx64, 1e-4)
				closeViews(t, d, "dgamma", dg32, dg64, 1e-5)
				closeViews(t, d, "dbeta", db32, db64, 1e-5)
			})
		}
	}
}

// closeViews checks |got - want| <= tol·(1 + max|want|) element by element.
func closeViews(t *testing.T, d *Device, name string, got, want device.View, tol float64) {
	t.Helper()
	n := want.Len()
	g := hostView(t, d, device.F64, want.Shape, contiguous(want.Shape), n)
	w := hostView(t, d, device.F64, want.Shape, contiguous(want.Shape), n)
	d.Copy(g, got)
	d.Copy(w, want)
	scale := 0.0
	for _, v := range f64s(w)[:n] {
		scale = max(scale, math.Abs(v))
	}
	for i := range n {
		if diff := math.Abs(f64s(g)[i] - f64s(w)[i]); diff > tol*(1+scale) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, f64s(g)[i], f64s(w)[i])
		}
	}
}
