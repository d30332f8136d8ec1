// Host shim for the syntax check of kernels.cu (source_test.go): just
// enough of CUDA's device environment for g++ to type-check the source.
#include <cmath>
#include <cstring>
using std::signbit;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct memfit_dim3 { unsigned x, y, z; };
static memfit_dim3 threadIdx, blockIdx, blockDim, gridDim;
static inline void __syncthreads() {}
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline float h2f(unsigned short) { return 0; }
static inline unsigned short f2h(float) { return 0; }
static inline float atomicAdd(float* a, float v) { float o = *a; *a += v; return o; }
static inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { unsigned o = *a; if (o == c) *a = v; return o; }
static inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) { unsigned long long o = *a; if (o == c) *a = v; return o; }
static inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) { unsigned long long o = *a; if (v < o) *a = v; return o; }
