//go:build openblas && cgo

// Package openblas binds cblas_sgemm for gemm's comparison benchmarks only
// (go test -tags openblas). It is a separate package because cgo is not
// allowed in test files nor in packages with Go assembly.
package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
void openblas_set_num_threads(int);
*/
import "C"

import "unsafe"

// Sgemm calls cblas_sgemm on row-major operands.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans), C.enum_CBLAS_TRANSPOSE(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda), (*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}

var openblasThreads = 1

// SetThreads sets OpenBLAS's thread count and returns the previous one.
func SetThreads(n int) int {
	old := openblasThreads
	openblasThreads = n
	C.openblas_set_num_threads(C.int(n))
	return old
}
