// CUDA's device environment for a host compiler: included (g++ -include)
// before a kernel source that the CUDA emulator compiles where NVRTC would.
// Threads, barriers, warp shuffles and votes call into the emulator's
// runtime (api.h); every global-memory access written GMEM(type, p, i) is
// bounds-checked against the live allocations; __shared__ variables live in
// one section that the runtime poisons before each block.
#ifndef MEMFIT_EMU_KERNEL_H
#define MEMFIT_EMU_KERNEL_H

#include <cmath>
#include <cstring>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "api.h"

using std::signbit;

// kernels.cu's host path: no PTX inline assembly.
#define MEMFIT_HOST_CHECK 1

static const memfit_emu_api* memfit_api;

extern "C" __attribute__((visibility("default"))) void memfit_emu_bind(const memfit_emu_api* api) { memfit_api = api; }

#ifdef MEMFIT_SCAN
// The scan pass (g++ -E) keeps the marker, so the entry points can be found.
#define __global__ MEMFIT_GLOBAL
#else
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static __attribute__((section("memfit_shared")))

extern "C" char __start_memfit_shared[] __attribute__((weak));
extern "C" char __stop_memfit_shared[] __attribute__((weak));
// memfit_emu_shared gives the bounds of the module's shared memory.
extern "C" __attribute__((visibility("default"))) void memfit_emu_shared(char** start, char** stop) {
    *start = __start_memfit_shared;
    *stop = __stop_memfit_shared;
}

#define threadIdx ((*memfit_api->current)->thread)
#define blockIdx ((*memfit_api->current)->block)
#define blockDim ((*memfit_api->current)->block_dim)
#define gridDim ((*memfit_api->current)->grid_dim)
#define warpSize 32

// GMEM(type, p, i) is element i of global memory at p as a checked
// reference: reading it, assigning to it, a compound assignment and taking
// its address (for an atomic) each check the access against the live
// allocations when they happen, saying whether it reads, writes or both,
// so that the launch counts (memfit_emu_count) tell reads from writes. A
// reference converts to its value wherever the value's type is wanted; a
// template argument deduced from it is the reference's type, so kernels
// cast (T)GMEM(…) there.
template <class T>
struct memfit_ref {
    using V = std::remove_cv_t<T>;
    T* a;
    int line;
    V get(int rw) const {
        memfit_api->check((const void*)a, sizeof(T), line, rw);
        return *a;
    }
    operator V() const { return get(MEMFIT_READ); }
    const memfit_ref& operator=(V v) const {
        memfit_api->check((const void*)a, sizeof(T), line, MEMFIT_WRITE);
        *a = v;
        return *this;
    }
    const memfit_ref& operator=(const memfit_ref& o) const { return *this = (V)o; }
    template <class U>
    const memfit_ref& operator+=(U v) const { V x = get(MEMFIT_READ | MEMFIT_WRITE); *a = x + v; return *this; }
    template <class U>
    const memfit_ref& operator-=(U v) const { V x = get(MEMFIT_READ | MEMFIT_WRITE); *a = x - v; return *this; }
    template <class U>
    const memfit_ref& operator*=(U v) const { V x = get(MEMFIT_READ | MEMFIT_WRITE); *a = x * v; return *this; }
    template <class U>
    const memfit_ref& operator|=(U v) const { V x = get(MEMFIT_READ | MEMFIT_WRITE); *a = x | v; return *this; }
    // The address is for an atomic read-modify-write.
    T* operator&() const {
        memfit_api->check((const void*)a, sizeof(T), line, MEMFIT_READ | MEMFIT_WRITE);
        return a;
    }
};
#define GMEM(type, p, i) (memfit_ref<type>{(type*)(p) + (long long)(i), __LINE__})

static inline void __syncthreads() { memfit_api->syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { memfit_api->syncwarp(mask); }

template <class T>
static inline T memfit_shfl(int kind, unsigned mask, T v, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = memfit_api->shfl(kind, mask, bits, arg, width);
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) { return memfit_shfl(MEMFIT_SHFL_IDX, mask, v, src, width); }
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) { return memfit_shfl(MEMFIT_SHFL_UP, mask, v, (int)d, width); }
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) { return memfit_shfl(MEMFIT_SHFL_DOWN, mask, v, (int)d, width); }
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) { return memfit_shfl(MEMFIT_SHFL_XOR, mask, v, m, width); }
// memfit_mma_m16n8k16 is the warp-wide tensor-core product PTX writes
// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32, T bf16 (type
// MEMFIT_MMA_BF16) or f16 (MEMFIT_MMA_F16): D (16×8) = A (16×16) · B
// (16×8) + C (16×8), A and B of T, C and D float. All 32 lanes of the warp
// call it together (a lane that does not, or a warp of fewer than 32
// threads, fails the launch); each holds fragments, with groupID g =
// lane/4 and t = lane%4, two 16-bit elements per register, the lower
// column (A) or row (B) in the low half:
//
//   a[0]: A[g][2t, 2t+1]    a[1]: A[g+8][2t, 2t+1]
//   a[2]: A[g][2t+8, 2t+9]  a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]    b[1]: B[2t+8, 2t+9][g]
//   c[0], c[1]: C[g][2t, 2t+1]   c[2], c[3]: C[g+8][2t, 2t+1]   (d as c)
//
// The products of 16-bit values are exact in float; the emulator sums
// D[i][j] = C[i][j] + A[i][0]·B[0][j] + … + A[i][15]·B[15][j] in that
// order, rounding each addition to float (a GPU's order and internal
// precision are its own: NVIDIA documents float accumulation only).
static inline void memfit_mma_m16n8k16(int type, float* d, const unsigned* a, const unsigned* b, const float* c) {
    memfit_api->mma(type, a, b, c, d);
}

