package cpu

import (
	"fmt"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestStridedRows: elementwise kernels walk strided views row by row with
// an odometer; a copy out of every permutation of a 4-D tensor (rows of
// every length, split over threads mid-row) puts each element where its
// index says.
func TestStridedRows(t *testing.T) {
	shape := []int{3, 5, 7, 2100} // the last dimension exceeds chunk
	n := 3 * 5 * 7 * 2100
	perms := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}, {2, 3, 0, 1}, {0, 3, 1, 2}}
	for _, threads := range []int{1, 3} {
		d := New(Threads(threads))
		src := hostView(t, d, device.F64, shape, contiguous(shape), n)
		for i := range n {
			f64s(src)[i] = float64(i)
		}
		for _, p := range perms {
			t.Run(fmt.Sprintf("threads=%d/perm=%v", threads, p), func(t *testing.T) {
				ps, pst := make([]int, 4), make([]int, 4)
				cs := contiguous(shape)
				for k, ax := range p {
					ps[k], pst[k] = shape[ax], cs[ax]
				}
				view := src
				view.Shape, view.Strides = ps, pst
				dst := hostView(t, d, device.F64, ps, contiguous(ps), n)
				d.Copy(dst, view)
				for i := range n {
					if got, want := f64s(dst)[i], float64(offsetIn(i, ps, pst)); got != want {
						t.Fatalf("element %d: %v, want %v", i, got, want)
					}
				}
			})
		}
	}
}

// offsetIn is the memory offset of the row-major i-th element of a view.
func offsetIn(i int, shape, strides []int) int {
	off := 0
	for d := len(shape) - 1; d >= 0; d-- {
		off += (i % shape[d]) * strides[d]
		i /= shape[d]
	}
	return off
}
