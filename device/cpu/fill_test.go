package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestFillAndCausalFillBits: the raw-bit Fill and CausalFill paths write
// what the converting paths write, bit for bit, for every dtype on
// contiguous and strided views, in place and not.
func TestFillAndCausalFillBits(t *testing.T) {
	d := New(Threads(2))
	for _, dt := range []device.DType{device.F32, device.BF16, device.F16, device.F64} {
		for _, transposed := range []bool{false, true} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/transposed=%t/inplace=%t", dt, transposed, inPlace), func(t *testing.T) {
					shape := []int{3, 37, 37}
					n := 3 * 37 * 37
					strides := contiguous(shape)
					if transposed {
						strides = []int{37 * 37, 1, 37}
					}
					src := hostView(t, d, dt, shape, contiguous(shape), n)
					dst := hostView(t, d, dt, shape, strides, n)
					ref := hostView(t, d, dt, shape, strides, n)
					vals := hostView(t, d, device.F64, shape, contiguous(shape), n)
					for i := range f64s(vals)[:n] {
						f64s(vals)[i] = math.Sin(float64(i)) * 100
					}
					d.Copy(src, vals)
					if inPlace {
						d.Copy(dst, src)
						d.Copy(ref, src)
						d.CausalFill(dst, dst, math.Inf(-1))
						causalFill[float64](d, ref, ref, math.Inf(-1))
					} else {
						d.CausalFill(dst, src, -3.25)
						causalFill[float64](d, ref, src, -3.25)
					}
					sameBits(t, d, dst, ref)

					d.Fill(dst, 1.0/3)
					d.Copy(ref, vals)
					for i := range f64s(vals)[:n] {
						f64s(vals)[i] = 1.0 / 3
					}
					d.Copy(ref, vals) // the converting path
					sameBits(t, d, dst, ref)
					d.Fill(dst, 0)
					for i := range f64s(vals)[:n] {
						f64s(vals)[i] = 0
					}
					d.Copy(ref, vals)
					sameBits(t, d, dst, ref)
				})
			}
		}
	}
}

// sameBits compares two views of one shape element by element as float64
// (every dtype here widens exactly), treating NaNs as equal.
func sameBits(t *testing.T, d *Device, a, b device.View) {
	t.Helper()
	n := a.Len()
	wa := hostView(t, d, device.F64, a.Shape, contiguous(a.Shape), n)
	wb := hostView(t, d, device.F64, b.Shape, contiguous(b.Shape), n)
	d.Copy(wa, a)
	d.Copy(wb, b)
	for i := range n {
		x, y := f64s(wa)[i], f64s(wb)[i]
		if x != y && !(math.IsNaN(x) && math.IsNaN(y)) {
			t.Fatalf("element %d: %v, want %v", i, x, y)
		}
	}
}
