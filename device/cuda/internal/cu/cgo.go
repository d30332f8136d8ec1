//go:build cuda && !cudaemu

package cu

// The CUDA and cuBLAS calls gorgonia.org/cu lacks: a kernel launch that
// passes struct arguments by value, cuBLAS bound to a stream with
// cublasGemmEx and cublasGemmStridedBatchedEx, cuBLASLt's product with a
// bias epilogue, and pinned host memory.

// #cgo LDFLAGS: -lcublasLt -lcublas -lcuda
// #cgo linux LDFLAGS: -L/usr/local/cuda/lib64
// #cgo linux CFLAGS: -I/usr/local/cuda/include
// #include <stdlib.h>
// #include <cuda.h>
// #include <cublas_v2.h>
// #include <cublasLt.h>
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
// // memfit_align is the largest power of two up to 256 dividing p: what
// // cuBLASLt's heuristic must assume of a pointer (it assumes 256 unless
// // told), as PyTorch tells it.
// static uint32_t memfit_align(unsigned long long p) {
//     uint32_t a = 256;
//     while (a > 1 && p % a) a >>= 1;
//     return a;
// }
//
// // memfit_lt_gemm is memfit_gemm with C = alpha·op(A)·op(B) + bias, the bias
// // (m elements of C's type) added by cuBLASLt's epilogue to every column.
// // CUBLAS_STATUS_NOT_SUPPORTED, with nothing queued, when no algorithm
// // takes it.
// static int memfit_lt_gemm(cublasLtHandle_t h, CUstream s, unsigned long long ws, size_t wsSize,
//                           int transA, int transB, int m, int n, int k, double alpha,
//                           unsigned long long a, int atype, int lda, long long strideA,
//                           unsigned long long b, int btype, int ldb, long long strideB,
//                           unsigned long long c, int ctype, int ldc, long long strideC,
//                           int batch, int compute, unsigned long long bias) {
//     cublasLtMatmulDesc_t op = NULL;
//     cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
//     cublasLtMatmulPreference_t pref = NULL;
//     cublasLtMatmulHeuristicResult_t res;
//     int found = 0;
//     float alpha32 = (float)alpha, beta32 = 0;
//     double beta64 = 0;
//     const void* pa = &alpha32;
//     const void* pb = &beta32;
//     cudaDataType_t scale = CUDA_R_32F;
//     if (compute == CUBLAS_COMPUTE_64F) { pa = &alpha; pb = &beta64; scale = CUDA_R_64F; }
//     cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
//     cublasOperation_t tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
//     cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
//     const void* bp = (const void*)bias;
//     int32_t bt = ctype;
//     int32_t nb = batch;
//     long long sa = strideA, sb = strideB, sc = strideC;
//     cublasStatus_t st;
// #define MEMFIT_TRY(x) do { st = (x); if (st != CUBLAS_STATUS_SUCCESS) goto done; } while (0)
//     MEMFIT_TRY(cublasLtMatmulDescCreate(&op, (cublasComputeType_t)compute, scale));
//     MEMFIT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
//     MEMFIT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
//     MEMFIT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
//     MEMFIT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
//     MEMFIT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
//     MEMFIT_TRY(cublasLtMatrixLayoutCreate(&la, (cudaDataType_t)atype, transA ? k : m, transA ? m : k, lda));
//     MEMFIT_TRY(cublasLtMatrixLayoutCreate(&lb, (cudaDataType_t)btype, transB ? n : k, transB ? k : n, ldb));
//     MEMFIT_TRY(cublasLtMatrixLayoutCreate(&lc, (cudaDataType_t)ctype, m, n, ldc));
//     if (batch > 1) {
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &nb, sizeof nb));
//         MEMFIT_TRY(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof sc));
//     }
//     MEMFIT_TRY(cublasLtMatmulPreferenceCreate(&pref));
//     MEMFIT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsSize, sizeof wsSize));
//     uint32_t aa = memfit_align(a), ab = memfit_align(b), ac = memfit_align(c);
//     MEMFIT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
//     MEMFIT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
//     MEMFIT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
//     MEMFIT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));
//     MEMFIT_TRY(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &found));
//     if (found == 0) { st = CUBLAS_STATUS_NOT_SUPPORTED; goto done; }
//     MEMFIT_TRY(cublasLtMatmul(h, op, pa, (const void*)a, la, (const void*)b, lb, pb, (const void*)c, lc,
//                               (void*)c, lc, &res.algo, (void*)ws, wsSize, (cudaStream_t)s));
// done:
//     if (pref) cublasLtMatmulPreferenceDestroy(pref);
//     if (lc) cublasLtMatrixLayoutDestroy(lc);
//     if (lb) cublasLtMatrixLayoutDestroy(lb);
//     if (la) cublasLtMatrixLayoutDestroy(la);
//     if (op) cublasLtMatmulDescDestroy(op);
//     return (int)st;
// #undef MEMFIT_TRY
// }
//
// static int memfit_lt_create(cublasLtHandle_t* h) { return (int)cublasLtCreate(h); }
// static int memfit_lt_destroy(cublasLtHandle_t h) { return (int)cublasLtDestroy(h); }
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
)

