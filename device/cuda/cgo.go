//go:build cuda

package cuda

// The CUDA and cuBLAS calls gorgonia.org/cu lacks: a kernel launch that
// passes struct arguments by value, cuBLAS bound to this device's stream
// with cublasGemmEx and cublasGemmStridedBatchedEx, and pinned host memory.

// #cgo LDFLAGS: -lcublas -lcuda
// #cgo linux LDFLAGS: -L/usr/local/cuda/lib64
// #cgo linux CFLAGS: -I/usr/local/cuda/include
// #include <stdlib.h>
// #include <cuda.h>
// #include <cublas_v2.h>
//
// // memfit_launch launches f with arguments packed as 8-byte words:
// // argument i starts at words[starts[i]]. cuLaunchKernel copies the
// // arguments before it returns, so words may be Go memory.
// static CUresult memfit_launch(CUfunction f, unsigned grid, unsigned block, CUstream s,
//                               unsigned long long* words, int* starts, int nargs) {
//     void* params[64];
//     if (nargs > 64) return CUDA_ERROR_INVALID_VALUE;
//     for (int i = 0; i < nargs; i++) params[i] = (void*)(words + starts[i]);
//     return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, params, NULL);
// }
//
// static int memfit_blas_create(cublasHandle_t* h, CUstream s) {
//     cublasStatus_t st = cublasCreate(h);
//     if (st != CUBLAS_STATUS_SUCCESS) return (int)st;
//     st = cublasSetStream(*h, (cudaStream_t)s);
//     if (st != CUBLAS_STATUS_SUCCESS) { cublasDestroy(*h); return (int)st; }
//     return 0;
// }
//
// static int memfit_blas_destroy(cublasHandle_t h) { return (int)cublasDestroy(h); }
//
// // memfit_gemm runs one (batch == 1) or a strided batch of GEMMs in cuBLAS's
// // column-major terms; alpha and beta are doubles, narrowed to float for
// // f32 accumulation.
// static int memfit_gemm(cublasHandle_t h, int transA, int transB, int m, int n, int k,
//                        double alpha, unsigned long long a, int atype, int lda, long long strideA,
//                        unsigned long long b, int btype, int ldb, long long strideB,
//                        double beta, unsigned long long c, int ctype, int ldc, long long strideC,
//                        int batch, int compute) {
//     float alpha32 = (float)alpha, beta32 = (float)beta;
//     const void* pa = &alpha32;
//     const void* pb = &beta32;
//     if (compute == CUBLAS_COMPUTE_64F) { pa = &alpha; pb = &beta; }
//     cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
//     cublasOperation_t tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
//     cublasStatus_t st;
//     if (batch == 1) {
//         st = cublasGemmEx(h, ta, tb, m, n, k, pa, (const void*)a, (cudaDataType)atype, lda,
//                           (const void*)b, (cudaDataType)btype, ldb, pb, (void*)c, (cudaDataType)ctype, ldc,
//                           (cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
//     } else {
//         st = cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, pa, (const void*)a, (cudaDataType)atype, lda, strideA,
//                           (const void*)b, (cudaDataType)btype, ldb, strideB, pb, (void*)c, (cudaDataType)ctype, ldc, strideC,
//                           batch, (cublasComputeType_t)compute, CUBLAS_GEMM_DEFAULT);
//     }
//     return (int)st;
// }
//
// static void* memfit_host_alloc(size_t n, CUresult* r) {
//     void* p = NULL;
//     *r = cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE);
//     return p;
// }
//
// static CUresult memfit_host_free(void* p) { return cuMemFreeHost(p); }
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/memfit/memfit/device"
)

// cuErr turns a CUresult into an error (nil for CUDA_SUCCESS).
func cuErr(r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	var name *C.char
	if C.cuGetErrorName(r, &name) == C.CUDA_SUCCESS && name != nil {
		return fmt.Errorf("%s (%d)", C.GoString(name), int(r))
	}
	return fmt.Errorf("CUresult %d", int(r))
}

// cFunction and cStream read the driver handles out of gorgonia's types,
// each a struct of one handle.
func cFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func cStream(s cu.Stream) C.CUstream       { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// launch runs on the device's thread.
func launch(f cu.Function, grid int, s cu.Stream, a *args) error {
	if len(a.starts) > 64 {
		return fmt.Errorf("%d kernel arguments, at most 64", len(a.starts))
	}
	var words *C.ulonglong
	var starts *C.int
	if len(a.words) > 0 {
		words = (*C.ulonglong)(unsafe.Pointer(&a.words[0]))
		starts = (*C.int)(unsafe.Pointer(&a.starts[0]))
	}
	return cuErr(C.memfit_launch(cFunction(f), C.uint(grid), C.uint(block), cStream(s), words, starts, C.int(len(a.starts))))
}

// blasHandle is a cuBLAS handle bound to one stream.
type blasHandle struct{ h C.cublasHandle_t }

func newBlas(s cu.Stream) (*blasHandle, error) {
	b := &blasHandle{}
	if err := blasErr(int(C.memfit_blas_create(&b.h, cStream(s)))); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *blasHandle) close() error {
	if b == nil || b.h == nil {
		return nil
	}
	err := blasErr(int(C.memfit_blas_destroy(b.h)))
	b.h = nil
	return err
}

func cudaType(d device.DType) C.int {
	switch d {
	case device.F32:
		return C.CUDA_R_32F
	case device.F64:
		return C.CUDA_R_64F
	case device.F16:
		return C.CUDA_R_16F
	case device.BF16:
		return C.CUDA_R_16BF
	}
	panic("cuda: no cuBLAS type for " + d.String())
}

func computeType(k computeKind) C.int {
	switch k {
	case compute32FTF32:
		return C.CUBLAS_COMPUTE_32F_FAST_TF32
	case compute64F:
		return C.CUBLAS_COMPUTE_64F
	}
	return C.CUBLAS_COMPUTE_32F
}

// addr is the device address of a view's first element.
func addr(v device.View) C.ulonglong {
	return C.ulonglong(uint64(v.Buf.Block.Ptr()) + uint64(v.Offset*v.DType.Size()))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// gemm runs on the device's thread.
func (b *blasHandle) gemm(g blasGemm) error {
	st := C.memfit_gemm(b.h, cbool(g.transA), cbool(g.transB), C.int(g.m), C.int(g.n), C.int(g.k),
		C.double(g.alpha), addr(g.a), cudaType(g.a.DType), C.int(g.lda), C.longlong(g.strideA),
		addr(g.b), cudaType(g.b.DType), C.int(g.ldb), C.longlong(g.strideB),
		C.double(g.beta), addr(g.c), cudaType(g.c.DType), C.int(g.ldc), C.longlong(g.strideC),
		C.int(g.batch), computeType(g.compute))
	return blasErr(int(st))
}

// hostAlloc returns n bytes of page-locked host memory (needs the context
// current: runs on the device's thread).
func hostAlloc(n int) (unsafe.Pointer, error) {
	var r C.CUresult
	p := C.memfit_host_alloc(C.size_t(n), &r)
	if err := cuErr(r); err != nil {
		return nil, err
	}
	return p, nil
}

func hostFree(p unsafe.Pointer) error { return cuErr(C.memfit_host_free(p)) }
