package cpu

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestRowOps: the vector row primitives agree with float64 references at
// every length (vector bulk plus scalar tail) and offset.
func TestRowOps(t *testing.T) {
	a, b := make([]float32, 300), make([]float32, 300)
	for i := range a {
		a[i] = float32(math.Sin(float64(i)*0.37)) * 5
		b[i] = float32(math.Cos(float64(i)*0.11)) - 0.25
	}
	a[77] = 40 // a maximum inside the vector part
	for off := 0; off < 3; off++ {
		for n := 0; n+off <= len(a); n += 5 {
			x, y := a[off:off+n], b[off:off+n]
			wantMax, wantSum, wantDot := math.Inf(-1), 0.0, 0.0
			for i := range x {
				wantMax = max(wantMax, float64(x[i]))
				wantSum += float64(x[i])
				wantDot += float64(x[i]) * float64(y[i])
			}
			if got := rowMax(x); float64(got) != wantMax {
				t.Fatalf("rowMax(n=%d, off=%d) = %v, want %v", n, off, got, wantMax)
			}
			if got := rowSum(x); math.Abs(float64(got)-wantSum) > 1e-5*(1+float64(n)) {
				t.Fatalf("rowSum(n=%d, off=%d) = %v, want %v", n, off, got, wantSum)
			}
			if got := rowDot(x, y); math.Abs(float64(got)-wantDot) > 1e-5*(1+float64(n)) {
				t.Fatalf("rowDot(n=%d, off=%d) = %v, want %v", n, off, got, wantDot)
			}
			s := append([]float32(nil), x...)
			rowScale(s, 0.5)
			for i := range s {
				if s[i] != x[i]*0.5 {
					t.Fatalf("rowScale(n=%d, off=%d)[%d] = %v, want %v", n, off, i, s[i], x[i]*0.5)
				}
			}
			for _, op := range []device.BinaryOp{device.Add, device.Sub, device.Mul} {
				got, want := make([]float32, n), make([]float32, n)
				k := binaryVector(op, got, x, y)
				binaryRow(op, got[k:], x[k:], y[k:])
				for i := range want {
					switch op {
					case device.Add:
						want[i] = x[i] + y[i]
					case device.Sub:
						want[i] = x[i] - y[i]
					case device.Mul:
						want[i] = x[i] * y[i]
					}
					if got[i] != want[i] {
						t.Fatalf("%v(n=%d, off=%d)[%d] = %v, want %v", op, n, off, i, got[i], want[i])
					}
				}
			}
			out := make([]float32, n)
			for i := softmaxGradVector(out, x, y, 0.75); i < n; i++ {
				out[i] = x[i] * (y[i] - 0.75)
			}
			for i := range out {
				if want := x[i] * (y[i] - 0.75); out[i] != want {
					t.Fatalf("softmaxGrad(n=%d, off=%d)[%d] = %v, want %v", n, off, i, out[i], want)
				}
			}
		}
	}
}
