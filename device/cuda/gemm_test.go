package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
)

// rowMajorGemm is memfit's contract, computed directly.
func rowMajorGemm(g device.Gemm, a, b, c []float64) {
	for bt := 0; bt < g.Batch; bt++ {
		for i := 0; i < g.M; i++ {
			for j := 0; j < g.N; j++ {
				var s float64
				for p := 0; p < g.K; p++ {
					var x, y float64
					if g.TransA {
						x = a[bt*g.StrideA+p*g.LDA+i]
					} else {
						x = a[bt*g.StrideA+i*g.LDA+p]
					}
					if g.TransB {
						y = b[bt*g.StrideB+j*g.LDB+p]
					} else {
						y = b[bt*g.StrideB+p*g.LDB+j]
					}
					s += x * y
				}
				ci := bt*g.StrideC + i*g.LDC + j
				c[ci] = g.Alpha*s + g.Beta*c[ci]
			}
		}
	}
}

// colMajorGemm is what cuBLAS computes (reference BLAS semantics), with the
// operands bound as colMajor binds them: cuBLAS's A is memfit's B.
func colMajorGemm(g blasGemm, a, b, c []float64) {
	for bt := 0; bt < g.batch; bt++ {
		for i := 0; i < g.m; i++ {
			for j := 0; j < g.n; j++ {
				var s float64
				for p := 0; p < g.k; p++ {
					var x, y float64
					if g.transA {
						x = a[int64(bt)*g.strideA+int64(i*g.lda+p)]
					} else {
						x = a[int64(bt)*g.strideA+int64(p*g.lda+i)]
					}
					if g.transB {
						y = b[int64(bt)*g.strideB+int64(p*g.ldb+j)]
					} else {
						y = b[int64(bt)*g.strideB+int64(j*g.ldb+p)]
					}
					s += x * y
				}
				ci := int64(bt)*g.strideC + int64(j*g.ldc+i)
				c[ci] = g.alpha*s + g.beta*c[ci]
			}
		}
	}
}

func TestColMajorMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fill := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.Float64()*2 - 1
		}
		return v
	}
	for trial := 0; trial < 200; trial++ {
		m, n, k, batch := 1+rng.IntN(6), 1+rng.IntN(6), 1+rng.IntN(6), 1+rng.IntN(3)
		g := device.Gemm{TransA: rng.IntN(2) == 0, TransB: rng.IntN(2) == 0, M: m, N: n, K: k, Batch: batch,
			Alpha: 0.5 + rng.Float64(), Beta: rng.Float64(),
			A: device.View{DType: device.F32}, B: device.View{DType: device.F32}, C: device.View{DType: device.F32}}
		pad := rng.IntN(3)
		if g.TransA {
			g.LDA = m + pad
		} else {
			g.LDA = k + pad
		}
		if g.TransB {
			g.LDB = k + pad
		} else {
			g.LDB = n + pad
		}
		g.LDC = n + pad
		g.StrideA, g.StrideB, g.StrideC = (m+k+1)*(m+k+pad), (n+k+1)*(n+k+pad), (m+1)*(n+pad)
		if rng.IntN(3) == 0 {
			g.StrideA = 0 // one A for every batch entry
		}
		a, b := fill(batch*g.StrideA+(m+k+1)*(m+k+pad)), fill(batch*g.StrideB+(n+k+1)*(n+k+pad))
		want := fill(batch*g.StrideC + (m+1)*(n+pad))
		got := append([]float64(nil), want...)
		rowMajorGemm(g, a, b, want)
		bg, err := colMajor(g, false)
		if err != nil {
			t.Fatal(err)
		}
		colMajorGemm(bg, b, a, got) // cuBLAS's A is memfit's B
		for i := range want {
			if math.Abs(want[i]-got[i]) > 1e-12 {
				t.Fatalf("%+v: C[%d] = %v through cuBLAS's convention, want %v", g, i, got[i], want[i])
			}
		}
	}
}

func TestColMajorRejects(t *testing.T) {
	v := func(d device.DType) device.View { return device.View{DType: d} }
	base := device.Gemm{M: 2, N: 2, K: 2, Batch: 1, LDA: 2, LDB: 2, LDC: 2}
	for _, c := range []struct{ a, b, c device.DType }{
		{device.F32, device.F16, device.F32},
		{device.F16, device.F16, device.BF16},
		{device.I32, device.I32, device.I32},
		{device.F64, device.F64, device.F32},
	} {
		g := base
		g.A, g.B, g.C = v(c.a), v(c.b), v(c.c)
		if _, err := colMajor(g, false); err == nil {
			t.Errorf("gemm %v x %v -> %v accepted", c.a, c.b, c.c)
		}
	}
	g := base
	g.A, g.B, g.C = v(device.F32), v(device.F32), v(device.F32)
	g.LDB = 1 // rows of B are 2 long
	if _, err := colMajor(g, false); err == nil {
		t.Error("LDB shorter than a row accepted")
	}
	g.LDB = 2
	if bg, _ := colMajor(g, true); bg.compute != compute32FTF32 {
		t.Error("AllowTF32 does not select TF32 compute")
	}
	g.A, g.B, g.C = v(device.BF16), v(device.BF16), v(device.F32)
	if bg, err := colMajor(g, true); err != nil || bg.compute != compute32F {
		t.Errorf("bf16 gemm: %v, compute %v; want f32 accumulation", err, bg.compute)
	}
}

// A single row or column needs no meaningful leading dimension; cuBLAS
// still wants one at least as long as the stored column.
func TestFixLD(t *testing.T) {
	g := device.Gemm{M: 1, N: 4, K: 3, Batch: 1, LDA: 0, LDB: 4, LDC: 0,
		A: device.View{DType: device.F32}, B: device.View{DType: device.F32}, C: device.View{DType: device.F32}}
	bg, err := colMajor(g, false)
	if err != nil {
		t.Fatal(err)
	}
	if bg.ldb < 1 || bg.ldc < 4 {
		t.Errorf("ldb %d ldc %d", bg.ldb, bg.ldc)
	}
}
