package cpu

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

func TestFastMath(t *testing.T) {
	worst := map[string]float64{}
	check := func(name string, got float32, want float64, tol float64) {
		err := math.Abs(float64(got)-want) / math.Max(math.Abs(want), 1e-30)
		if math.Abs(want) < 1e-30 {
			err = math.Abs(float64(got) - want)
		}
		worst[name] = math.Max(worst[name], err)
		if err > tol {
			t.Fatalf("%s: got %g want %g (rel err %g)", name, got, want, err)
		}
	}
	for x := -87.0; x <= 88; x += 0.0137 {
		check("exp", exp32(float32(x)), math.Exp(float64(float32(x))), 3e-7)
	}
	for x := -12.0; x <= 12; x += 0.00117 {
		f := float64(float32(x))
		check("tanh", tanh32(float32(x)), math.Tanh(f), 1e-6)
		check("sigmoid", sigmoid32(float32(x)), 1/(1+math.Exp(-f)), 1e-6)
	}
	if !math.IsInf(float64(exp32(100)), 1) || exp32(-100) != 0 || exp32(float32(math.NaN())) == exp32(float32(math.NaN())) {
		t.Errorf("exp32 edges: %v %v", exp32(100), exp32(-100))
	}
	t.Logf("worst relative errors: %v", worst)
}

func BenchmarkExp32(b *testing.B) {
	x := float32(0.3)
	var s float32
	for range b.N {
		s += exp32(x)
		x += 1e-7
	}
	_ = s
}

func BenchmarkGeluRow32(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(i%200-100) / 25
	}
	y := make([]float32, len(x))
	b.SetBytes(4 * int64(len(x)))
	for range b.N {
		geluRow32(y, x)
	}
}

func geluRef(v float64) float64 {
	return 0.5 * v * (1 + math.Tanh(geluC*(v+0.044715*v*v*v)))
}

func geluGradRef(v float64) float64 {
	u := geluC * (v + 0.044715*v*v*v)
	t := math.Tanh(u)
	return 0.5*(1+t) + 0.5*v*(1-t*t)*geluC*(1+3*0.044715*v*v)
}

// The vector and scalar GELU paths against float64, on lengths that
// exercise the 16-wide body and the scalar tail, and on large, tiny and
// non-finite inputs.
func TestGeluRows(t *testing.T) {
	for _, n := range []int{1, 15, 16, 17, 100, 4099} {
		x := make([]float32, n)
		g := make([]float32, n)
		for i := range x {
			x[i] = float32(i%97-48) / 6 // [-8, 8]
			g[i] = float32(i%7) - 3
		}
		if n > 20 {
			x[3], x[5], x[7] = 1e-20, -30, 40
		}
		y := make([]float32, n)
		dx := make([]float32, n)
		geluRow32(y, x)
		geluGrad32(dx, x, g)
		for i, v := range x {
			want := geluRef(float64(v))
			if d := math.Abs(float64(y[i]) - want); d > 1e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("n=%d gelu(%v) = %v, want %v", n, v, y[i], want)
			}
			// The gradient's error is bounded absolutely, about 1e-6 per
			// unit of g, where gelu' is near 0 for large negative u.
			wg := float64(g[i]) * geluGradRef(float64(v))
			if d := math.Abs(float64(dx[i]) - wg); d > 1e-6*math.Max(1, math.Abs(float64(g[i]))) {
				t.Fatalf("n=%d gelu'(%v)·%v = %v, want %v", n, v, g[i], dx[i], wg)
			}
		}
	}
}

func TestExpShiftVector(t *testing.T) {
	x := make([]float32, 1000)
	for i := range x {
		x[i] = float32(i%200)/10 - 15 // [-15, 5)
	}
	x[7], x[8], x[9] = float32(math.Inf(-1)), -200, -87
	const shift = 5
	y := make([]float32, len(x))
	n := expShiftVector(y, x, shift)
	if hasAVX512 && n != len(x) {
		t.Fatalf("vector path did %d elements", n)
	}
	for i := n; i < len(x); i++ {
		y[i] = exp32(x[i] - shift)
	}
	for i, v := range x {
		want := math.Exp(float64(v - shift)) // the argument is rounded to float32 first
		if d := math.Abs(float64(y[i]) - want); d > 3e-7*want+1e-37 {
			t.Fatalf("exp(%v - %v) = %v, want %v", v, shift, y[i], want)
		}
	}
	if y[7] != 0 || y[8] != 0 {
		t.Errorf("masked entries give %v, %v; want 0", y[7], y[8])
	}
}

