package gemm

// Portable Go micro-kernel and the engines built on it. The engines below
// are the defaults; kernel_amd64.go replaces the float32 and bfloat16 ones
// when the CPU has AVX2+FMA or AVX-512.

// kernGo4x4 is the portable 4×4 micro-kernel (16 accumulators fit the
// register file of amd64 and arm64 without spills).
func kernGo4x4[T float32 | float64](kq int, a, b []T, c []T, ldc int, alpha, beta T) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 T
	a, b = a[:kq*4], b[:kq*4]
	for p := 0; p+3 < len(a) && p+3 < len(b); p += 4 {
		a0, a1, a2, a3 := a[p], a[p+1], a[p+2], a[p+3]
		b0, b1, b2, b3 := b[p], b[p+1], b[p+2], b[p+3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	store4(c[0*ldc:0*ldc+4], c00, c01, c02, c03, alpha, beta)
	store4(c[1*ldc:1*ldc+4], c10, c11, c12, c13, alpha, beta)
	store4(c[2*ldc:2*ldc+4], c20, c21, c22, c23, alpha, beta)
	store4(c[3*ldc:3*ldc+4], c30, c31, c32, c33, alpha, beta)
}

func store4[T float32 | float64](c []T, x0, x1, x2, x3, alpha, beta T) {
	c = c[:4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = alpha*x0, alpha*x1, alpha*x2, alpha*x3
		return
	}
	c[0] = alpha*x0 + beta*c[0]
	c[1] = alpha*x1 + beta*c[1]
	c[2] = alpha*x2 + beta*c[2]
	c[3] = alpha*x3 + beta*c[3]
}

var (
	goF32Engine = &engine[float32, float32, float32]{
		name: "go4x4", mr: 4, nr: 4, kg: 1, mc: 128, kc: 256, nc: 2048,
		pack: packCopy[float32], kern: kernGo4x4[float32],
	}
	goF64Engine = &engine[float64, float64, float64]{
		name: "go4x4", mr: 4, nr: 4, kg: 1, mc: 64, kc: 256, nc: 1024,
		pack: packCopy[float64], kern: kernGo4x4[float64],
	}
)

// Engines in use; kernel_amd64.go's init may replace them.
var (
	sgemmEngine = goF32Engine
	dgemmEngine = goF64Engine
	// bf16Engine is the native bfloat16 engine, nil where the CPU lacks one.
	bf16Engine    *engine[uint16, uint16, float32]
	bf16CvtEngine = convertEngine(goF32Engine, packBF16)
	f16Engine     = convertEngine(goF32Engine, packF16)
)

// The converting engines' packers; kernel_amd64.go's init replaces them
// with vector ones.
var (
	packBF16 = convertPacker(bf16Table)
	packF16  = convertPacker(f16Table)
)

// convertEngine wraps a float32 engine so that it packs 16-bit sources,
// converting them to float32 with pack.
func convertEngine(e *engine[float32, float32, float32], pack func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int)) *engine[uint16, float32, float32] {
	return &engine[uint16, float32, float32]{
		name: e.name + "+cvt", mr: e.mr, nr: e.nr, kg: 1, mc: e.mc, kc: e.kc, nc: e.nc, kcOne: e.kcOne, mcOne: e.mcOne,
		pack: pack, kern: e.kern,
	}
}

// setF32Engine makes e the float32 engine, and the base of the converting
// ones.
func setF32Engine(e *engine[float32, float32, float32]) {
	sgemmEngine = e
	bf16CvtEngine = convertEngine(e, packBF16)
	f16Engine = convertEngine(e, packF16)
}

// Every engine this CPU can run, for the tests (filled by init functions).
var (
	f32Engines  = []*engine[float32, float32, float32]{goF32Engine}
	bf16Engines []*engine[uint16, uint16, float32]
)
