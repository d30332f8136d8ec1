package tensor

import (
	"fmt"
	"testing"
)

// TestViewStrides: a reshape of a non-contiguous tensor is a view exactly
// when some strides put every element where row-major order says; when
// viewStrides finds strides they are checked element by element.
func TestViewStrides(t *testing.T) {
	cases := []struct {
		shape, strides, to []int
		ok                 bool
	}{
		{[]int{2, 3, 4}, []int{12, 4, 1}, []int{6, 4}, true},
		{[]int{2, 4, 3}, []int{12, 1, 4}, []int{8, 3}, false},           // transposed last two
		{[]int{2, 4, 3}, []int{12, 1, 4}, []int{2, 4, 3, 1}, true},      // only a size-1 dim added
		{[]int{2, 3, 1, 4}, []int{36, 12, 4, 1}, []int{2, 3, 4}, true},  // a narrowed q of [B, T, 3, D]
		{[]int{2, 3, 4}, []int{36, 12, 1}, []int{2, 3, 1, 4}, true},     // and back
		{[]int{2, 2, 4}, []int{12, 4, 1}, []int{2, 8}, true},            // a slice of rows
		{[]int{2, 2, 4}, []int{12, 4, 1}, []int{16}, false},             // rows do not join across the gap
		{[]int{6, 4}, []int{8, 1}, []int{2, 3, 4}, true},                // padded rows split
		{[]int{3, 4}, []int{1, 3}, []int{3, 1, 4}, true},                // transposed, size-1 inserted
		{[]int{2, 3, 2, 4}, []int{24, 4, 12, 1}, []int{2, 3, 8}, false}, // heads permuted
		{[]int{2, 3, 2, 4}, []int{48, 16, 4, 1}, []int{6, 2, 4}, true},  // merged leading run
		{[]int{0, 3}, []int{3, 1}, []int{3, 0}, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%v->%v", c.shape, c.strides, c.to), func(t *testing.T) {
			st, ok := viewStrides(c.shape, c.strides, c.to)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v (strides %v)", ok, c.ok, st)
			}
			if !ok || numel(c.shape) == 0 {
				return
			}
			for i := range numel(c.shape) {
				if a, b := offsetOf(i, c.shape, c.strides), offsetOf(i, c.to, st); a != b {
					t.Fatalf("element %d at %d in the view, %d in the tensor (strides %v)", i, b, a, st)
				}
			}
		})
	}
}

// offsetOf is the memory offset of the row-major i-th element.
func offsetOf(i int, shape, strides []int) int {
	off := 0
	for d := len(shape) - 1; d >= 0; d-- {
		off += (i % shape[d]) * strides[d]
		i /= shape[d]
	}
	return off
}