const (
	R32F  DataType = C.CUDA_R_32F
	R64F  DataType = C.CUDA_R_64F
	R16F  DataType = C.CUDA_R_16F
	R16BF DataType = C.CUDA_R_16BF

	Compute32F         ComputeType = C.CUBLAS_COMPUTE_32F
	Compute32FFastTF32 ComputeType = C.CUBLAS_COMPUTE_32F_FAST_TF32
	Compute64F         ComputeType = C.CUBLAS_COMPUTE_64F
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
func cFunction(f Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func cStream(s Stream) C.CUstream       { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// StreamHandle is the CUstream (a cudaStream_t) inside s.
func StreamHandle(s Stream) unsafe.Pointer { return unsafe.Pointer(cStream(s)) }

// Launch runs f over grid blocks of block threads on stream s; argument i
// is the words from starts[i] on. It must run on a thread where the
// context is current.
func Launch(f Function, grid, block int, s Stream, words []uint64, starts []int32) error {
	if len(starts) > 64 {
		return fmt.Errorf("%d kernel arguments, at most 64", len(starts))
	}
	var w *C.ulonglong
	var st *C.int
	if len(words) > 0 {
		w = (*C.ulonglong)(unsafe.Pointer(&words[0]))
		st = (*C.int)(unsafe.Pointer(&starts[0]))
	}
	return cuErr(C.memfit_launch(cFunction(f), C.uint(grid), C.uint(block), cStream(s), w, st, C.int(len(starts))))
}

// Blas is a cuBLAS handle bound to one stream, and a cuBLASLt handle with
// its workspace for the products with a bias.
type Blas struct {
	h  C.cublasHandle_t
	lt C.cublasLtHandle_t
	s  Stream
	ws DevicePtr
}

// ltWorkspace is the device memory cuBLASLt's algorithms may use, taken
// once per handle outside the caching allocator, as cuBLAS takes its own.
const ltWorkspace = 4 << 20

// NewBlas makes a cuBLAS handle whose work goes on s. The error of a
// failing cuBLAS call is its cublasStatus_t, as an int in BlasStatus.
func NewBlas(s Stream) (*Blas, error) {
	b := &Blas{s: s}
	if err := blasErr(int(C.memfit_blas_create(&b.h, cStream(s)))); err != nil {
		return nil, err
	}
	if err := blasErr(int(C.memfit_lt_create(&b.lt))); err != nil {
		C.memfit_blas_destroy(b.h)
		return nil, err
	}
	ws, err := MemAlloc(ltWorkspace)
	if err != nil {
		C.memfit_lt_destroy(b.lt)
		C.memfit_blas_destroy(b.h)
		return nil, err
	}
	b.ws = ws
	return b, nil
}

// Close destroys the handles and frees the workspace.
func (b *Blas) Close() error {
	if b == nil || b.h == nil {
		return nil
	}
	err := blasErr(int(C.memfit_blas_destroy(b.h)))
	if e := blasErr(int(C.memfit_lt_destroy(b.lt))); err == nil {
		err = e
	}
	if e := MemFree(b.ws); err == nil {
		err = e
	}
	b.h, b.lt, b.ws = nil, nil, 0
	return err
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Gemm queues g on the handle's stream.
func (b *Blas) Gemm(g Gemm) error {
	if g.Bias != 0 {
		st := C.memfit_lt_gemm(b.lt, cStream(b.s), C.ulonglong(b.ws), ltWorkspace,
			cbool(g.TransA), cbool(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K), C.double(g.Alpha),
			C.ulonglong(g.A), C.int(g.AType), C.int(g.Lda), C.longlong(g.StrideA),
			C.ulonglong(g.B), C.int(g.BType), C.int(g.Ldb), C.longlong(g.StrideB),
			C.ulonglong(g.C), C.int(g.CType), C.int(g.Ldc), C.longlong(g.StrideC),
			C.int(g.Batch), C.int(g.Compute), C.ulonglong(g.Bias))
		// Both are refusals before anything is queued: the caller adds
		// the bias another way.
		if st == C.CUBLAS_STATUS_NOT_SUPPORTED || st == C.CUBLAS_STATUS_INVALID_VALUE {
			return ErrNoEpilogue
		}
		return blasErr(int(st))
	}
	st := C.memfit_gemm(b.h, cbool(g.TransA), cbool(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K),
		C.double(g.Alpha), C.ulonglong(g.A), C.int(g.AType), C.int(g.Lda), C.longlong(g.StrideA),
		C.ulonglong(g.B), C.int(g.BType), C.int(g.Ldb), C.longlong(g.StrideB),
		C.double(g.Beta), C.ulonglong(g.C), C.int(g.CType), C.int(g.Ldc), C.longlong(g.StrideC),
		C.int(g.Batch), C.int(g.Compute))
	return blasErr(int(st))
}

// HostAlloc returns n bytes of page-locked host memory (the context must be
// current).
func HostAlloc(n int) (unsafe.Pointer, error) {
	var r C.CUresult
	p := C.memfit_host_alloc(C.size_t(n), &r)
	if err := cuErr(r); err != nil {
		return nil, err
	}
	return p, nil
}

// HostFree frees what HostAlloc returned.
func HostFree(p unsafe.Pointer) error { return cuErr(C.memfit_host_free(p)) }