// Every row length, a partial last vector included: each element is
// exp(x - shift), masked entries are 0, and nothing past the row is
// written.
func TestExpShiftVectorTails(t *testing.T) {
	for n := 1; n <= 40; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = -float32(i) / 3
		}
		x[n-1] = -100 // a masked entry in the last lane
		y := make([]float32, n+1)
		y[n] = 42
		done := expShiftVector(y[:n], x, 0)
		for i := done; i < n; i++ {
			y[i] = exp32(x[i])
		}
		for i, v := range x {
			want := math.Exp(float64(v))
			if v < -87.4 {
				want = 0
			}
			if d := math.Abs(float64(y[i]) - want); d > 3e-7*want {
				t.Fatalf("n=%d: exp(%v) = %v, want %v", n, v, y[i], want)
			}
		}
		if y[n] != 42 {
			t.Fatalf("n=%d: the element past the row became %v", n, y[n])
		}
	}
}

// GELU and its gradient on bfloat16 rows (the fused kernels) give the bits
// that computing in float32 and rounding with Copy gives, on row lengths
// with and without a vector tail, strided rows, and non-finite inputs.
func TestGeluBF16MatchesF32(t *testing.T) {
	d := New()
	for _, tc := range []struct {
		rows, cols int
		strided    bool
	}{{1, 5, false}, {3, 16, false}, {4, 37, false}, {64, 1536, false}, {5, 40, true}} {
		n := tc.rows * tc.cols
		view := func(dt device.DType) device.View {
			buf, err := d.Alloc(int64(2*n*dt.Size()), memory.Other)
			if err != nil {
				t.Fatal(err)
			}
			v := device.View{Buf: buf, DType: dt, Shape: []int{tc.rows, tc.cols}, Strides: []int{tc.cols, 1}}
			if tc.strided { // every other element of rows twice as long
				v.Strides = []int{2 * tc.cols, 2}
			}
			return v
		}
		x16, g16, y16, dx16 := view(device.BF16), view(device.BF16), view(device.BF16), view(device.BF16)
		xs, gs := u16s(x16), u16s(g16)
		for i := range xs {
			xs[i] = BF16FromF32(float32(i%211-105) / 13) // [-8, 8]
			gs[i] = BF16FromF32(float32(i%7) - 3)
		}
		xs[1] = BF16FromF32(float32(math.NaN()))
		xs[2] = BF16FromF32(float32(math.Inf(1)))
		xs[3] = BF16FromF32(-40)
		d.Unary(device.Gelu, y16, x16, 0)
		d.UnaryBackward(device.Gelu, dx16, x16, y16, g16, 0)

		x32, g32, y32, dx32, want := view(device.F32), view(device.F32), view(device.F32), view(device.F32), view(device.BF16)
		d.Copy(x32, x16)
		d.Copy(g32, g16)
		d.Unary(device.Gelu, y32, x32, 0)
		d.UnaryBackward(device.Gelu, dx32, x32, y32, g32, 0)
		for _, c := range []struct {
			name      string
			got, from device.View
		}{{"gelu", y16, y32}, {"gelu'", dx16, dx32}} {
			d.Copy(want, c.from)
			for r := 0; r < tc.rows; r++ {
				for j := 0; j < tc.cols; j++ {
					o := r*want.Strides[0] + j*want.Strides[1]
					if g, w := u16s(c.got)[o], u16s(want)[o]; g != w {
						t.Fatalf("%dx%d strided=%v: %s at (%d, %d) of x=%v: bits %#04x, float32 path %#04x",
							tc.rows, tc.cols, tc.strided, c.name, r, j, F32FromBF16(xs[o]), g, w)
					}
				}
			}
		}
		for _, v := range []device.View{x16, g16, y16, dx16, x32, g32, y32, dx32, want} {
			d.Free(v.Buf)
		}
	}
}
