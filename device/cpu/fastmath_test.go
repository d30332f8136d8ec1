package cpu

import (
	"math"
	"testing"
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

func TestTanhAbsAccurate(t *testing.T) {
	worst := 0.0
	for x := -20.0; x <= 20; x += 0.000731 {
		f := float32(x)
		got := float64(tanhAbsAccurate(f))
		worst = math.Max(worst, math.Abs(got-math.Tanh(float64(f))))
	}
	if worst > 3e-7 {
		t.Errorf("tanh absolute error %g", worst)
	}
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
			// 1+tanh u cancels for large negative u (as in any float32
			// GELU): the error is absolute, about 1e-6 per unit of g.
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
	if hasAVX512 && n != 992 {
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
