package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestReduceColumnsFoldsRowsInOrder: a sum over leading dimensions folds
// each column's rows in order, in float32 from the identity, whatever the
// thread count; so a sum over rows cut in two, the second run reduced
// after the first run's sum as one more row in front, is the sum over all
// of them bit for bit (how tensor.RowSums continues a bias's gradient from
// tile to tile).
func TestReduceColumnsFoldsRowsInOrder(t *testing.T) {
	const rows, cols, cut = 700, 67, 300
	for _, dt := range []device.DType{device.F32, device.BF16} {
		for _, threads := range []int{1, 2, 3, 8} {
			t.Run(fmt.Sprintf("%v/threads=%d", dt, threads), func(t *testing.T) {
				d := New(Threads(threads))
				n := rows * cols
				src := hostView(t, d, dt, []int{rows, cols}, contiguous([]int{rows, cols}), n)
				w := hostView(t, d, device.F64, []int{rows, cols}, contiguous([]int{rows, cols}), n)
				for i := range n {
					// Magnitudes over 2⁶⁰, so that the order of the adds
					// shows in the bits.
					f64s(w)[i] = math.Ldexp(1+float64((i*7919)%1009)/1009, (i*31)%61-30)
					if i%3 == 0 {
						f64s(w)[i] = -f64s(w)[i]
					}
				}
				d.Copy(src, w)
				back := hostView(t, d, device.F32, []int{rows, cols}, contiguous([]int{rows, cols}), n)
				d.Copy(back, src)
				want := make([]float32, cols)
				for r := range rows {
					for c := range want {
						want[c] += f32s(back)[r*cols+c]
					}
				}
				whole := hostView(t, d, device.F32, []int{cols}, []int{1}, cols)
				d.Reduce(device.Sum, whole, src)
				// The first cut rows, then their sum and the rest.
				head := src
				head.Shape = []int{cut, cols}
				first := hostView(t, d, device.F32, []int{cols}, []int{1}, cols)
				d.Reduce(device.Sum, first, head)
				rest := hostView(t, d, device.F32, []int{1 + rows - cut, cols}, contiguous([]int{1 + rows - cut, cols}), (1+rows-cut)*cols)
				top := rest
				top.Shape = []int{cols}
				top.Strides = []int{1}
				d.Copy(top, first)
				body := rest
				body.Offset += cols
				body.Shape = []int{rows - cut, cols}
				tail := src
				tail.Offset += cut * cols
				tail.Shape = []int{rows - cut, cols}
				d.Copy(body, tail)
				split := hostView(t, d, device.F32, []int{cols}, []int{1}, cols)
				d.Reduce(device.Sum, split, rest)
				for c, w := range want {
					if g := f32s(whole)[c]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("column %d: sum %v, want the rows folded in order, %v", c, g, w)
					}
					if g := f32s(split)[c]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("column %d: sum cut at row %d %v, want %v", c, cut, g, w)
					}
				}
			})
		}
	}
}
