package cuda

import (
	"fmt"

	"github.com/memfit/memfit/device"
)

// computeKind is the accumulation cuBLAS is asked for.
type computeKind uint8

const (
	compute32F     computeKind = iota // CUBLAS_COMPUTE_32F
	compute32FTF32                    // CUBLAS_COMPUTE_32F_FAST_TF32
	compute64F                        // CUBLAS_COMPUTE_64F
)

// blasGemm is one cuBLAS GEMM call in cuBLAS's own (column-major) terms:
// C = alpha·op(A)·op(B) + beta·C with op(A) m×k, op(B) k×n and C m×n, each
// column-major with leading dimension ld*, batch matrices stride* elements
// apart. The views give buffers, dtypes and element offsets.
type blasGemm struct {
	transA, transB            bool
	m, n, k, batch            int
	alpha, beta               float64
	a, b, c                   device.View
	lda, ldb, ldc             int
	strideA, strideB, strideC int64
	compute                   computeKind
	// bias, when it has a buffer, is added to every column of C (cuBLAS's
	// rows: memfit's row-major N) by cuBLASLt's epilogue.
	bias device.View
}

// colMajor maps memfit's row-major C = op(A)·op(B) onto cuBLAS.
//
// A row-major matrix with row stride ld is, read column-major with leading
// dimension ld, its own transpose. So memfit's row-major C (M×N) is
// cuBLAS's column-major Cᵀ (N×M), and Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS's A is
// memfit's B, its B is memfit's A, m and n swap, and each keeps its own
// transpose flag (row-major B untransposed is column-major Bᵀ, which is
// exactly the N×K operand cuBLAS needs untransposed).
func colMajor(g device.Gemm, allowTF32 bool) (blasGemm, error) {
	if g.A.DType != g.B.DType {
		return blasGemm{}, fmt.Errorf("cuda: gemm of %v by %v: A and B must share a dtype", g.A.DType, g.B.DType)
	}
	if g.C.DType != g.A.DType && g.C.DType != device.F32 {
		return blasGemm{}, fmt.Errorf("cuda: gemm of %v into %v: C must be f32 or %v", g.A.DType, g.C.DType, g.A.DType)
	}
	var ck computeKind
	switch g.A.DType {
	case device.F32:
		ck = compute32F
		if allowTF32 {
			ck = compute32FTF32
		}
	case device.F16, device.BF16:
		ck = compute32F
	case device.F64:
		if g.C.DType != device.F64 {
			return blasGemm{}, fmt.Errorf("cuda: gemm of f64 into %v", g.C.DType)
		}
		ck = compute64F
	default:
		return blasGemm{}, fmt.Errorf("cuda: gemm on dtype %v", g.A.DType)
	}
	bg := blasGemm{
		transA: g.TransB, transB: g.TransA,
		m: g.N, n: g.M, k: g.K, batch: max(g.Batch, 1),
		alpha: g.Alpha, beta: g.Beta,
		a: g.B, b: g.A, c: g.C,
		lda: g.LDB, ldb: g.LDA, ldc: g.LDC,
		strideA: int64(g.StrideB), strideB: int64(g.StrideA), strideC: int64(g.StrideC),
		compute: ck,
	}
	// cuBLAS insists on ld >= rows of the stored matrix even where a single
	// row or column makes the stride meaningless (memfit callers may pass
	// anything there).
	bg.lda = fixLD(bg.lda, rowsStored(bg.transA, bg.m, bg.k), colsStored(bg.transA, bg.m, bg.k))
	bg.ldb = fixLD(bg.ldb, rowsStored(bg.transB, bg.k, bg.n), colsStored(bg.transB, bg.k, bg.n))
	bg.ldc = fixLD(bg.ldc, bg.m, bg.n)
	if bg.lda < rowsStored(bg.transA, bg.m, bg.k) || bg.ldb < rowsStored(bg.transB, bg.k, bg.n) || bg.ldc < bg.m {
		return blasGemm{}, fmt.Errorf("cuda: gemm %dx%dx%d with row strides LDA=%d LDB=%d LDC=%d shorter than the rows", g.M, g.N, g.K, g.LDA, g.LDB, g.LDC)
	}
	return bg, nil
}

// rowsStored and colsStored are the shape of a column-major operand as it
// sits in memory: op(X) is r×c, so X is c×r when transposed.
func rowsStored(trans bool, r, c int) int {
	if trans {
		return c
	}
	return r
}

func colsStored(trans bool, r, c int) int {
	if trans {
		return r
	}
	return c
}

// fixLD raises a leading dimension that does not matter (one stored column)
// to the minimum cuBLAS accepts.
func fixLD(ld, rows, cols int) int {
	if cols <= 1 && ld < max(rows, 1) {
		return max(rows, 1)
	}
	return max(ld, 1)
}

// epilogueBias reports whether g's bias can go into cuBLASLt's epilogue:
// cuBLASLt takes a bias of the output's type (memfit's F32 master bias
// under a 16-bit C is written into C first instead, device.BiasFirst).
func epilogueBias(g device.Gemm) bool {
	return g.HasBias() && g.Bias.DType == g.C.DType && g.Beta == 0
}
