package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestCrossEntropy32MatchesFloat64: the float32 cross entropy (vector
// bulk, scalar tail) matches the float64 kernel, loss and gradient, with
// and without label smoothing and with ignored rows.
func TestCrossEntropy32MatchesFloat64(t *testing.T) {
	for _, c := range []int{5, 37, 256} {
		for _, s := range []float64{0, 0.1} {
			t.Run(fmt.Sprintf("classes=%d/smoothing=%v", c, s), func(t *testing.T) {
				d := New(Threads(2))
				const rows, ignore = 300, -100
				mk := func(dt device.DType, shape ...int) device.View {
					k := 1
					for _, v := range shape {
						k *= v
					}
					return hostView(t, d, dt, shape, contiguous(shape), k)
				}
				x64, x32 := mk(device.F64, rows, c), mk(device.F32, rows, c)
				for i := range rows * c {
					f64s(x64)[i] = math.Sin(float64(i)*0.91) * 6
				}
				d.Copy(x32, x64)
				d.Copy(x64, x32)
				tg := mk(device.I32, rows)
				for r := range rows {
					i32s(tg)[r] = int32((r * 7) % c)
					if r%11 == 0 {
						i32s(tg)[r] = ignore
					}
				}
				up64, up32 := mk(device.F64, rows), mk(device.F32, rows)
				for r := range rows {
					f64s(up64)[r] = 1 + float64(r%5)/4
				}
				d.Copy(up32, up64)
				l64, l32 := mk(device.F64, rows), mk(device.F32, rows)
				d.CrossEntropy(l64, x64, tg, ignore, s)
				d.CrossEntropy(l32, x32, tg, ignore, s)
				closeViews(t, d, "loss", l32, l64, 1e-5)
				g64, g32 := mk(device.F64, rows, c), mk(device.F32, rows, c)
				d.CrossEntropyBackward(g64, x64, tg, up64, ignore, s)
				d.CrossEntropyBackward(g32, x32, tg, up32, ignore, s)
				closeViews(t, d, "dlogits", g32, g64, 1e-5)
			})
		}
	}
}
