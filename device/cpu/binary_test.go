package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestBinaryBF16Rows: dense bf16 Add, Sub and Mul (vector code without
// scratch) write the same bits as the converting path, including NaN,
// infinities and rounding ties, on rows of a strided view.
func TestBinaryBF16Rows(t *testing.T) {
	d := New(Threads(2))
	shape := []int{40, 3, 37}       // rows of 37: vector bulk and scalar tail
	strides := []int{3 * 40, 40, 1} // rows padded to 40
	mk := func() device.View { return hostView(t, d, device.BF16, shape, strides, 40*3*40) }
	a, b := mk(), mk()
	for i := range u16s(a) {
		u16s(a)[i] = BF16FromF32(float32(math.Sin(float64(i))) * 1000)
		u16s(b)[i] = uint16(0x3f80 + i%200)
	}
	specials := []uint16{0x7fc0, 0x7f80, 0xff80, 0x0001, 0x8000}
	copy(u16s(a)[50:], specials)
	copy(u16s(b)[90:], specials)
	for _, op := range []device.BinaryOp{device.Add, device.Sub, device.Mul} {
		t.Run(fmt.Sprint(op), func(t *testing.T) {
			got, want := mk(), mk()
			d.Binary(op, got, a, b)
			l := newLoop(shape, want, a, b)
			runRows(1, &l, zipK[float32, binaryFn[float32]]{want, a, b, binaryFn[float32]{op}})
			for i := range u16s(got) {
				if i%40 >= 37 {
					continue // padding
				}
				if g, w := u16s(got)[i], u16s(want)[i]; g != w {
					t.Fatalf("element %d: %#04x, want %#04x", i, g, w)
				}
			}
		})
	}
}
