// The CUDA emulator runtime's entry points, called from emu.go.
#ifndef MEMFIT_EMU_H
#define MEMFIT_EMU_H
#include <stdint.h>

// CUresult codes the emulator returns (the driver API's values).
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719,
};

// cublasStatus_t codes.
enum { EMU_BLAS_SUCCESS = 0, EMU_BLAS_INVALID_VALUE = 7, EMU_BLAS_NOT_SUPPORTED = 15, EMU_BLAS_EXECUTION_FAILED = 13 };

// cudaDataType and cublasComputeType_t values.
enum { EMU_R_32F = 0, EMU_R_64F = 1, EMU_R_16F = 2, EMU_R_16BF = 14 };
enum { EMU_COMPUTE_32F = 68, EMU_COMPUTE_64F = 70, EMU_COMPUTE_32F_FAST_TF32 = 77 };

extern uint64_t memfit_emu_total;
const char* memfit_emu_message(void);
int memfit_emu_mem_alloc(uint64_t* out, uint64_t n);
int memfit_emu_mem_free(uint64_t p);
void memfit_emu_mem_info(uint64_t* free_bytes, uint64_t* total);
int memfit_emu_track(uint64_t p, uint64_t n);
void memfit_emu_untrack(uint64_t p);
int memfit_emu_memcpy(uint64_t dst, uint64_t src, uint64_t n, int dst_dev, int src_dev);
int memfit_emu_memset32(uint64_t dst, uint32_t v, uint64_t count);
int memfit_emu_module_load(const char* path, uint64_t* out);
int memfit_emu_module_unload(uint64_t h);
int memfit_emu_function(uint64_t h, const char* name, uint64_t* out);
int memfit_emu_launch(uint64_t f, unsigned gx, unsigned gy, unsigned gz, unsigned tx, unsigned ty, unsigned tz,
                      void** params);
int memfit_emu_gemm(int transA, int transB, int m, int n, int k, double alpha, uint64_t a, int atype, int lda,
                    int64_t strideA, uint64_t b, int btype, int ldb, int64_t strideB, double beta, uint64_t c,
                    int ctype, int ldc, int64_t strideC, int batch, int compute, uint64_t bias);
void memfit_emu_count(int on);
int memfit_emu_kernel_count(int i, const char** name, uint64_t* out);
int memfit_emu_gemm_count(int i, int* types, uint64_t* out);
int memfit_emu_copy_count(int i, uint64_t* calls, uint64_t* bytes);
#endif
