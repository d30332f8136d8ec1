package cpu

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Softmax and its gradient on bfloat16 rows (the fused kernels where a row
// is a multiple of 16 long) give the bits that the float32 path gives
// after rounding with Copy: row lengths with and without the fused path,
// causal rows (filled far below the row's maximum), large and negative
// scores.
func TestSoftmaxBF16MatchesF32(t *testing.T) {
	d := New()
	for _, tc := range []struct{ rows, n int }{{1, 16}, {3, 48}, {7, 40}, {2, 80}, {96, 256}, {5, 272}} {
		size := tc.rows * tc.n
		view := func(dt device.DType) device.View {
			buf, err := d.Alloc(int64(size*dt.Size()), memory.Other)
			if err != nil {
				t.Fatal(err)
			}
			return device.View{Buf: buf, DType: dt, Shape: []int{tc.rows, tc.n}, Strides: []int{tc.n, 1}}
		}
		x16, g16, y16, dx16 := view(device.BF16), view(device.BF16), view(device.BF16), view(device.BF16)
		d.Random(x16, device.Normal, 0, 4, 1)
		d.Random(g16, device.Normal, 0, 1, 2)
		xs := u16s(x16)
		xs[0] = BF16FromF32(300) // a dominant score
		if tc.rows > 1 {
			d.CausalFill(x16, x16, -1e30)
		}
		d.Softmax(y16, x16, false)
		d.SoftmaxBackward(dx16, y16, g16, false)

		x32, y32, g32, dx32, want := view(device.F32), view(device.F32), view(device.F32), view(device.F32), view(device.BF16)
		d.Copy(x32, x16)
		d.Softmax(y32, x32, false)
		d.Copy(want, y32)
		same(t, tc.rows, tc.n, "softmax", y16, want)
		// The gradient from the same bfloat16 probabilities.
		d.Copy(y32, y16)
		d.Copy(g32, g16)
		d.SoftmaxBackward(dx32, y32, g32, false)
		d.Copy(want, dx32)
		same(t, tc.rows, tc.n, "softmax gradient", dx16, want)
		for _, v := range []device.View{x16, g16, y16, dx16, x32, y32, g32, dx32, want} {
			d.Free(v.Buf)
		}
	}
}

func same(t *testing.T, rows, n int, what string, got, want device.View) {
	t.Helper()
	g, w := u16s(got), u16s(want)
	for i := range rows * n {
		if g[i] != w[i] {
			t.Fatalf("%d×%d: %s at (%d, %d): %v (%#04x), float32 path %v (%#04x)",
				rows, n, what, i/n, i%n, F32FromBF16(g[i]), g[i], F32FromBF16(w[i]), w[i])
		}
	}
	var s float64
	for _, v := range g[:n] {
		s += float64(F32FromBF16(v))
	}
	if what == "softmax" && math.Abs(s-1) > 0.02 {
		t.Fatalf("%d×%d: first row sums to %v", rows, n, s)
	}
}