static inline unsigned __ballot_sync(unsigned mask, int p) { return memfit_api->vote(MEMFIT_VOTE_BALLOT, mask, p); }
static inline int __all_sync(unsigned mask, int p) { return (int)memfit_api->vote(MEMFIT_VOTE_ALL, mask, p); }
static inline int __any_sync(unsigned mask, int p) { return (int)memfit_api->vote(MEMFIT_VOTE_ANY, mask, p); }

// Bit casts.
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }

// Correctly rounded single-precision arithmetic that is never contracted
// into a fused multiply-add (the module is compiled with
// -ffp-contract=off, so plain operators are too).
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// IEEE half conversions, rounding to nearest even (PTX's cvt.rn.f16.f32).
static inline float h2f(unsigned short h) {
    unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float m = (float)man * 5.9604644775390625e-08f;  // 2^-24
        return sign ? -m : m;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline unsigned short f2h(float f) {
    unsigned b = __float_as_uint(f), sign = (b >> 16) & 0x8000u;
    unsigned a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to infinity
    if (a < 0x38800000u) {                                            // subnormal or zero in f16
        float m = __uint_as_float(a) * 16777216.0f;                   // exact: scale by 2^24
        return (unsigned short)(sign | (unsigned)std::nearbyint(m));
    }
    unsigned r = a - 0x38000000u;  // rebias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (unsigned short)(sign | (r >> 13));
}

// Atomics: the emulator runs a block's threads on one OS thread and
// switches only at barriers, so a read-modify-write is atomic as written.
template <class T>
static inline T memfit_atomic_add(T* a, T v) { T o = *a; *a = o + v; return o; }
static inline float atomicAdd(float* a, float v) { return memfit_atomic_add(a, v); }
static inline double atomicAdd(double* a, double v) { return memfit_atomic_add(a, v); }
static inline int atomicAdd(int* a, int v) { return memfit_atomic_add(a, v); }
static inline unsigned atomicAdd(unsigned* a, unsigned v) { return memfit_atomic_add(a, v); }
static inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) { return memfit_atomic_add(a, v); }
template <class T>
static inline T memfit_atomic_cas(T* a, T c, T v) { T o = *a; if (o == c) *a = v; return o; }
static inline int atomicCAS(int* a, int c, int v) { return memfit_atomic_cas(a, c, v); }
static inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { return memfit_atomic_cas(a, c, v); }
static inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) { return memfit_atomic_cas(a, c, v); }
template <class T>
static inline T memfit_atomic_exch(T* a, T v) { T o = *a; *a = v; return o; }
static inline int atomicExch(int* a, int v) { return memfit_atomic_exch(a, v); }
static inline unsigned atomicExch(unsigned* a, unsigned v) { return memfit_atomic_exch(a, v); }
static inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) { return memfit_atomic_exch(a, v); }
static inline float atomicExch(float* a, float v) { return memfit_atomic_exch(a, v); }
template <class T>
static inline T memfit_atomic_min(T* a, T v) { T o = *a; if (v < o) *a = v; return o; }
template <class T>
static inline T memfit_atomic_max(T* a, T v) { T o = *a; if (v > o) *a = v; return o; }
static inline int atomicMin(int* a, int v) { return memfit_atomic_min(a, v); }
static inline unsigned atomicMin(unsigned* a, unsigned v) { return memfit_atomic_min(a, v); }
static inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) { return memfit_atomic_min(a, v); }
static inline long long atomicMin(long long* a, long long v) { return memfit_atomic_min(a, v); }
static inline int atomicMax(int* a, int v) { return memfit_atomic_max(a, v); }
static inline unsigned atomicMax(unsigned* a, unsigned v) { return memfit_atomic_max(a, v); }
static inline unsigned long long atomicMax(unsigned long long* a, unsigned long long v) { return memfit_atomic_max(a, v); }
static inline long long atomicMax(long long* a, long long v) { return memfit_atomic_max(a, v); }

// memfit_invoke calls kernel f with the arguments cuLaunchKernel would
// pass: params[i] points at argument i.
template <class... A, std::size_t... I>
static inline void memfit_invoke_(void (*f)(A...), void** params, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(params[I])...);
}
template <class... A>
static inline void memfit_invoke(void (*f)(A...), void** params) {
    memfit_invoke_(f, params, std::index_sequence_for<A...>{});
}

#endif
