// The interface between the CUDA emulator's runtime (emu.c, in the Go test
// binary) and a kernel module it compiled for the host (kernel.h + the
// module's source, in a shared library). The runtime binds each module to
// this table when it loads it; the module calls back through it for
// everything that involves other CUDA threads or the bounds checks.
#ifndef MEMFIT_EMU_API_H
#define MEMFIT_EMU_API_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { unsigned x, y, z; } memfit_dim3;

// memfit_thread is what one CUDA thread sees of its position.
typedef struct {
    memfit_dim3 thread, block, block_dim, grid_dim;
} memfit_thread;

enum { MEMFIT_SHFL_IDX, MEMFIT_SHFL_UP, MEMFIT_SHFL_DOWN, MEMFIT_SHFL_XOR };
enum { MEMFIT_VOTE_BALLOT, MEMFIT_VOTE_ALL, MEMFIT_VOTE_ANY };
enum { MEMFIT_READ = 1, MEMFIT_WRITE = 2 };
// The input types of a warp's matrix multiply-accumulate (mma).
enum { MEMFIT_MMA_BF16, MEMFIT_MMA_F16 };

typedef struct {
    memfit_thread* const* current;  // the running thread
    void (*syncthreads)(void);
    void (*syncwarp)(unsigned mask);
    unsigned long long (*shfl)(int kind, unsigned mask, unsigned long long bits, int arg, int width);
    unsigned (*vote)(int kind, unsigned mask, int pred);
    // check fails the launch unless [p, p+n) lies in one live allocation;
    // line is the source line of the access, rw what it does (MEMFIT_READ,
    // MEMFIT_WRITE or both), which the launch counts keep apart.
    void (*check)(const void* p, unsigned long n, int line, int rw);
    // mma is PTX's mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 (T the
    // 16-bit type): every lane of a whole warp calls it with its fragments
    // of A (a[4]), B (b[2]) and C (c[4]) and receives its fragment of
    // D = A·B + C (d[4]); kernel.h gives the layout.
    void (*mma)(int type, const unsigned* a, const unsigned* b, const float* c, float* d);
} memfit_emu_api;

#ifdef __cplusplus
}
#endif
#endif
