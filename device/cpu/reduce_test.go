package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// TestReduceColumns: reducing leading dimensions (a bias gradient summed
// over the batch) matches a float64 reference for every op and float
// dtype, serial and split over threads, with strided sources and with dst
// omitting the reduced leading dimensions; a bf16 sum is rounded once.
func TestReduceColumns(t *testing.T) {
	cases := []struct {
		shape     []int // src shape
		dstShape  []int
		transpose bool // src stored column-major
	}{
		{[]int{7, 5}, []int{1, 5}, false},
		{[]int{300, 130}, []int{1, 130}, false}, // above parallelMin
		{[]int{300, 130}, []int{130}, false},    // dst omits the reduced dim
		{[]int{300, 130}, []int{1, 130}, true},  // strided src
		{[]int{4, 60, 140}, []int{1, 60, 140}, false},
		{[]int{4, 60, 140}, []int{1, 1, 140}, false},
	}
	for _, c := range cases {
		for _, dt := range []device.DType{device.F32, device.BF16, device.F64} {
			for _, op := range []device.ReduceOp{device.Sum, device.Max, device.Min} {
				for _, threads := range []int{1, 2, 3} {
					name := fmt.Sprintf("%v->%v/t=%v/%v/op=%d/threads=%d", c.shape, c.dstShape, c.transpose, dt, op, threads)
					t.Run(name, func(t *testing.T) {
						checkReduceColumns(t, New(Threads(threads)), dt, op, c.shape, c.dstShape, c.transpose)
					})
				}
			}
		}
	}
}

func checkReduceColumns(t *testing.T, d *Device, dt device.DType, op device.ReduceOp, shape, dstShape []int, transpose bool) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	strides := contiguous(shape)
	if transpose { // 2-D only: element (i, j) at j*rows + i
		strides = []int{1, shape[0]}
	}
	src := hostView(t, d, dt, shape, strides, n)
	dst := hostView(t, d, dt, dstShape, contiguous(dstShape), n)
	vals := make([]float64, n) // by logical (row-major) index
	for i := range vals {
		// 1 + a small part: a bf16 accumulator would lose the small parts.
		vals[i] = 1 + float64((i*7919)%257)/1024
		if i%3 == 0 {
			vals[i] = -vals[i]
		}
	}
	// Write through a float64 view, then round to dt the way Copy does.
	w := hostView(t, d, device.F64, shape, contiguous(shape), n)
	copy(f64s(w), vals)
	d.Copy(src, w)
	// The rounded inputs, read back in logical order.
	back := hostView(t, d, device.F64, shape, contiguous(shape), n)
	d.Copy(back, src)
	in := f64s(back)[:n]

	d.Reduce(op, dst, src)

	inner := shape[len(shape)-1]
	keep := 1 // product of the kept trailing dims
	for i := len(dstShape) - 1; i >= 0 && dstShape[i] != 1; i-- {
		keep *= dstShape[i]
	}
	if keep < inner {
		t.Fatalf("test shapes must keep the inner dimension")
	}
	want := make([]float64, keep)
	for i := range want {
		want[i] = identity(op)
	}
	for i, v := range in {
		want[i%keep] = combine(op, want[i%keep], v)
	}
	got := hostView(t, d, device.F64, dstShape, contiguous(dstShape), keep)
	d.Copy(got, dst)
	tol := 1e-12
	switch dt {
	case device.F32:
		tol = 1e-5
	case device.BF16:
		tol = 1.0 / 128 // one bf16 rounding of the result
	}
	for i, w := range want {
		g := f64s(got)[i]
		if math.Abs(g-w) > tol*math.Abs(w) {
			t.Fatalf("element %d: got %v, want %v", i, g, w)
		}
	}
}

func contiguous(shape []int) []int {
	s := make([]int, len(shape))
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = st
		st *= shape[i]
	}
	return s
}

func hostView(t *testing.T, d *Device, dt device.DType, shape, strides []int, n int) device.View {
	t.Helper()
	b, err := d.Alloc(int64(n*dt.Size()), memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return device.View{Buf: b, DType: dt, Shape: shape, Strides: strides}
}
