// memfit CUDA kernels: every kernel of device.Kernels but GEMM (cuBLAS).
//
// Compiled at run time by NVRTC after a prelude generated from Go constants
// (MAXD, MAXOPS, BLOCK, DT_*, UN_*, BIN_*, RED_*, DIST_*, POOL_*; see
// source.go). No header is included: f16 and bf16 values are handled as
// 16-bit patterns and converted with PTX instructions (f16) or by hand
// (bf16, with the CPU device's rounding and NaN rule), so the result does
// not depend on the toolkit's headers.
//
// Semantics follow device/cpu exactly; the comments say where the order of
// floating-point operations differs. Kernels whose arithmetic depends on
// the data type are templates over the type they compute in (float or
// double, chosen on the Go side as the CPU device chooses) with extern "C"
// entry points NAME_f32 and NAME_f64 made by TYPED.
//
// Arguments: every struct holds only 8-byte fields, so the Go side packs
// them as words without padding (geom.go).

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned short u16;

// Op is one operand: base address of the buffer, element offset of the
// view, dtype code.
struct Op {
    char* p;
    i64 off;
    i64 dt;
};

// Ew is the geometry of an elementwise kernel: n elements over a row-major
// shape of rank dimensions; str[k] are the strides of operand k.
struct Ew {
    i64 n;
    i64 rank;
    i64 shape[MAXD];
    i64 str[MAXOPS][MAXD];
};

// Red is the geometry of a reduction: nout outputs over the kept
// dimensions (strides in src and dst), each reducing nred elements of src
// over the reduced dimensions.
struct Red {
    i64 nout, nred, orank, rrank;
    i64 oshape[MAXD];
    i64 osrc[MAXD];
    i64 odst[MAXD];
    i64 rshape[MAXD];
    i64 rstr[MAXD];
};

// Conv is device.ConvGeom, its dilations read as >= 1.
struct Conv {
    i64 N, C, H, W, KH, KW, SH, SW, PH, PW, OH, OW, DH, DW;  // DH, DW >= 1 (pools: 1)
};

// GMEM(type, p, i) is element i of the global memory at p, as an lvalue of
// type: every global-memory access of the kernels goes through it, so that
// the CUDA emulator (device/cuda/internal/cu) can define it to check the
// access against the live allocations. On a GPU it is the plain access.
#ifndef GMEM
#define GMEM(type, p, i) (((type*)(p))[i])
#endif

#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)
#define ROWS(r, rows) for (i64 r = blockIdx.x; r < (rows); r += gridDim.x)

#define TYPED(name, params, call)                                     \
    extern "C" __global__ void name##_f32 params { name<float> call; } \
    extern "C" __global__ void name##_f64 params { name<double> call; }

// ---------------------------------------------------------------- numbers

#ifndef MEMFIT_HOST_CHECK
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float bf2f(u16 h) { return __uint_as_float(((unsigned)h) << 16); }

// f2bf rounds to nearest even; a NaN keeps its sign and becomes quiet, as
// cpu.BF16FromF32 does.
__device__ __forceinline__ u16 f2bf(float f) {
    unsigned b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (u16)(b >> 16);
}

// narrow16 gives the float from which a 16-bit store rounds: v itself for
// a float; for a double, v rounded to odd (truncated, last bit set when
// inexact), so that the one rounding to f16/bf16 that follows is the
// correctly rounded result of the double, as cpu.BF16FromF64 does. A
// plain (float) cast would round twice.
__device__ __forceinline__ float narrow16(float v) { return v; }
__device__ __forceinline__ float narrow16(double v) {
    float r = (float)v;
    if ((double)r == v || v != v) return r;
    unsigned b = __float_as_uint(r);
    if (fabs((double)r) > fabs(v)) b--;
    return __uint_as_float(b | 1u);
}

__device__ __forceinline__ float xerf(float x) { return erff(x); }
__device__ __forceinline__ double xerf(double x) { return erf(x); }
__device__ __forceinline__ float xexp(float x) { return expf(x); }
__device__ __forceinline__ double xexp(double x) { return exp(x); }
__device__ __forceinline__ float xlog(float x) { return logf(x); }
__device__ __forceinline__ double xlog(double x) { return log(x); }
__device__ __forceinline__ float xsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double xsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float xtanh(float x) { return tanhf(x); }
__device__ __forceinline__ double xtanh(double x) { return tanh(x); }
__device__ __forceinline__ float xabs(float x) { return fabsf(x); }
__device__ __forceinline__ double xabs(double x) { return fabs(x); }
__device__ __forceinline__ float xpow(float x, float y) { return (float)pow((double)x, (double)y); }
__device__ __forceinline__ double xpow(double x, double y) { return pow(x, y); }

// xmax and xmin are Go's max and min: NaN wins, and +0 > -0.
template <class T>
__device__ __forceinline__ T xmax(T a, T b) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
template <class T>
__device__ __forceinline__ T xmin(T a, T b) {
    if (a != a || b != b) return a + b;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

// ld reads element rel (relative to the view's offset) as T, converting as
// the CPU device's load does; st writes v converted to the operand's dtype
// (f16 and bf16 rounded once, from the float or double value, as on the
// CPU).
template <class T>
__device__ __forceinline__ T ld(const Op& o, i64 rel) {
    i64 i = o.off + rel;
    switch (o.dt) {
    case DT_F32: return (T)GMEM(const float, o.p, i);
    case DT_F64: return (T)GMEM(const double, o.p, i);
    case DT_F16: return (T)h2f(GMEM(const u16, o.p, i));
    case DT_BF16: return (T)bf2f(GMEM(const u16, o.p, i));
    case DT_I32: return (T)GMEM(const int, o.p, i);
    case DT_I64: return (T)GMEM(const i64, o.p, i);
    case DT_U8: return (T)GMEM(const unsigned char, o.p, i);
    }
    return (T)0;
}

template <class T>
__device__ __forceinline__ void st(const Op& o, i64 rel, T v) {
    i64 i = o.off + rel;
    switch (o.dt) {
    case DT_F32: GMEM(float, o.p, i) = (float)v; break;
    case DT_F64: GMEM(double, o.p, i) = (double)v; break;
    case DT_F16: GMEM(u16, o.p, i) = f2h(narrow16(v)); break;
    case DT_BF16: GMEM(u16, o.p, i) = f2bf(narrow16(v)); break;
    case DT_I32: GMEM(int, o.p, i) = (int)v; break;
    case DT_I64: GMEM(i64, o.p, i) = (i64)v; break;
    case DT_U8: GMEM(unsigned char, o.p, i) = (unsigned char)v; break;
    }
}

// ldi reads an index (I32 or I64).
__device__ __forceinline__ i64 ldi(const Op& o, i64 rel) {
    i64 i = o.off + rel;
    if (o.dt == DT_I64) return GMEM(const i64, o.p, i);
    return (i64)GMEM(const int, o.p, i);
}

// ew_offsets gives each operand's offset of element i. A GPU divides 64-
// bit integers in software, several times slower than 32-bit ones, and an
// elementwise kernel does little else per element: one dimension (what
// merging leaves of contiguous operands) needs no division, and shapes of
// fewer than 2^31 elements divide in 32 bits.
__device__ __forceinline__ void ew_offsets(const Ew& g, i64 i, int nops, i64* o) {
    if (g.rank <= 1) {
        for (int k = 0; k < nops; k++) o[k] = g.rank ? i * g.str[k][0] : 0;
        return;
    }
    for (int k = 0; k < nops; k++) o[k] = 0;
    if (g.n <= 0x7fffffffLL) {
        unsigned u = (unsigned)i;
        for (int d = (int)g.rank - 1; d >= 0; d--) {
            const unsigned s = (unsigned)g.shape[d], c = u % s;
            u /= s;
            for (int k = 0; k < nops; k++) o[k] += (i64)c * g.str[k][d];
        }
        return;
    }
    for (int d = (int)g.rank - 1; d >= 0; d--) {
        i64 s = g.shape[d];
        i64 c = i % s;
        i /= s;
        for (int k = 0; k < nops; k++) o[k] += c * g.str[k][d];
    }
}

// ---------------------------------------------------------------- block reductions

__device__ __forceinline__ double identity(i64 op) {
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    if (op == RED_MAX) return -inf;
    if (op == RED_MIN) return inf;
    return 0;
}

template <class A>
__device__ __forceinline__ A combine(i64 op, A a, A b) {
    if (op == RED_MAX) return xmax(a, b);
    if (op == RED_MIN) return xmin(a, b);
    return a + b;
}

// warp_reduce combines one value per lane of a full warp by butterfly
// shuffles: every lane gets the result, combined in the same order on
// every lane.
template <class A>
__device__ __forceinline__ A warp_reduce(A v, i64 op) {
    for (int off = 16; off > 0; off >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// block_reduce combines one value per thread of a block of a multiple of
// 32 threads, at most 32 warps; every thread gets the result. Each warp
// reduces its values with shuffles, lane 0 puts the warp's result in
// sh (32 values), and every warp then reduces those: two barriers, the
// second so that sh may be written again by the next call.
template <class A>
__device__ A block_reduce(A v, i64 op, A* sh) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    v = warp_reduce(v, op);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? sh[lane] : (A)identity(op);
    v = warp_reduce(v, op);
    __syncthreads();
    return v;
}

// ---------------------------------------------------------------- random numbers

// splitmix64 and uniform01 are device/cpu's, bit for bit: element i of a
// seeded draw is a pure function of (seed, i).
__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

__device__ __forceinline__ double uniform01(u64 seed, u64 i) {
    return (double)(splitmix64(seed ^ splitmix64(i)) >> 11) / 9007199254740992.0;  // 2^53
}

// ---------------------------------------------------------------- fill, copy, casts

template <class T>
__device__ void k_fill(Ew g, Op dst, double v) {
    i64 o[1];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 1, o);
        st<T>(dst, o[0], (T)v);
    }
}
TYPED(k_fill, (Ew g, Op dst, double v), (g, dst, v))

// k_convert copies between dtypes through T.
template <class T>
__device__ void k_convert(Ew g, Op dst, Op src) {
    i64 o[2];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 2, o);
        st<T>(dst, o[0], ld<T>(src, o[1]));
    }
}
TYPED(k_convert, (Ew g, Op dst, Op src), (g, dst, src))

// k_copyN copy elements of N bytes unchanged (same dtype on both sides).
#define COPY_RAW(name, type)                                              \
    extern "C" __global__ void name(Ew g, Op dst, Op src) {              \
        i64 o[2];                                                         \
        GRID_STRIDE(i, g.n) {                                             \
            ew_offsets(g, i, 2, o);                                       \
            GMEM(type, dst.p, dst.off + o[0]) = GMEM(const type, src.p, src.off + o[1]); \
        }                                                                 \
    }
COPY_RAW(k_copy1, unsigned char)
COPY_RAW(k_copy2, u16)
COPY_RAW(k_copy4, unsigned)
COPY_RAW(k_copy8, u64)

// ---------------------------------------------------------------- unary, binary

#define GELU_C 0.7978845608028654  // sqrt(2/pi)

template <class T>
__device__ __forceinline__ T unary_f(i64 op, T x, T arg) {
    switch (op) {
    case UN_NEG: return -x;
    case UN_EXP: return xexp(x);
    case UN_LOG: return xlog(x);
    case UN_SQRT: return xsqrt(x);
    case UN_TANH: return xtanh(x);
    case UN_SIGMOID: return (T)1 / ((T)1 + xexp(-x));
    case UN_RELU: return x > (T)0 ? x : (T)0;
    case UN_GELU: return (T)0.5 * x * ((T)1 + xtanh((T)GELU_C * (x + (T)0.044715 * x * x * x)));
    case UN_ABS: return xabs(x);
    case UN_SQUARE: return x * x;
    case UN_RECIP: return (T)1 / x;
    case UN_POW: return xpow(x, arg);
    case UN_ADD_SCALAR: return x + arg;
    case UN_MUL_SCALAR: return x * arg;
    case UN_GELU_ERF: return (T)0.5 * x * ((T)1 + xerf(x * (T)0.70710678118654752));
    }
    return x;
}

template <class T>
__device__ void k_unary(Ew g, Op dst, Op src, i64 op, double arg) {
    i64 o[2];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 2, o);
        st<T>(dst, o[0], unary_f<T>(op, ld<T>(src, o[1]), (T)arg));
    }
}
TYPED(k_unary, (Ew g, Op dst, Op src, i64 op, double arg), (g, dst, src, op, arg))

// unary_grad is dy·f' where v is x or y as device.UnaryNeeds says.
template <class T>
__device__ __forceinline__ T unary_grad(i64 op, T v, T g, T arg) {
    switch (op) {
    case UN_NEG: return -g;
    case UN_EXP: return g * v;
    case UN_LOG: return g / v;
    case UN_SQRT: return g * (T)0.5 / v;
    case UN_TANH: return g * ((T)1 - v * v);
    case UN_SIGMOID: return g * v * ((T)1 - v);
    case UN_RELU: return v > (T)0 ? g : (T)0;
    case UN_GELU: {
        T u = (T)GELU_C * (v + (T)0.044715 * v * v * v);
        T t = xtanh(u);
        T du = (T)GELU_C * ((T)1 + (T)(3 * 0.044715) * v * v);
        return g * ((T)0.5 * ((T)1 + t) + (T)0.5 * v * ((T)1 - t * t) * du);
    }
    case UN_ABS: return v > (T)0 ? g : (v < (T)0 ? -g : (T)0);
    case UN_SQUARE: return (T)2 * v * g;
    case UN_RECIP: return -g * v * v;
    case UN_POW: return g * arg * xpow(v, arg - (T)1);
    case UN_ADD_SCALAR: return g;
    case UN_MUL_SCALAR: return g * arg;
    case UN_GELU_ERF: {  // Φ(v) + v·φ(v)
        T cdf = (T)0.5 * ((T)1 + xerf(v * (T)0.70710678118654752));
        T pdf = xexp((T)-0.5 * v * v) * (T)0.39894228040143268;  // 1/√(2π)
        return g * (cdf + v * pdf);
    }
    }
    return g;
}

// Operand order: dx, dy, in (x or y, or dy again when op needs neither).
template <class T>
__device__ void k_unary_bwd(Ew g, Op dx, Op dy, Op in, i64 op, double arg) {
    i64 o[3];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 3, o);
        st<T>(dx, o[0], unary_grad<T>(op, ld<T>(in, o[2]), ld<T>(dy, o[1]), (T)arg));
    }
}
TYPED(k_unary_bwd, (Ew g, Op dx, Op dy, Op in, i64 op, double arg), (g, dx, dy, in, op, arg))

template <class T>
__device__ __forceinline__ T binary_f(i64 op, T a, T b) {
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return a / b;
    case BIN_MAXIMUM: return xmax(a, b);
    case BIN_MINIMUM: return xmin(a, b);
    case BIN_EQUAL: return a == b ? (T)1 : (T)0;
    }
    return a;
}

template <class T>
__device__ void k_binary(Ew g, Op dst, Op a, Op b, i64 op) {
    i64 o[3];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 3, o);
        st<T>(dst, o[0], binary_f<T>(op, ld<T>(a, o[1]), ld<T>(b, o[2])));
    }
}
TYPED(k_binary, (Ew g, Op dst, Op a, Op b, i64 op), (g, dst, a, b, op))

template <class T>
__device__ void k_masked_fill(Ew g, Op dst, Op src, Op mask, double value) {
    i64 o[3];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 3, o);
        T v = ld<T>(mask, o[2]) != (T)0 ? (T)value : ld<T>(src, o[1]);
        st<T>(dst, o[0], v);
    }
}
TYPED(k_masked_fill, (Ew g, Op dst, Op src, Op mask, double value), (g, dst, src, mask, value))

// k_causal_fill: element i of dst's shape lies above the diagonal of the
// last two dimensions (rows × cols) when i%cols > (i/cols)%rows.
template <class T>
__device__ void k_causal_fill(Ew g, Op dst, Op src, double value, i64 rows, i64 cols) {
    i64 o[2];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 2, o);
        T v = (i % cols > (i / cols) % rows) ? (T)value : ld<T>(src, o[1]);
        st<T>(dst, o[0], v);
    }
}
TYPED(k_causal_fill, (Ew g, Op dst, Op src, double value, i64 rows, i64 cols), (g, dst, src, value, rows, cols))

// ---------------------------------------------------------------- dropout, random, finiteness

// k_dropout: element i is dropped when uniform01(seed, i) < p, where i is
// its position in dst's shape, as on the CPU; scale is 1/(1-p) computed on
// the host in double.
template <class T>
__device__ void k_dropout(Ew g, Op dst, Op src, double p, double scale, u64 seed) {
    i64 o[2];
    T s = (T)scale;
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 2, o);
        T v = uniform01(seed, (u64)i) < p ? (T)0 : ld<T>(src, o[1]) * s;
        st<T>(dst, o[0], v);
    }
}
TYPED(k_dropout, (Ew g, Op dst, Op src, double p, double scale, u64 seed), (g, dst, src, p, scale, seed))

extern "C" __global__ void k_random(Ew g, Op dst, i64 dist, double a, double b, u64 seed) {
    i64 o[1];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 1, o);
        double y;
        if (dist == DIST_NORMAL) {
            // Box-Muller on two independent draws of the same element.
            double u1 = uniform01(seed, 2 * (u64)i);
            double u2 = uniform01(seed, 2 * (u64)i + 1);
            y = a + b * sqrt(-2 * log(1 - u1)) * cos(2 * 3.141592653589793 * u2);
        } else {
            y = a + (b - a) * uniform01(seed, (u64)i);
        }
        st<double>(dst, o[0], y);
    }
}

// k_all_finite sets *flag to 1 when an element is inf or NaN.
extern "C" __global__ void k_all_finite(Ew g, Op src, u64 flag) {
    i64 o[1];
    GRID_STRIDE(i, g.n) {
        ew_offsets(g, i, 1, o);
        double v = ld<double>(src, o[0]);
        if (v != v || v - v != 0) {
            *(volatile int*)flag = 1;
        }
    }
}

// ---------------------------------------------------------------- reductions

// red_out and red_in are ew_offsets' counterparts for reductions, with the
// same shortcut for one dimension.
__device__ __forceinline__ void red_out(const Red& r, i64 o, i64* so, i64* dof) {
    if (r.orank <= 1) {
        *so = r.orank ? o * r.osrc[0] : 0;
        *dof = r.orank ? o * r.odst[0] : 0;
        return;
    }
    *so = 0;
    *dof = 0;
    for (int d = (int)r.orank - 1; d >= 0; d--) {
        i64 c = o % r.oshape[d];
        o /= r.oshape[d];
        *so += c * r.osrc[d];
        *dof += c * r.odst[d];
    }
}

__device__ __forceinline__ i64 red_in(const Red& r, i64 j) {
    if (r.rrank <= 1) return r.rrank ? j * r.rstr[0] : 0;
    i64 s = 0;
    for (int d = (int)r.rrank - 1; d >= 0; d--) {
        i64 c = j % r.rshape[d];
        j /= r.rshape[d];
        s += c * r.rstr[d];
    }
    return s;
}

// Reductions accumulate in T: float for f32, f16 and bf16 data, double
// for f64 (the CPU device sums in double; the order differs anyway, and
// the conformance suite allows any order's rounding of an F32 sum).

// One block per output element, for reductions over contiguous elements
// (a row): the block's threads stride through them.
template <class T>
__device__ void k_reduce_block(Red r, Op dst, Op src, i64 op) {
    __shared__ T sh[32];
    ROWS(o, r.nout) {
        i64 so, dof;
        red_out(r, o, &so, &dof);
        T acc = (T)identity(op);
        for (i64 j = threadIdx.x; j < r.nred; j += blockDim.x) acc = combine(op, acc, ld<T>(src, so + red_in(r, j)));
        acc = block_reduce(acc, op, sh);
        if (threadIdx.x == 0) st<T>(dst, dof, acc);
    }
}
TYPED(k_reduce_block, (Red r, Op dst, Op src, i64 op), (r, dst, src, op))

// One thread per output element, for short reductions.
template <class T>
__device__ void k_reduce_thread(Red r, Op dst, Op src, i64 op) {
    GRID_STRIDE(o, r.nout) {
        i64 so, dof;
        red_out(r, o, &so, &dof);
        T acc = (T)identity(op);
        for (i64 j = 0; j < r.nred; j++) acc = combine(op, acc, ld<T>(src, so + red_in(r, j)));
        st<T>(dst, dof, acc);
    }
}
TYPED(k_reduce_thread, (Red r, Op dst, Op src, i64 op), (r, dst, src, op))

// COLS (from the prelude) outputs per block of k_reduce_cols and
// k_layernorm_bwd_param: COLS consecutive threads take COLS consecutive
// outputs, so that a warp reads whole 32-byte sectors of 32/COLS rows (f32),
// and the block's 256/COLS groups of threads split the reduced elements
// between them. Few outputs per block make many blocks: a bias of 384
// takes 48.
//
// When that is still too few blocks to fill the GPU, the reduced elements
// are split too, into slices of chunk consecutive ones (geom.go's
// colsSplit): the grid is ncb column blocks times the slices, block b
// taking column block b % ncb of slice b / ncb, and each block writes its
// outputs' partial results, in T, to the device's partials buffer (slice
// s of output o at s·nout + o); a second kernel (*_combine) combines each
// output's partials in slice order. Every order is fixed: the same result
// bit for bit on every run, which atomics would not give. chunk = nred is
// one slice: the block stores its results itself and part is not used.

// cols_slice is the slice a block of a column reduction takes: its column
// block, and the range [*lo, *hi) of reduced elements.
__device__ __forceinline__ i64 cols_slice(i64 nred, i64 chunk, i64* ncb, i64* s, i64* lo, i64* hi) {
    const i64 slices = nred > chunk ? (nred + chunk - 1) / chunk : 1;
    *ncb = gridDim.x / slices;
    *s = blockIdx.x / *ncb;
    *lo = *s * chunk;
    *hi = *lo + chunk < nred ? *lo + chunk : nred;
    return slices;
}

// k_reduce_cols reduces over outer dimensions with the kept ones
// innermost (a bias gradient: [rows, n] into [n]): block b takes outputs
// b·COLS… of its slice, group w the reduced elements lo+w, lo+w+W, … (W
// groups), and the W partial results of each output are combined in group
// order: the same order on every run.
template <class T>
__device__ void k_reduce_cols(Red r, Op dst, Op src, i64 op, i64 chunk, u64 part) {
    __shared__ T sh[BLOCK];
    const int lane = threadIdx.x % COLS, w = threadIdx.x / COLS, nw = blockDim.x / COLS;
    i64 ncb, s, lo, hi;
    const i64 slices = cols_slice(r.nred, chunk, &ncb, &s, &lo, &hi);
    for (i64 o0 = (i64)(blockIdx.x % ncb) * COLS; o0 < r.nout; o0 += ncb * COLS) {
        const i64 o = o0 + lane;
        T acc = (T)identity(op);
        if (o < r.nout) {
            i64 so, dof;
            red_out(r, o, &so, &dof);
            // Four rows in flight per thread (independent loads and
            // partial results, combined in a fixed order): one load at a
            // time left an H200 at a tenth of its bandwidth.
            T a1 = acc, a2 = acc, a3 = acc;
            i64 j = lo + w;
            for (; j + 3 * nw < hi; j += 4 * nw) {
                const T x0 = ld<T>(src, so + red_in(r, j)), x1 = ld<T>(src, so + red_in(r, j + nw));
                const T x2 = ld<T>(src, so + red_in(r, j + 2 * nw)), x3 = ld<T>(src, so + red_in(r, j + 3 * nw));
                acc = combine(op, acc, x0);
                a1 = combine(op, a1, x1);
                a2 = combine(op, a2, x2);
                a3 = combine(op, a3, x3);
            }
            for (; j < hi; j += nw) acc = combine(op, acc, ld<T>(src, so + red_in(r, j)));
            acc = combine(op, combine(op, acc, a1), combine(op, a2, a3));
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        if (w == 0 && o < r.nout) {
            for (int k = 1; k < nw; k++) acc = combine(op, acc, sh[k * COLS + lane]);
            if (slices == 1) {
                i64 so, dof;
                red_out(r, o, &so, &dof);
                st<T>(dst, dof, acc);
            } else {
                GMEM(T, part, s * r.nout + o) = acc;
            }
        }
        __syncthreads();
    }
}
TYPED(k_reduce_cols, (Red r, Op dst, Op src, i64 op, i64 chunk, u64 part), (r, dst, src, op, chunk, part))

// k_reduce_cols_combine stores each output's combined partials, slice 0
// first.
template <class T>
__device__ void k_reduce_cols_combine(Red r, Op dst, i64 op, i64 slices, u64 part) {
    GRID_STRIDE(o, r.nout) {
        T acc = (T)GMEM(const T, part, o);
        for (i64 s = 1; s < slices; s++) acc = combine(op, acc, (T)GMEM(const T, part, s * r.nout + o));
        i64 so, dof;
        red_out(r, o, &so, &dof);
        st<T>(dst, dof, acc);
    }
}
TYPED(k_reduce_cols_combine, (Red r, Op dst, i64 op, i64 slices, u64 part), (r, dst, op, slices, part))

// ---------------------------------------------------------------- softmax

// One block per row of n contiguous elements, in T (float for f32, f16
// and bf16 data, double for f64): the row's maximum, then the sum of
// exponentials, each reduced by block_reduce.
template <class T>
__device__ void k_softmax(i64 rows, i64 n, Op dst, Op src, i64 lg) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 base = r * n;
        T m = (T)identity(RED_MAX);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) m = xmax(m, ld<T>(src, base + i));
        m = block_reduce(m, RED_MAX, sh);
        T s = 0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) s += xexp(ld<T>(src, base + i) - m);
        s = block_reduce(s, RED_SUM, sh);
        if (lg) {
            const T lse = m + xlog(s);
            for (i64 i = threadIdx.x; i < n; i += blockDim.x) st<T>(dst, base + i, ld<T>(src, base + i) - lse);
        } else {
            const T inv = (T)1 / s;
            for (i64 i = threadIdx.x; i < n; i += blockDim.x) st<T>(dst, base + i, xexp(ld<T>(src, base + i) - m) * inv);
        }
    }
}
TYPED(k_softmax, (i64 rows, i64 n, Op dst, Op src, i64 lg), (rows, n, dst, src, lg))

template <class T>
__device__ void k_softmax_bwd(i64 rows, i64 n, Op dx, Op y, Op dy, i64 lg) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 base = r * n;
        T s = 0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T g = ld<T>(dy, base + i);
            s += lg ? g : g * ld<T>(y, base + i);
        }
        s = block_reduce(s, RED_SUM, sh);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T g = ld<T>(dy, base + i), yy = ld<T>(y, base + i);
            st<T>(dx, base + i, lg ? g - xexp(yy) * s : yy * (g - s));
        }
    }
}
TYPED(k_softmax_bwd, (i64 rows, i64 n, Op dx, Op y, Op dy, i64 lg), (rows, n, dx, y, dy, lg))

// ---------------------------------------------------------------- layer norm

// One block per row, in T: the mean, then the variance about it (two
// passes, so no cancellation), each reduced by block_reduce. Unless xc is
// null, the first pass also writes x into it, converted as k_convert
// does (autocast's 16-bit copy of an F32 input, saved for backward).
template <class T>
__device__ void k_layernorm(i64 rows, i64 n, Op y, Op xc, Op mean, Op rstd, Op x, Op gamma, Op beta, double eps) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 base = r * n;
        T mu = 0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T v = ld<T>(x, base + i);
            mu += v;
            if (xc.p) st<T>(xc, base + i, v);
        }
        mu = block_reduce(mu, RED_SUM, sh) / (T)n;
        T vr = 0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T d = ld<T>(x, base + i) - mu;
            vr += d * d;
        }
        vr = block_reduce(vr, RED_SUM, sh);
        const T rs = (T)1 / xsqrt(vr / (T)n + (T)eps);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T xh = (ld<T>(x, base + i) - mu) * rs;
            st<T>(y, base + i, xh * ld<T>(gamma, i) + ld<T>(beta, i));
        }
        if (threadIdx.x == 0) {
            st<T>(mean, r, mu);
            st<T>(rstd, r, rs);
        }
    }
}
TYPED(k_layernorm, (i64 rows, i64 n, Op y, Op xc, Op mean, Op rstd, Op x, Op gamma, Op beta, double eps),
      (rows, n, y, xc, mean, rstd, x, gamma, beta, eps))

// dx of layer norm, one block per row.
template <class T>
__device__ void k_layernorm_bwd_dx(i64 rows, i64 n, Op dx, Op dy, Op x, Op mean, Op rstd, Op gamma) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 base = r * n;
        const T mu = ld<T>(mean, r), rs = ld<T>(rstd, r);
        T s1 = 0, s2 = 0;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T xh = (ld<T>(x, base + i) - mu) * rs;
            const T gg = ld<T>(dy, base + i) * ld<T>(gamma, i);
            s1 += gg;
            s2 += gg * xh;
        }
        s1 = block_reduce(s1, RED_SUM, sh) / (T)n;
        s2 = block_reduce(s2, RED_SUM, sh) / (T)n;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const T xh = (ld<T>(x, base + i) - mu) * rs;
            const T gg = ld<T>(dy, base + i) * ld<T>(gamma, i);
            st<T>(dx, base + i, rs * (gg - s1 - xh * s2));
        }
    }
}
TYPED(k_layernorm_bwd_dx, (i64 rows, i64 n, Op dx, Op dy, Op x, Op mean, Op rstd, Op gamma),
      (rows, n, dx, dy, x, mean, rstd, gamma))

// dgamma and dbeta of layer norm, added to what the buffers hold (a null
// dgamma or dbeta is skipped): as k_reduce_cols, COLS columns per block,
// each group of COLS threads on every W-th row of the block's slice of
// rows, their partial sums combined in group order (deterministic). Split
// into slices (chunk < rows), a block writes dgamma's partials to part at
// s·n + i and dbeta's at (slices + s)·n + i, and
// k_layernorm_bwd_param_combine adds them in slice order.
template <class T>
__device__ void k_layernorm_bwd_param(i64 rows, i64 n, Op dgamma, Op dbeta, Op dy, Op x, Op mean, Op rstd, i64 chunk,
                                      u64 part) {
    __shared__ T shg[BLOCK];
    __shared__ T shb[BLOCK];
    const int lane = threadIdx.x % COLS, w = threadIdx.x / COLS, nw = blockDim.x / COLS;
    i64 ncb, sl, lo, hi;
    const i64 slices = cols_slice(rows, chunk, &ncb, &sl, &lo, &hi);
    for (i64 i0 = (i64)(blockIdx.x % ncb) * COLS; i0 < n; i0 += ncb * COLS) {
        const i64 i = i0 + lane;
        T dg = 0, db = 0;
        if (i < n) {
            // Two rows in flight per thread, as in k_reduce_cols, their
            // sums kept apart and added in a fixed order.
            T dg1 = 0, db1 = 0;
            i64 r = lo + w;
            for (; r + nw < hi; r += 2 * nw) {
                const i64 r1 = r + nw;
                const T g0 = ld<T>(dy, r * n + i), g1 = ld<T>(dy, r1 * n + i);
                const T x0 = ld<T>(x, r * n + i), x1 = ld<T>(x, r1 * n + i);
                const T m0 = ld<T>(mean, r), m1 = ld<T>(mean, r1), s0 = ld<T>(rstd, r), s1 = ld<T>(rstd, r1);
                dg += g0 * ((x0 - m0) * s0);
                db += g0;
                dg1 += g1 * ((x1 - m1) * s1);
                db1 += g1;
            }
            for (; r < hi; r += nw) {
                const T g = ld<T>(dy, r * n + i);
                const T xh = (ld<T>(x, r * n + i) - ld<T>(mean, r)) * ld<T>(rstd, r);
                dg += g * xh;
                db += g;
            }
            dg += dg1;
            db += db1;
        }
        shg[threadIdx.x] = dg;
        shb[threadIdx.x] = db;
        __syncthreads();
        if (w == 0 && i < n) {
            for (int k = 1; k < nw; k++) {
                dg += shg[k * COLS + lane];
                db += shb[k * COLS + lane];
            }
            if (slices > 1) {
                if (dgamma.p) GMEM(T, part, sl * n + i) = dg;
                if (dbeta.p) GMEM(T, part, (slices + sl) * n + i) = db;
            } else {
                if (dgamma.p) st<T>(dgamma, i, ld<T>(dgamma, i) + dg);
                if (dbeta.p) st<T>(dbeta, i, ld<T>(dbeta, i) + db);
            }
        }
        __syncthreads();
    }
}
TYPED(k_layernorm_bwd_param,
      (i64 rows, i64 n, Op dgamma, Op dbeta, Op dy, Op x, Op mean, Op rstd, i64 chunk, u64 part),
      (rows, n, dgamma, dbeta, dy, x, mean, rstd, chunk, part))

// k_layernorm_bwd_param_combine adds the slices' partials of each column,
// slice 0 first, into dgamma and dbeta.
template <class T>
__device__ void k_layernorm_bwd_param_combine(i64 n, i64 slices, Op dgamma, Op dbeta, u64 part) {
    GRID_STRIDE(i, n) {
        if (dgamma.p) {
            T dg = (T)GMEM(const T, part, i);
            for (i64 s = 1; s < slices; s++) dg += (T)GMEM(const T, part, s * n + i);
            st<T>(dgamma, i, ld<T>(dgamma, i) + dg);
        }
        if (dbeta.p) {
            T db = (T)GMEM(const T, part, slices * n + i);
            for (i64 s = 1; s < slices; s++) db += (T)GMEM(const T, part, (slices + s) * n + i);
            st<T>(dbeta, i, ld<T>(dbeta, i) + db);
        }
    }
}
TYPED(k_layernorm_bwd_param_combine, (i64 n, i64 slices, Op dgamma, Op dbeta, u64 part),
      (n, slices, dgamma, dbeta, part))

// ---------------------------------------------------------------- embeddings

// k_check_index records in *bad the smallest position whose index lies
// outside [0, limit) (positions holding ignore are exempt when use_ignore).
extern "C" __global__ void k_check_index(i64 n, Op idx, i64 limit, i64 ignore, i64 use_ignore, u64 bad) {
    GRID_STRIDE(i, n) {
        i64 t = ldi(idx, i);
        if (use_ignore && t == ignore) continue;
        if (t < 0 || t >= limit) atomicMin((u64*)bad, (u64)i);
    }
}

// k_gather copies row idx[r] of table into row r of dst (n rows of dim).
extern "C" __global__ void k_gather(i64 n, i64 dim, Op dst, Op table, Op idx) {
    GRID_STRIDE(e, n * dim) {
        i64 r = e / dim, j = e % dim;
        i64 t = ldi(idx, r);
        if (dst.dt == table.dt) {
            i64 di = dst.off + e, si = table.off + t * dim + j;
            switch (dst.dt) {
            case DT_F16:
            case DT_BF16: GMEM(u16, dst.p, di) = GMEM(const u16, table.p, si); break;
            case DT_F32:
            case DT_I32: GMEM(unsigned, dst.p, di) = GMEM(const unsigned, table.p, si); break;
            default: GMEM(u64, dst.p, di) = GMEM(const u64, table.p, si); break;
            }
        } else {
            st<double>(dst, e, ld<double>(table, t * dim + j));
        }
    }
}

// atomic_add16 adds v to the f16 or bf16 at a by compare-and-swap on the
// aligned 32-bit word that holds it.
// The word may reach past a buffer's last element (never past its
// allocation, whose size is a multiple of 4): a is checked, the word not.
__device__ void atomic_add16(u16* a, float v, bool bf) {
    unsigned* w = (unsigned*)((u64)a & ~(u64)3);
    unsigned shift = ((u64)a & 2) ? 16 : 0;
    unsigned old = *w, assumed;
    do {
        assumed = old;
        u16 h = (u16)(assumed >> shift);
        float f = (bf ? bf2f(h) : h2f(h)) + v;
        u16 nh = bf ? f2bf(f) : f2h(f);
        unsigned nw = (assumed & ~(0xffffu << shift)) | ((unsigned)nh << shift);
        old = atomicCAS(w, assumed, nw);
    } while (assumed != old);
}

__device__ void atomic_add_f64(double* a, double v) {
#if !defined(MEMFIT_HOST_CHECK) && __CUDA_ARCH__ >= 600
    atomicAdd(a, v);
#else
    u64* w = (u64*)a;
    u64 old = *w, assumed;
    do {
        assumed = old;
        old = atomicCAS(w, assumed, (u64)__double_as_longlong(__longlong_as_double((i64)assumed) + v));
    } while (assumed != old);
#endif
}

template <class T>
__device__ __forceinline__ void atomic_add(const Op& o, i64 rel, T v) {
    i64 i = o.off + rel;
    switch (o.dt) {
    case DT_F32: atomicAdd(&GMEM(float, o.p, i), (float)v); break;
    case DT_F64: atomic_add_f64(&GMEM(double, o.p, i), (double)v); break;
    case DT_F16: atomic_add16(&GMEM(u16, o.p, i), (float)v, false); break;
    case DT_BF16: atomic_add16(&GMEM(u16, o.p, i), (float)v, true); break;
    }
}

// k_scatter_add adds row i of src into row idx[i] of dst. Repeated indices
// meet in atomics, so the order of additions (and the last bit of a sum)
// varies from run to run, unlike on the CPU.
template <class T>
__device__ void k_scatter_add(i64 n, i64 dim, Op dst, Op idx, Op src) {
    GRID_STRIDE(e, n * dim) {
        i64 r = e / dim, j = e % dim;
        atomic_add<T>(dst, ldi(idx, r) * dim + j, ld<T>(src, e));
    }
}
TYPED(k_scatter_add, (i64 n, i64 dim, Op dst, Op idx, Op src), (n, dim, dst, idx, src))

// ---------------------------------------------------------------- convolution helpers

// k_im2col: one thread per element of col ([N, C·KH·KW, OH·OW]).
template <class T>
__device__ void k_im2col(Conv g, Op col, Op x) {
    i64 total = g.N * g.C * g.KH * g.KW * g.OH * g.OW;
    GRID_STRIDE(e, total) {
        i64 t = e;
        i64 ow = t % g.OW; t /= g.OW;
        i64 oh = t % g.OH; t /= g.OH;
        i64 kw = t % g.KW; t /= g.KW;
        i64 kh = t % g.KH; t /= g.KH;
        i64 nc = t;  // n*C + c
        i64 ih = oh * g.SH - g.PH + kh * g.DH, iw = ow * g.SW - g.PW + kw * g.DW;
        T v = (T)0;
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = ld<T>(x, (nc * g.H + ih) * g.W + iw);
        st<T>(col, e, v);
    }
}
TYPED(k_im2col, (Conv g, Op col, Op x), (g, col, x))

// k_col2im: one thread per element of dx, summing the columns that read it
// in the CPU device's order (kh, then kw).
template <class T>
__device__ void k_col2im(Conv g, Op dx, Op col) {
    i64 total = g.N * g.C * g.H * g.W, outLen = g.OH * g.OW;
    GRID_STRIDE(e, total) {
        i64 iw = e % g.W, ih = (e / g.W) % g.H, nc = e / (g.H * g.W);
        i64 n = nc / g.C, c = nc % g.C;
        T acc = (T)0;
        for (i64 kh = 0; kh < g.KH; kh++) {
            i64 th = ih + g.PH - kh * g.DH;
            if (th < 0 || th % g.SH != 0 || th / g.SH >= g.OH) continue;
            i64 oh = th / g.SH;
            for (i64 kw = 0; kw < g.KW; kw++) {
                i64 tw = iw + g.PW - kw * g.DW;
                if (tw < 0 || tw % g.SW != 0 || tw / g.SW >= g.OW) continue;
                i64 ow = tw / g.SW;
                i64 row = (c * g.KH + kh) * g.KW + kw;
                acc += ld<T>(col, (n * g.C * g.KH * g.KW + row) * outLen + oh * g.OW + ow);
            }
        }
        st<T>(dx, e, acc);
    }
}
TYPED(k_col2im, (Conv g, Op dx, Op col), (g, dx, col))

// k_pool: one thread per output; argmax gets the index of the maximum in
// its H×W plane (first maximum in window order).
template <class T>
__device__ void k_pool(Conv g, i64 op, Op y, Op argmax, Op x) {
    i64 outLen = g.OH * g.OW, plane = g.H * g.W;
    GRID_STRIDE(e, g.N * g.C * outLen) {
        i64 o = e % outLen, nc = e / outLen;
        i64 oh = o / g.OW, ow = o % g.OW;
        double best = identity(RED_MAX), sum = 0;
        i64 at = -1;
        for (i64 kh = 0; kh < g.KH; kh++) {
            i64 ih = oh * g.SH - g.PH + kh;
            if (ih < 0 || ih >= g.H) continue;
            for (i64 kw = 0; kw < g.KW; kw++) {
                i64 iw = ow * g.SW - g.PW + kw;
                if (iw < 0 || iw >= g.W) continue;
                double v = (double)ld<T>(x, nc * plane + ih * g.W + iw);
                sum += v;
                if (v > best || at < 0) {
                    best = v;
                    at = ih * g.W + iw;
                }
            }
        }
        if (op == POOL_MAX) {
            st<T>(y, e, (T)best);
            GMEM(int, argmax.p, argmax.off + e) = (int)at;
        } else {
            st<T>(y, e, (T)(sum / (double)(g.KH * g.KW)));
        }
    }
}
TYPED(k_pool, (Conv g, i64 op, Op y, Op argmax, Op x), (g, op, y, argmax, x))

// k_pool_bwd: one thread per element of dx, summing the windows that cover
// it in output order (as the CPU device adds them).
template <class T>
__device__ void k_pool_bwd(Conv g, i64 op, Op dx, Op argmax, Op dy) {
    i64 outLen = g.OH * g.OW, plane = g.H * g.W;
    GRID_STRIDE(e, g.N * g.C * plane) {
        i64 p = e % plane, nc = e / plane;
        i64 ih = p / g.W, iw = p % g.W;
        T acc = (T)0;
        for (i64 kh = g.KH - 1; kh >= 0; kh--) {
            i64 th = ih + g.PH - kh;
            if (th < 0 || th % g.SH != 0 || th / g.SH >= g.OH) continue;
            i64 oh = th / g.SH;
            for (i64 kw = g.KW - 1; kw >= 0; kw--) {
                i64 tw = iw + g.PW - kw;
                if (tw < 0 || tw % g.SW != 0 || tw / g.SW >= g.OW) continue;
                i64 o = oh * g.OW + tw / g.SW;
                if (op == POOL_MAX) {
                    if (GMEM(const int, argmax.p, argmax.off + nc * outLen + o) == p) acc += ld<T>(dy, nc * outLen + o);
                } else {
                    acc += ld<T>(dy, nc * outLen + o) / (T)(g.KH * g.KW);
                }
            }
        }
        st<T>(dx, e, acc);
    }
}
TYPED(k_pool_bwd, (Conv g, i64 op, Op dx, Op argmax, Op dy), (g, op, dx, argmax, dy))

// ---------------------------------------------------------------- cross entropy

// Row statistics of logits row r, in T: max, log-sum-exp and the mean.
template <class T>
__device__ void xent_row(i64 c, const Op& logits, i64 base, T* sh, T* lse, T* mean) {
    T m = (T)identity(RED_MAX);
    for (i64 i = threadIdx.x; i < c; i += blockDim.x) m = xmax(m, ld<T>(logits, base + i));
    m = block_reduce(m, RED_MAX, sh);
    T se = 0, s = 0;
    for (i64 i = threadIdx.x; i < c; i += blockDim.x) {
        const T v = ld<T>(logits, base + i);
        se += xexp(v - m);
        s += v;
    }
    se = block_reduce(se, RED_SUM, sh);
    *mean = block_reduce(s, RED_SUM, sh) / (T)c;
    *lse = m + xlog(se);
}

// loss = -(1-s)·logp[t] - s/C·Σ logp = -(1-s)·(x[t] - lse) - s·(mean(x) -
// lse), 0 where the target is ignore.
template <class T>
__device__ void k_xent(i64 rows, i64 c, Op loss, Op logits, Op targets, i64 ignore, double s) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 t = ldi(targets, r);
        if (t == ignore) {
            if (threadIdx.x == 0) st<T>(loss, r, (T)0);
            continue;
        }
        T lse, mean;
        xent_row<T>(c, logits, r * c, sh, &lse, &mean);
        if (threadIdx.x == 0) {
            const T xt = ld<T>(logits, r * c + t);
            st<T>(loss, r, -((T)1 - (T)s) * (xt - lse) - (T)s * (mean - lse));
        }
    }
}
TYPED(k_xent, (i64 rows, i64 c, Op loss, Op logits, Op targets, i64 ignore, double s),
      (rows, c, loss, logits, targets, ignore, s))

// dlogits = dloss·(softmax - (1-s)·onehot - s/C), 0 where ignored.
template <class T>
__device__ void k_xent_bwd(i64 rows, i64 c, Op dlogits, Op logits, Op targets, Op dloss, i64 ignore, double s) {
    __shared__ T sh[32];
    ROWS(r, rows) {
        i64 t = ldi(targets, r);
        if (t == ignore) {
            for (i64 i = threadIdx.x; i < c; i += blockDim.x) st<T>(dlogits, r * c + i, (T)0);
            continue;
        }
        T lse, mean;
        xent_row<T>(c, logits, r * c, sh, &lse, &mean);
        const T up = ld<T>(dloss, r), q0 = (T)(s / (double)c), q1 = (T)(s / (double)c + 1 - s);
        for (i64 i = threadIdx.x; i < c; i += blockDim.x) {
            const T p = xexp(ld<T>(logits, r * c + i) - lse);
            st<T>(dlogits, r * c + i, up * (p - (i == t ? q1 : q0)));
        }
    }
}
TYPED(k_xent_bwd, (i64 rows, i64 c, Op dlogits, Op logits, Op targets, Op dloss, i64 ignore, double s),
      (rows, c, dlogits, logits, targets, dloss, ignore, s))

// ---------------------------------------------------------------- optimizers

// adam_elem is one element's Adam/AdamW step, in double as on the CPU:
// k_adam's and k_adam_multi's arithmetic, written once so that the two
// give the same bits.
__device__ __forceinline__ void adam_elem(double gi, double& pi, double& mi, double& vi, double lr, double b1,
                                          double b2, double eps, double wd, i64 decoupled, double step,
                                          double sqrtbc2) {
    if (wd != 0) {
        if (decoupled) pi -= lr * wd * pi;
        else gi += wd * pi;
    }
    mi = b1 * mi + (1 - b1) * gi;
    vi = b2 * vi + (1 - b2) * gi * gi;
    pi -= step * mi / (sqrt(vi) / sqrtbc2 + eps);
}

// k_adam: one Adam/AdamW step per element, in double as on the CPU.
// step = lr/bc1, sqrtbc2 = sqrt(bc2), both computed on the host.
extern "C" __global__ void k_adam(i64 n, Op p, Op g, Op m, Op v, double lr, double b1, double b2, double eps,
                                  double wd, i64 decoupled, double step, double sqrtbc2, double scale) {
    GRID_STRIDE(i, n) {
        double pi = ld<double>(p, i), mi = ld<double>(m, i), vi = ld<double>(v, i);
        adam_elem(ld<double>(g, i) * scale, pi, mi, vi, lr, b1, b2, eps, wd, decoupled, step, sqrtbc2);
        st<double>(p, i, pi);
        st<double>(m, i, mi);
        st<double>(v, i, vi);
    }
}

// AdamMulti is a table of up to ADAM_MULTI contiguous f32 tensors for
// k_adam_multi: tensor k has n[k] elements at the addresses p[k], g[k],
// m[k] and v[k] (its views' first elements) and is updated by the blocks
// from start[k] to start[k+1] (to the grid's end for the last), each
// taking ADAM_CHUNK elements. It travels in the kernel's parameters,
// which stay under 4 KiB.
struct AdamMulti {
    i64 count;
    i64 start[ADAM_MULTI];
    i64 n[ADAM_MULTI];
    float* p[ADAM_MULTI];
    float* g[ADAM_MULTI];
    float* m[ADAM_MULTI];
    float* v[ADAM_MULTI];
};

// k_adam_multi is k_adam on every tensor of a table in one launch (the
// device's AdamSteps): block b finds its tensor among the block starts
// and updates one chunk of it with adam_elem, so the bits are k_adam's.
extern "C" __global__ void k_adam_multi(AdamMulti t, double lr, double b1, double b2, double eps, double wd,
                                        i64 decoupled, double step, double sqrtbc2, double scale) {
    const i64 b = blockIdx.x;
    i64 lo = 0, hi = t.count - 1;  // the last k with start[k] <= b
    while (lo < hi) {
        const i64 mid = (lo + hi + 1) / 2;
        if (t.start[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    const i64 first = (b - t.start[lo]) * ADAM_CHUNK;
    const i64 end = first + ADAM_CHUNK < t.n[lo] ? first + ADAM_CHUNK : t.n[lo];
    float *p = t.p[lo], *g = t.g[lo], *m = t.m[lo], *v = t.v[lo];
    for (i64 i = first + threadIdx.x; i < end; i += blockDim.x) {
        double pi = GMEM(const float, p, i), mi = GMEM(const float, m, i), vi = GMEM(const float, v, i);
        adam_elem((double)GMEM(const float, g, i) * scale, pi, mi, vi, lr, b1, b2, eps, wd, decoupled, step, sqrtbc2);
        GMEM(float, p, i) = (float)pi;
        GMEM(float, m, i) = (float)mi;
        GMEM(float, v, i) = (float)vi;
    }
}

// k_sgd: one SGD step per element (PyTorch's definition), in double.
extern "C" __global__ void k_sgd(i64 n, Op p, Op g, Op buf, double lr, double momentum, double dampening,
                                 double wd, i64 nesterov, i64 first, double scale) {
    GRID_STRIDE(i, n) {
        double pi = ld<double>(p, i);
        double gi = ld<double>(g, i) * scale + wd * pi;
        if (momentum != 0) {
            double bi = first ? gi : momentum * ld<double>(buf, i) + (1 - dampening) * gi;
            st<double>(buf, i, bi);
            gi = nesterov ? gi + momentum * bi : bi;
        }
        st<double>(p, i, pi - lr * gi);
    }
}

// ---------------------------------------------------------------- fused causal attention
//
// device.AttentionKernels, as device/cpu computes them: one block per
// workspace slot, each taking (batch, head) pairs in turn (backward:
// (batch, key head) pairs, see k_attention_bwd); query rows in
// blocks of ATT_BLOCK whose scores against the keys up to the block's last
// row live in the slot (T elements per row: nothing of T×T size). Forward
// keeps the output and one log-sum-exp per row; backward recomputes the
// probabilities from them. Scores, probabilities and accumulators are T
// (float, or double for f64 inputs); for 16-bit inputs the probabilities
// and their gradient are rounded to the input dtype before the products
// that take them, as on the CPU. Dropout draws element ((b·H+h)·T+i)·T+j
// of the seed's stream, the mask the composed path draws. With example
// boundaries (seg, an I32 [B·T] operand in the workspace's front, null
// without) row i of batch b sees keys seg[b·T+i]…i only (example
// boundaries and sliding windows alike), and a block starts its keys at
// its rows' earliest start: the slot's columns before it are never
// written or read. Under a soft cap c (softcap > 0, device.Attention's
// Softcap) each score s = scale·q·k is c·tanh(s/c) before the mask and
// the softmax, and backward multiplies the scores' gradient by the cap's
// derivative 1 − tanh²(s/c) (att_cap); softcap 0 runs the code without.
// Keys and values have KV heads dividing the queries' H (grouped-query
// attention; KV = H without groups): query head h reads key and value head
// h/(H/KV) (att_kv_head), and dk and dv of key head g sum the query heads
// g·H/KV… of its group, in head order, in the accumulators of one block
// (the slot kernel's, or the tiled k_flash_bwd_kv's registers): no
// atomics, the same order on every run. Dropout stays numbered by query
// head.

// Heads are the strides of a [B, H, T, D] view whose last stride is 1.
struct Heads {
    i64 sb, sh, st;
};

__device__ __forceinline__ i64 head_el(const Heads& s, i64 b, i64 h, i64 t, i64 d) {
    return b * s.sb + h * s.sh + t * s.st + d;
}

// att_kv_head is the key and value head that query head h of H reads
// when keys and values have KV heads.
__device__ __forceinline__ i64 att_kv_head(i64 h, i64 H, i64 KV) { return h / (H / KV); }

// att_start is the first key row i of batch b attends: its example's
// start, or 0 without boundaries.
__device__ __forceinline__ i64 att_start(const Op& seg, i64 b, i64 Tn, i64 i) {
    return seg.p ? ldi(seg, b * Tn + i) : 0;
}

// att_block_start is the first key a block of rows from i0 meets: the
// earliest start of its rows, which is its first row's, since starts never
// decrease along a row (device.Attention.CheckStarts guarantees it).
__device__ __forceinline__ i64 att_block_start(const Op& seg, i64 b, i64 Tn, i64 i0) { return att_start(seg, b, Tn, i0); }

// att_cap is the soft cap of a scaled score x, c·tanh(x/c), and in *dcap
// its derivative 1 − tanh²(x/c); the callers take it only for c > 0.
template <class T>
__device__ __forceinline__ T att_cap(T x, T c, T* dcap) {
    const T t = xtanh(x / c);
    *dcap = (T)1 - t * t;
    return c * t;
}

// round16 rounds v to a 16-bit dtype and back; other dtypes keep v.
template <class T>
__device__ __forceinline__ T round16(T v, i64 dt) {
    if (dt == DT_BF16) return (T)bf2f(f2bf((float)v));
    if (dt == DT_F16) return (T)h2f(f2h((float)v));
    return v;
}

template <class T>
__device__ void k_attention(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk,
                            Op v, Heads sv, Op ws, i64 slot, double scale, double p, u64 seed, Op seg, double softcap) {
    const i64 br = Tn < ATT_BLOCK ? Tn : ATT_BLOCK;
    const i64 wsb = ws.off + (i64)blockIdx.x * slot;  // this block's slot: P[br][Tn]
    const T keep = (T)(1 / (1 - p));
#define P_(r, j) GMEM(T, ws.p, wsb + (r) * Tn + (j))
    for (i64 bh = blockIdx.x; bh < B * H; bh += gridDim.x) {
        const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV);
        for (i64 i0 = 0; i0 < Tn; i0 += br) {
            const i64 m = Tn - i0 < br ? Tn - i0 : br, n = i0 + m;
            const i64 k0 = att_block_start(seg, b, Tn, i0), w = n - k0;  // keys k0…n-1
            for (i64 e = threadIdx.x; e < m * w; e += blockDim.x) {
                const i64 r = e / w, j = k0 + e % w, i = i0 + r;
                T s = 0;
                if (j <= i && j >= att_start(seg, b, Tn, i)) {
                    for (i64 c = 0; c < D; c++) s += ld<T>(q, head_el(sq, b, h, i, c)) * ld<T>(k, head_el(sk, b, hk, j, c));
                    s *= (T)scale;
                    if (softcap > 0) {
                        T dc;
                        s = att_cap(s, (T)softcap, &dc);
                    }
                }
                P_(r, j) = s;
            }
            __syncthreads();
            for (i64 r = threadIdx.x; r < m; r += blockDim.x) {
                const i64 i = i0 + r, lo = att_start(seg, b, Tn, i);
                T mx = P_(r, lo);
                for (i64 j = lo + 1; j <= i; j++) mx = xmax(mx, (T)P_(r, j));
                double sum = 0;
                for (i64 j = lo; j <= i; j++) {
                    T x = xexp(P_(r, j) - mx);
                    P_(r, j) = x;
                    sum += (double)x;
                }
                st<T>(lse, bh * Tn + i, (T)((double)mx + log(sum)));
                const T inv = (T)(1 / sum);
                for (i64 j = lo; j <= i; j++) {
                    T x = P_(r, j) * inv;
                    if (p > 0) x = uniform01(seed, (u64)((bh * Tn + i) * Tn + j)) < p ? (T)0 : x * keep;
                    P_(r, j) = round16(x, q.dt);
                }
            }
            __syncthreads();
            for (i64 e = threadIdx.x; e < m * D; e += blockDim.x) {
                const i64 r = e / D, c = e % D, i = i0 + r;
                T s = 0;
                for (i64 j = att_start(seg, b, Tn, i); j <= i; j++) s += P_(r, j) * ld<T>(v, head_el(sv, b, hk, j, c));
                st<T>(out, head_el(so, b, h, i, c), s);
            }
            __syncthreads();
        }
    }
#undef P_
}
TYPED(k_attention,
      (i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv,
       Op ws, i64 slot, double scale, double p, u64 seed, Op seg, double softcap),
      (B, H, KV, Tn, D, out, so, lse, q, sq, k, sk, v, sv, ws, slot, scale, p, seed, seg, softcap))

// k_attention_bwd: per slot, P and dS ([br][Tn] each), the key head's dk
// and dv accumulators ([Tn][D] each) and the block's Δ (br values). A
// block takes (batch, key head) pairs in turn and runs the query heads of
// the group in order, each adding into the accumulators, which it stores
// once after the group's last head.
template <class T>
__device__ void k_attention_bwd(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dq, Heads sdq, Op dk, Heads sdk, Op dv, Heads sdv,
                                Op dout, Heads sdo, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v,
                                Heads sv, Op ws, i64 slot, double scale, double p, u64 seed, Op seg, double softcap) {
    const i64 br = Tn < ATT_BLOCK ? Tn : ATT_BLOCK;
    const i64 wsb = ws.off + (i64)blockIdx.x * slot;
    const i64 oP = 0, oS = br * Tn, oK = 2 * br * Tn, oV = oK + Tn * D, oDelta = oV + Tn * D;
    const T keep = (T)(1 / (1 - p));
#define W_(i) GMEM(T, ws.p, wsb + (i))
    const i64 G = H / KV;
    for (i64 bg = blockIdx.x; bg < B * KV; bg += gridDim.x) {
        const i64 b = bg / KV, hk = bg % KV;
        for (i64 e = threadIdx.x; e < 2 * Tn * D; e += blockDim.x) W_(oK + e) = 0;
        __syncthreads();
        for (i64 h = hk * G; h < (hk + 1) * G; h++) {
            const i64 bh = b * H + h;
            for (i64 i0 = 0; i0 < Tn; i0 += br) {
                const i64 m = Tn - i0 < br ? Tn - i0 : br, n = i0 + m;
                const i64 k0 = att_block_start(seg, b, Tn, i0), w = n - k0;  // keys k0…n-1
                // Δᵢ = Σⱼ Pᵢⱼ·dPᵢⱼ = doutᵢ·outᵢ, with or without dropout.
                for (i64 r = threadIdx.x; r < m; r += blockDim.x) {
                    double s = 0;
                    for (i64 c = 0; c < D; c++)
                        s += (double)ld<T>(dout, head_el(sdo, b, h, i0 + r, c)) * (double)ld<T>(out, head_el(so, b, h, i0 + r, c));
                    W_(oDelta + r) = (T)s;
                }
                for (i64 e = threadIdx.x; e < m * w; e += blockDim.x) {
                    const i64 r = e / w, j = k0 + e % w, i = i0 + r;
                    T s = 0, dp = 0;
                    if (j <= i && j >= att_start(seg, b, Tn, i)) {
                        for (i64 c = 0; c < D; c++) {
                            s += ld<T>(q, head_el(sq, b, h, i, c)) * ld<T>(k, head_el(sk, b, hk, j, c));
                            dp += ld<T>(dout, head_el(sdo, b, h, i, c)) * ld<T>(v, head_el(sv, b, hk, j, c));
                        }
                        s *= (T)scale;
                    }
                    W_(oP + r * Tn + j) = s;
                    W_(oS + r * Tn + j) = dp;
                }
                __syncthreads();
                for (i64 e = threadIdx.x; e < m * w; e += blockDim.x) {
                    const i64 r = e / w, j = k0 + e % w, i = i0 + r;
                    if (j > i || j < att_start(seg, b, Tn, i)) continue;
                    T sc = W_(oP + r * Tn + j), dc = (T)1;  // the scaled score, capped below under a soft cap
                    if (softcap > 0) sc = att_cap(sc, (T)softcap, &dc);
                    const T pij = xexp(sc - ld<T>(lse, bh * Tn + i));
                    const T dl = W_(oDelta + r);
                    T z = (T)1;
                    if (p > 0) z = uniform01(seed, (u64)((bh * Tn + i) * Tn + j)) < p ? (T)0 : keep;
                    T ds = p > 0 ? pij * (z * W_(oS + r * Tn + j) - dl) : pij * (W_(oS + r * Tn + j) - dl);
                    if (softcap > 0) ds *= dc;
                    W_(oP + r * Tn + j) = round16(p > 0 ? pij * z : pij, q.dt);
                    W_(oS + r * Tn + j) = round16(ds, q.dt);
                }
                __syncthreads();
                // dv += P'ᵀ·dout and dk += scale·dSᵀ·q over the block's rows
                // (P' and dS are 0 before a row's start).
                for (i64 e = threadIdx.x; e < w * D; e += blockDim.x) {
                    const i64 j = k0 + e / D, c = e % D;
                    T sv_ = 0, sk_ = 0;
                    for (i64 r = (j > i0 ? j - i0 : 0); r < m; r++) {
                        sv_ += W_(oP + r * Tn + j) * ld<T>(dout, head_el(sdo, b, h, i0 + r, c));
                        sk_ += W_(oS + r * Tn + j) * ld<T>(q, head_el(sq, b, h, i0 + r, c));
                    }
                    W_(oV + j * D + c) += sv_;
                    W_(oK + j * D + c) += (T)scale * sk_;
                }
                // dq = scale·dS·k.
                for (i64 e = threadIdx.x; e < m * D; e += blockDim.x) {
                    const i64 r = e / D, c = e % D, i = i0 + r;
                    T s = 0;
                    for (i64 j = att_start(seg, b, Tn, i); j <= i; j++) s += W_(oS + r * Tn + j) * ld<T>(k, head_el(sk, b, hk, j, c));
                    st<T>(dq, head_el(sdq, b, h, i, c), (T)scale * s);
                }
                __syncthreads();
            }
        }
        for (i64 e = threadIdx.x; e < Tn * D; e += blockDim.x) {
            const i64 j = e / D, c = e % D;
            st<T>(dk, head_el(sdk, b, hk, j, c), W_(oK + e));
            st<T>(dv, head_el(sdv, b, hk, j, c), W_(oV + e));
        }
        __syncthreads();
    }
#undef W_
}
TYPED(k_attention_bwd,
      (i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dq, Heads sdq, Op dk, Heads sdk, Op dv, Heads sdv, Op dout, Heads sdo,
       Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, Op ws, i64 slot, double scale, double p,
       u64 seed, Op seg, double softcap),
      (B, H, KV, Tn, D, dq, sdq, dk, sdk, dv, sdv, dout, sdo, out, so, lse, q, sq, k, sk, v, sv, ws, slot, scale, p, seed,
       seg, softcap))

// ---------------------------------------------------------------- tiled causal attention
//
// The fused attention for f32, f16 and bf16 heads of up to FA_DMAX
// elements (k_attention and k_attention_bwd above serve f64 and larger
// heads): flash attention on CUDA cores. A block takes one tile of query
// rows of one (batch, head) and streams the keys and values up to the
// tile's diagonal through shared memory a tile at a time, keeping each
// row's running maximum, running sum and output in registers (online
// softmax); only the output and one log-sum-exp per row reach global
// memory. Backward recomputes the probabilities from the log-sum-exps in
// two kernels, neither with atomics: one block per key tile accumulates
// its dk and dv over the query tiles below the diagonal
// (k_flash_bwd_kv), one block per query tile its dq over the key tiles
// (k_flash_bwd_q). Scores, probabilities and sums are float; for 16-bit
// inputs the probabilities and their gradient are rounded to the input
// dtype before the products that take them, as on the CPU — in forward
// the probabilities relative to the running maximum, before the division
// by the sum (the CPU rounds them after it). Dropout, example
// boundaries and sliding windows (seg) and the soft cap are the slot
// kernels' (fa_cap, fa_prob). Starts never decrease along a row
// (device.Attention.CheckStarts), so a tile of query rows starts at its
// first row's start: forward and dq begin at the key tile holding it
// (att_block_start), and dk and dv stop at the first query tile that
// starts after the key tile, so that a window of W keys costs O(T·W).
// Grouped heads (KV < H): forward and dq read key head h/(H/KV) for query
// head h (att_kv_head); one block of k_flash_bwd_kv takes a key tile of
// key head g and runs the query heads of its group in order, each over
// its query tiles, accumulating dk and dv in the same registers, so that
// a group's sum has one order on every run and no block waits for
// another (one block per key tile of each key head: H/KV times fewer
// blocks, each H/KV times the work).
//
// Threads: a block of 256 is a 16×16 grid (tr = t/16, tc = t%16). A score
// tile of BR×BC gives thread (tr, tc) rows tr·BR/16… and columns tc,
// tc+16, …: a row's 16 threads are one half-warp, so row maxima and sums
// are half-warp shuffles. Output and gradient rows give it the same rows
// (or keys) and the head elements tc, tc+16, … (consecutive threads read
// consecutive shared words; rows are padded by one word against bank
// conflicts).

// fa_load copies rows r0… (at most R, rows past T as zeros) of a [B, H, T,
// D] operand into a tile of shared memory as float, element (r, c) at
// sh[r·LD + c] (or transposed, TR, at sh[c·LD + r]: a thread's consecutive
// rows of one column are then one wide load, fa_vec), and columns D…DM-1
// as zeros: the products run over DM, a compile-time bound, so that the
// compiler unrolls them. Indices within the tile are 32-bit and DM a power
// of two (a 64-bit division per element cost more than the products the
// tile fed).
template <int R, int DM, int LD, bool TR = false>
__device__ __forceinline__ void fa_load(float* sh, const Op& x, const Heads& s, i64 b, i64 h, i64 r0, i64 Tn, i64 D) {
    const i64 base = b * s.sb + h * s.sh + r0 * s.st;
    const int rows = Tn - r0 < R ? (int)(Tn - r0) : R, d = (int)D;
    for (int e = threadIdx.x; e < R * DM; e += BLOCK) {
        const int r = e / DM, c = e % DM;
        sh[TR ? c * LD + r : r * LD + c] = r < rows && c < d ? ld<float>(x, base + r * s.st + c) : 0.0f;
    }
}

// fa_tile is N floats of shared memory on a 16-byte boundary (a struct, so
// that NVRTC and the emulator's host compiler read the alignment alike).
template <int N>
struct alignas(16) fa_tile {
    float v[N];
};
struct alignas(16) fa_f4 {
    float x, y, z, w;
};
struct alignas(8) fa_f2 {
    float x, y;
};

// fa_vec reads N consecutive floats of shared memory at p as 16-byte loads
// (N a multiple of 4, p 16-byte aligned), 8-byte loads (N even) or single
// words: a warp's shared-memory loads, more than its arithmetic, bounded
// the products.
template <int N>
__device__ __forceinline__ void fa_vec(float* out, const float* p) {
    if constexpr (N % 4 == 0) {
        for (int i = 0; i < N; i += 4) {
            const fa_f4 v = *(const fa_f4*)(p + i);
            out[i] = v.x;
            out[i + 1] = v.y;
            out[i + 2] = v.z;
            out[i + 3] = v.w;
        }
    } else if constexpr (N % 2 == 0) {
        for (int i = 0; i < N; i += 2) {
            const fa_f2 v = *(const fa_f2*)(p + i);
            out[i] = v.x;
            out[i + 1] = v.y;
        }
    } else {
        for (int i = 0; i < N; i++) out[i] = p[i];
    }
}

// FA_UNROLL asks NVRTC to unroll a loop over a tile's compile-time extent
// (the emulator's host compiler has no such pragma); FA_BOUNDS caps a
// kernel's registers so that three blocks of 256 threads share an SM (at
// 128 registers a thread, two did: a quarter of the warps an SM holds).
#ifdef MEMFIT_HOST_CHECK
#define FA_UNROLL
#define FA_BOUNDS
#else
#define FA_UNROLL _Pragma("unroll")
#define FA_BOUNDS __launch_bounds__(BLOCK, 3)
#endif

// half_max and half_sum reduce over the 16 lanes of a half-warp (a row's
// threads).
__device__ __forceinline__ float half_max(float v) {
    for (int off = 8; off > 0; off >>= 1) v = xmax(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float half_sum(float v) {
    for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// fa_row_stats loads the log-sum-exps, starts and Δ = dout·out of
// rows r0…r0+R into shared memory; Δ's row is summed by its half-warp.
template <int R, int DM>
__device__ void fa_row_stats(float* lse_s, i64* start_s, float* delta_s, const Op& lse, const Op& seg, const Op& dout,
                             const Heads& sdo, const Op& out, const Heads& so, i64 bh, i64 b, i64 h, i64 r0, i64 Tn, i64 D) {
    constexpr int RM = R / 16;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    for (int a = 0; a < RM; a++) {
        const int r = tr * RM + a;
        const i64 i = r0 + r;
        float s = 0;
        if (i < Tn)
            for (i64 d = tc; d < D; d += 16) s += ld<float>(dout, head_el(sdo, b, h, i, d)) * ld<float>(out, head_el(so, b, h, i, d));
        s = half_sum(s);
        if (tc == 0) {
            delta_s[r] = s;
            lse_s[r] = i < Tn ? ld<float>(lse, bh * Tn + i) : 0.0f;
            start_s[r] = i < Tn ? att_start(seg, b, Tn, i) : Tn;
        }
    }
}

// fa_cap is a scaled score x under the soft cap c: c·tanh(x/c), or x for
// c = 0 (none).
__device__ __forceinline__ float fa_cap(float x, float c) { return c == 0 ? x : c * xtanh(x / c); }

// fa_prob is the probability exp(x - l) of a scaled score x in a row of
// log-sum-exp l, the score capped first under a soft cap c > 0 (c·tanh(x/c),
// the cap's derivative 1 − tanh²(x/c) then in *dc, which c = 0 leaves).
__device__ __forceinline__ float fa_prob(float x, float l, float c, float* dc) {
    if (c == 0) return xexp(x - l);
    const float t = xtanh(x / c);
    *dc = 1 - t * t;
    return xexp(c * t - l);
}

// fa_drop is the dropout factor of probability (i, j): 0 or 1/(1-p).
__device__ __forceinline__ float fa_drop(double p, float keep, u64 seed, i64 bh, i64 Tn, i64 i, i64 j) {
    if (p <= 0) return 1.0f;
    return uniform01(seed, (u64)((bh * Tn + i) * Tn + j)) < p ? 0.0f : keep;
}

// fa_scores computes thread (tr, tc)'s scores of query rows i0+tr·RM…
// against keys j0+tc, j0+tc+16, …: scale·q·k (capped under a soft cap
// cap > 0), or -inf where the key is masked (after the row, before its
// start, or past T). Qt holds the query
// rows transposed (row stride BR+4, a thread's RM rows one wide load), Kt
// the keys transposed (row stride BC+1: the 16 keys a half-warp reads are
// in different banks).
template <int BR, int BC, int DM>
__device__ __forceinline__ void fa_scores(float (*s)[BC / 16], const float* Qt, const float* Kt, int tr, int tc, i64 i0,
                                          i64 j0, i64 Tn, const i64* start, float scale, float cap) {
    constexpr int RM = BR / 16, CM = BC / 16, LQ = BR + 4, LK = BC + 1;
    const float ninf = -__int_as_float(0x7f800000);
    for (int a = 0; a < RM; a++)
        for (int c = 0; c < CM; c++) s[a][c] = 0;
    FA_UNROLL
    for (int d = 0; d < DM; d++) {
        float qa[RM], kc[CM];
        fa_vec<RM>(qa, Qt + d * LQ + tr * RM);
        for (int c = 0; c < CM; c++) kc[c] = Kt[d * LK + tc + 16 * c];
        for (int a = 0; a < RM; a++)
            for (int c = 0; c < CM; c++) s[a][c] += qa[a] * kc[c];
    }
    for (int a = 0; a < RM; a++) {
        const i64 i = i0 + tr * RM + a;
        for (int c = 0; c < CM; c++) {
            const i64 j = j0 + tc + 16 * c;
            s[a][c] = (i < Tn && j <= i && j >= start[a]) ? fa_cap(s[a][c] * scale, cap) : ninf;
        }
    }
}

// flash_fwd: for f32 one pass, each row's output rescaled whenever its
// running maximum grows and divided by its sum at the end. For 16-bit
// inputs the probabilities must be rounded normalised, as the CPU rounds
// them, so a first pass over the keys finds each row's maximum and sum
// (online, the same rescaling) and the second computes the probabilities
// exactly as the CPU does: exp(s - max)·(1/sum), dropped, rounded.
//
// Shared memory: the query tile transposed (Qt), one buffer holding the
// key tile transposed (for the scores) and then the value tile by rows
// (for P·v: a thread's DK consecutive head elements are one wide load),
// and the probabilities transposed (Pt: a thread's rows one wide load).
template <int BR, int BC, int DM>
__device__ void flash_fwd(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk,
                          Op v, Heads sv, double scale_, double p, u64 seed, Op seg, double softcap) {
    constexpr int RM = BR / 16, CM = BC / 16, DK = DM / 16;
    constexpr int LQ = BR + 4, LK = BC + 1, LV = DM + 4, LP = BR + 4;
    constexpr int NKV = DM * LK > BC * LV ? DM * LK : BC * LV;
    __shared__ fa_tile<DM * LQ> qt_;
    __shared__ fa_tile<NKV> kv_;
    __shared__ fa_tile<BC * LP> pt_;
    float *Qt = qt_.v, *KVs = kv_.v, *Pt = pt_.v;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p)), ninf = -__int_as_float(0x7f800000);
    const bool exact = q.dt == DT_F16 || q.dt == DT_BF16;
    const i64 nq = (Tn + BR - 1) / BR;
    for (i64 wi = blockIdx.x; wi < B * H * nq; wi += gridDim.x) {
        const i64 bh = wi / nq, i0 = (nq - 1 - wi % nq) * BR;  // the longest tiles first
        const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV), m = Tn - i0 < BR ? Tn - i0 : BR;
        __syncthreads();  // the previous tile's last products are done with Qt, KVs and Pt
        fa_load<BR, DM, LQ, true>(Qt, q, sq, b, h, i0, Tn, D);
        float o[RM][DK], mrow[RM], lrow[RM], inv[RM], s[RM][CM];
        i64 start[RM];
        for (int a = 0; a < RM; a++) {
            const i64 i = i0 + tr * RM + a;
            mrow[a] = ninf;
            lrow[a] = 0;
            start[a] = i < Tn ? att_start(seg, b, Tn, i) : Tn;
            for (int c = 0; c < DK; c++) o[a][c] = 0;
        }
        const i64 k0 = att_block_start(seg, b, Tn, i0), first = k0 / BC * BC;
        if (exact) {
            for (i64 j0 = first; j0 < i0 + m; j0 += BC) {
                __syncthreads();
                fa_load<BC, DM, LK, true>(KVs, k, sk, b, hk, j0, Tn, D);
                __syncthreads();
                fa_scores<BR, BC, DM>(s, Qt, KVs, tr, tc, i0, j0, Tn, start, scale, cap);
                for (int a = 0; a < RM; a++) {
                    float mx = ninf;
                    for (int c = 0; c < CM; c++) mx = xmax(mx, s[a][c]);
                    const float mn = xmax(mrow[a], half_max(mx));
                    const float alpha = mn == ninf ? 1.0f : xexp(mrow[a] - mn);
                    float sum = 0;
                    for (int c = 0; c < CM; c++) sum += s[a][c] == ninf ? 0.0f : xexp(s[a][c] - mn);
                    lrow[a] = lrow[a] * alpha + half_sum(sum);
                    mrow[a] = mn;
                }
            }
            for (int a = 0; a < RM; a++) inv[a] = 1.0f / lrow[a];
        }
        for (i64 j0 = first; j0 < i0 + m; j0 += BC) {
            __syncthreads();  // Qt is loaded; the last tile's products are done with KVs and Pt
            fa_load<BC, DM, LK, true>(KVs, k, sk, b, hk, j0, Tn, D);
            __syncthreads();
            fa_scores<BR, BC, DM>(s, Qt, KVs, tr, tc, i0, j0, Tn, start, scale, cap);
            for (int a = 0; a < RM; a++) {
                const int r = tr * RM + a;
                const i64 i = i0 + r;
                if (exact) {
                    for (int c = 0; c < CM; c++) {
                        const i64 j = j0 + tc + 16 * c;
                        const float x = s[a][c] == ninf ? 0.0f : xexp(s[a][c] - mrow[a]) * inv[a];
                        Pt[(tc + 16 * c) * LP + r] = round16(x * fa_drop(p, keep, seed, bh, Tn, i, j), q.dt);
                    }
                    continue;
                }
                float mx = ninf;
                for (int c = 0; c < CM; c++) mx = xmax(mx, s[a][c]);
                const float mn = xmax(mrow[a], half_max(mx));
                // Rows with no key yet keep a sum of 0 and factor 1.
                const float alpha = mn == ninf ? 1.0f : xexp(mrow[a] - mn);
                float sum = 0;
                for (int c = 0; c < CM; c++) {
                    const i64 j = j0 + tc + 16 * c;
                    const float e = s[a][c] == ninf ? 0.0f : xexp(s[a][c] - mn);
                    sum += e;
                    Pt[(tc + 16 * c) * LP + r] = e * fa_drop(p, keep, seed, bh, Tn, i, j);
                }
                lrow[a] = lrow[a] * alpha + half_sum(sum);
                mrow[a] = mn;
                for (int c = 0; c < DK; c++) o[a][c] *= alpha;
            }
            __syncthreads();  // Pt is written; every thread is done reading the keys
            fa_load<BC, DM, LV>(KVs, v, sv, b, hk, j0, Tn, D);
            __syncthreads();
            FA_UNROLL
            for (int c = 0; c < BC; c++) {
                float pa[RM], vd[DK];
                fa_vec<RM>(pa, Pt + c * LP + tr * RM);
                fa_vec<DK>(vd, KVs + c * LV + tc * DK);
                for (int a = 0; a < RM; a++)
                    for (int e = 0; e < DK; e++) o[a][e] += pa[a] * vd[e];
            }
        }
        for (int a = 0; a < RM; a++) {
            const i64 i = i0 + tr * RM + a;
            if (i >= Tn) continue;
            const float f = exact ? 1.0f : 1.0f / lrow[a];
            for (int e = 0; e < DK; e++)
                if (tc * DK + e < D) st<float>(out, head_el(so, b, h, i, tc * DK + e), o[a][e] * f);
            if (tc == 0) st<float>(lse, bh * Tn + i, mrow[a] + xlog(lrow[a]));
        }
    }
}

// fa_scores_grads computes thread (tr, tc)'s scores s = q·k and dP =
// dout·vᵀ of query rows tr·RM… against keys tc, tc+16, … of the tiles
// (rows padded to LR and LC floats), over DM head elements.
template <int RM, int CM, int DM, int LR, int LC>
__device__ __forceinline__ void fa_scores_grads(float (*s)[CM], float (*dp)[CM], const float* Qs, const float* dOs,
                                                const float* Ks, const float* Vs, int tr, int tc) {
    for (int a = 0; a < RM; a++)
        for (int c = 0; c < CM; c++) s[a][c] = dp[a][c] = 0;
    FA_UNROLL
    for (int d = 0; d < DM; d++) {
        float qa[RM], ga[RM], kc[CM], vc[CM];
        for (int a = 0; a < RM; a++) {
            qa[a] = Qs[(tr * RM + a) * LR + d];
            ga[a] = dOs[(tr * RM + a) * LR + d];
        }
        for (int c = 0; c < CM; c++) {
            kc[c] = Ks[(tc + 16 * c) * LC + d];
            vc[c] = Vs[(tc + 16 * c) * LC + d];
        }
        for (int a = 0; a < RM; a++)
            for (int c = 0; c < CM; c++) {
                s[a][c] += qa[a] * kc[c];
                dp[a][c] += ga[a] * vc[c];
            }
    }
}

// k_flash_bwd_kv: one block per key tile of BC keys, over the query tiles
// of BR rows from the tile's diagonal on: dv += P'ᵀ·dout and dk +=
// dSᵀ·q (times scale at the end), with P' = P·z (dropout) and dS =
// P·(z·dP - Δ), dP = dout·vᵀ, as k_attention_bwd computes them. The
// query and gradient tiles are rows padded to a multiple of 4 (a thread's
// DK consecutive head elements are one wide load); the key and value
// tiles rows padded by one word (the 16 keys a half-warp reads are in
// different banks).
template <int BR, int BC, int DM>
__device__ void flash_bwd_kv(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dk, Heads sdk, Op dv, Heads sdv, Op dout, Heads sdo,
                             Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, double scale_,
                             double p, u64 seed, Op seg, double softcap) {
    constexpr int RM = BR / 16, CM = BC / 16, DK = DM / 16;
    constexpr int LR = DM + 4, LC = DM + 1, LS = BC + 1;
    __shared__ fa_tile<BC * LC> ks_, vs_;
    __shared__ fa_tile<BR * LR> qs_, dos_;
    __shared__ fa_tile<BR * LS> ps_, dss_;
    __shared__ float lse_s[BR], delta_s[BR];
    __shared__ i64 start_s[BR];
    float *Ks = ks_.v, *Vs = vs_.v, *Qs = qs_.v, *dOs = dos_.v, *Ps = ps_.v, *dSs = dss_.v;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p));
    const i64 nk = (Tn + BC - 1) / BC, G = H / KV;
    for (i64 wi = blockIdx.x; wi < B * KV * nk; wi += gridDim.x) {
        const i64 bg = wi / nk, j0 = (wi % nk) * BC;  // the longest (first) key tiles first
        const i64 b = bg / KV, hk = bg % KV;
        __syncthreads();
        fa_load<BC, DM, LC>(Ks, k, sk, b, hk, j0, Tn, D);
        fa_load<BC, DM, LC>(Vs, v, sv, b, hk, j0, Tn, D);
        float gk[CM][DK], gv[CM][DK];
        for (int a = 0; a < CM; a++)
            for (int e = 0; e < DK; e++) gk[a][e] = gv[a][e] = 0;
        // The group's query heads in order, each over its query tiles.
        for (i64 h = hk * G, bh = b * H + h; h < (hk + 1) * G; h++, bh++) {
            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {
                // Starts never decrease along a row: a tile whose first row
                // starts after the key tile's last key sees none of it, and
                // neither does any tile after it (a window's end).
                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;
                __syncthreads();
                fa_row_stats<BR, DM>(lse_s, start_s, delta_s, lse, seg, dout, sdo, out, so, bh, b, h, i0, Tn, D);
                __syncthreads();
                fa_load<BR, DM, LR>(Qs, q, sq, b, h, i0, Tn, D);
                fa_load<BR, DM, LR>(dOs, dout, sdo, b, h, i0, Tn, D);
                __syncthreads();
                float s[RM][CM], dp[RM][CM];
                fa_scores_grads<RM, CM, DM, LR, LC>(s, dp, Qs, dOs, Ks, Vs, tr, tc);
                for (int a = 0; a < RM; a++) {
                    const int r = tr * RM + a;
                    const i64 i = i0 + r;
                    for (int c = 0; c < CM; c++) {
                        const i64 j = j0 + tc + 16 * c;
                        float pij = 0, ds = 0, z = 1, dc = 1;
                        if (i < Tn && j <= i && j >= start_s[r]) {
                            pij = fa_prob(s[a][c] * scale, lse_s[r], cap, &dc);
                            z = fa_drop(p, keep, seed, bh, Tn, i, j);
                            ds = p > 0 ? pij * (z * dp[a][c] - delta_s[r]) : pij * (dp[a][c] - delta_s[r]);
                            if (cap != 0) ds *= dc;
                        }
                        Ps[r * LS + tc + 16 * c] = round16(pij * z, q.dt);
                        dSs[r * LS + tc + 16 * c] = round16(ds, q.dt);
                    }
                }
                __syncthreads();
                FA_UNROLL
                for (int r = 0; r < BR; r++) {
                    float ga[DK], qa[DK];
                    fa_vec<DK>(ga, dOs + r * LR + tc * DK);
                    fa_vec<DK>(qa, Qs + r * LR + tc * DK);
                    for (int a = 0; a < CM; a++) {
                        const float pr = Ps[r * LS + tr * CM + a], sr = dSs[r * LS + tr * CM + a];
                        for (int e = 0; e < DK; e++) {
                            gv[a][e] += pr * ga[e];
                            gk[a][e] += sr * qa[e];
                        }
                    }
                }
            }
        }
        for (int a = 0; a < CM; a++) {
            const i64 j = j0 + tr * CM + a;
            if (j >= Tn) continue;
            for (int e = 0; e < DK; e++) {
                const i64 d = tc * DK + e;
                if (d >= D) continue;
                st<float>(dk, head_el(sdk, b, hk, j, d), scale * gk[a][e]);
                st<float>(dv, head_el(sdv, b, hk, j, d), gv[a][e]);
            }
        }
    }
}

// k_flash_bwd_q: one block per query tile, over the key tiles up to its
// diagonal: dq = scale·dS·k. Every tile's rows are padded by one word:
// the keys are read both across a half-warp (scores) and along a row (dq,
// head elements tc, tc+16, …), and one word keeps both free of bank
// conflicts.
template <int BR, int BC, int DM>
__device__ void flash_bwd_q(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dq, Heads sdq, Op dout, Heads sdo, Op out, Heads so,
                            Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, double scale_, double p, u64 seed,
                            Op seg, double softcap) {
    constexpr int RM = BR / 16, CM = BC / 16, DK = DM / 16;
    constexpr int L1 = DM + 1, LS = BC + 1;
    __shared__ fa_tile<BR * L1> qs_, dos_;
    __shared__ fa_tile<BC * L1> ks_, vs_;
    __shared__ fa_tile<BR * LS> dss_;
    __shared__ float lse_s[BR], delta_s[BR];
    __shared__ i64 start_s[BR];
    float *Qs = qs_.v, *dOs = dos_.v, *Ks = ks_.v, *Vs = vs_.v, *dSs = dss_.v;
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p));
    const i64 nq = (Tn + BR - 1) / BR;
    for (i64 wi = blockIdx.x; wi < B * H * nq; wi += gridDim.x) {
        const i64 bh = wi / nq, i0 = (nq - 1 - wi % nq) * BR;
        const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV), m = Tn - i0 < BR ? Tn - i0 : BR;
        __syncthreads();
        fa_load<BR, DM, L1>(Qs, q, sq, b, h, i0, Tn, D);
        fa_load<BR, DM, L1>(dOs, dout, sdo, b, h, i0, Tn, D);
        fa_row_stats<BR, DM>(lse_s, start_s, delta_s, lse, seg, dout, sdo, out, so, bh, b, h, i0, Tn, D);
        float g[RM][DK];
        for (int a = 0; a < RM; a++)
            for (int e = 0; e < DK; e++) g[a][e] = 0;
        const i64 k0 = att_block_start(seg, b, Tn, i0);
        for (i64 j0 = k0 / BC * BC; j0 < i0 + m; j0 += BC) {
            __syncthreads();
            fa_load<BC, DM, L1>(Ks, k, sk, b, hk, j0, Tn, D);
            fa_load<BC, DM, L1>(Vs, v, sv, b, hk, j0, Tn, D);
            __syncthreads();
            float s[RM][CM], dp[RM][CM];
            fa_scores_grads<RM, CM, DM, L1, L1>(s, dp, Qs, dOs, Ks, Vs, tr, tc);
            for (int a = 0; a < RM; a++) {
                const int r = tr * RM + a;
                const i64 i = i0 + r;
                for (int c = 0; c < CM; c++) {
                    const i64 j = j0 + tc + 16 * c;
                    float ds = 0, dc = 1;
                    if (i < Tn && j <= i && j >= start_s[r]) {
                        const float pij = fa_prob(s[a][c] * scale, lse_s[r], cap, &dc);
                        const float z = fa_drop(p, keep, seed, bh, Tn, i, j);
                        ds = p > 0 ? pij * (z * dp[a][c] - delta_s[r]) : pij * (dp[a][c] - delta_s[r]);
                        if (cap != 0) ds *= dc;
                    }
                    dSs[r * LS + tc + 16 * c] = round16(ds, q.dt);
                }
            }
            __syncthreads();
            FA_UNROLL
            for (int c = 0; c < BC; c++) {
                float kd[DK];
                for (int e = 0; e < DK; e++) kd[e] = Ks[c * L1 + tc + 16 * e];
                for (int a = 0; a < RM; a++) {
                    const float sa = dSs[(tr * RM + a) * LS + c];
                    for (int e = 0; e < DK; e++) g[a][e] += sa * kd[e];
                }
            }
        }
        for (int a = 0; a < RM; a++) {
            const i64 i = i0 + tr * RM + a;
            if (i >= Tn) continue;
            for (int e = 0; e < DK; e++)
                if (tc + 16 * e < D) st<float>(dq, head_el(sdq, b, h, i, tc + 16 * e), scale * g[a][e]);
        }
    }
}

// The entry points: heads of up to 64 elements (FA_*64 tiles) and of up
// to FA_DMAX (FA_*128 tiles, smaller so that shared memory stays under
// 48 KiB).
#define FA_FWD_ARGS                                                                                                  \
    (i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv,      \
     double scale, double p, u64 seed, Op seg, double softcap)
#define FA_FWD_CALL (B, H, KV, Tn, D, out, so, lse, q, sq, k, sk, v, sv, scale, p, seed, seg, softcap)
#define FA_KV_ARGS                                                                                                   \
    (i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dk, Heads sdk, Op dv, Heads sdv, Op dout, Heads sdo, Op out, Heads so,      \
     Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, double scale, double p, u64 seed, Op seg, double softcap)
#define FA_KV_CALL \
    (B, H, KV, Tn, D, dk, sdk, dv, sdv, dout, sdo, out, so, lse, q, sq, k, sk, v, sv, scale, p, seed, seg, softcap)
#define FA_Q_ARGS                                                                                                    \
    (i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dq, Heads sdq, Op dout, Heads sdo, Op out, Heads so, Op lse, Op q, Heads sq, \
     Op k, Heads sk, Op v, Heads sv, double scale, double p, u64 seed, Op seg, double softcap)
#define FA_Q_CALL (B, H, KV, Tn, D, dq, sdq, dout, sdo, out, so, lse, q, sq, k, sk, v, sv, scale, p, seed, seg, softcap)

extern "C" __global__ void FA_BOUNDS k_flash_fwd_d64 FA_FWD_ARGS { flash_fwd<FA_FWD_BR64, FA_FWD_BC64, 64> FA_FWD_CALL; }
extern "C" __global__ void FA_BOUNDS k_flash_fwd_d128 FA_FWD_ARGS { flash_fwd<FA_FWD_BR128, FA_FWD_BC128, FA_DMAX> FA_FWD_CALL; }
extern "C" __global__ void FA_BOUNDS k_flash_bwd_kv_d64 FA_KV_ARGS { flash_bwd_kv<FA_BWD_BR64, FA_BWD_BC64, 64> FA_KV_CALL; }
extern "C" __global__ void FA_BOUNDS k_flash_bwd_kv_d128 FA_KV_ARGS { flash_bwd_kv<FA_BWD_BR128, FA_BWD_BC128, FA_DMAX> FA_KV_CALL; }
extern "C" __global__ void FA_BOUNDS k_flash_bwd_q_d64 FA_Q_ARGS { flash_bwd_q<FA_BWD_BR64, FA_BWD_BC64, 64> FA_Q_CALL; }
extern "C" __global__ void FA_BOUNDS k_flash_bwd_q_d128 FA_Q_ARGS { flash_bwd_q<FA_BWD_BR128, FA_BWD_BC128, FA_DMAX> FA_Q_CALL; }

// ---------------------------------------------------------------- tensor cores
//
// mma_16816 is one warp's D = A·B + C on tensor cores, PTX's
// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 with T bf16 (bf16 true) or
// f16: A 16×16 and B 16×8 of T, C and D 16×8 float, every lane of the
// warp calling it with its fragments. The layout (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type"), with g = lane/4
// and t = lane%4, two 16-bit elements per register, the lower column (A)
// or row (B) in the low half: a[0] A[g][2t…2t+1], a[1] A[g+8][2t…],
// a[2] A[g][2t+8…], a[3] A[g+8][2t+8…]; b[0] B[2t…2t+1][g], b[1]
// B[2t+8…2t+9][g]; c[0], c[1] C[g][2t…2t+1], c[2], c[3] C[g+8][2t…]. It
// needs compute capability 8.0: the Go side launches the kernels that
// call it only there (flashFor). The emulator runs it as a warp
// collective (memfit_mma_m16n8k16, which also says how it sums).
__device__ __forceinline__ void mma_16816(float* d, const unsigned* a, const unsigned* b, const float* c, bool bf16) {
#if defined(MEMFIT_HOST_CHECK)
    memfit_mma_m16n8k16(bf16 ? MEMFIT_MMA_BF16 : MEMFIT_MMA_F16, d, a, b, c);
#elif __CUDA_ARCH__ >= 800
    if (bf16)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%10, %11, %12, %13};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%10, %11, %12, %13};"
            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    asm volatile("trap;");
#endif
}

// tc_pack puts two 16-bit elements in one register, the first in the low
// half.
__device__ __forceinline__ unsigned tc_pack(u16 lo, u16 hi) { return (unsigned)lo | ((unsigned)hi << 16); }

// tc_bits rounds v to bf16 or f16, as its bits.
__device__ __forceinline__ u16 tc_bits(float v, bool bf16) { return bf16 ? f2bf(v) : f2h(v); }

// quad_max and quad_sum reduce over the 4 lanes that hold one row of an
// mma's C fragments (lanes 4g…4g+3).
__device__ __forceinline__ float quad_max(float v) {
    v = xmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return xmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---------------------------------------------------------------- tiled causal attention on tensor cores
//
// The tiled attention of f16 and bf16 heads on GPUs of compute capability
// 8.0 and later (flashFor): the CUDA-core kernels' tiles, passes and
// arithmetic, with every product — q·kᵀ, P·v, dout·vᵀ, dS·k, Pᵀ·dout,
// dSᵀ·q — on tensor cores (mma_16816: 16-bit inputs as stored, float
// sums). A block is FA_TC_WARPS warps, each owning 16 rows: query rows in
// forward and dq, keys in dk and dv; its rows' operands (q, dout, or k
// and v) stay in registers as A fragments, the streamed tiles in shared
// memory as 16-bit values (rows padded by 8 elements, so that the 8 rows a
// B fragment reads start in different banks). Scores, probabilities and
// their gradients live in C fragments (a lane holds rows g and g+8,
// columns 2t and 2t+1 of each 8-column tile) and become A fragments of the
// next product where they are rounded to the input dtype, as the
// CUDA-core kernels round them; row maxima and sums are 4-lane shuffles.
// An mma whose rows all precede (or follow) every column it would meet
// under the mask is skipped, the same for a whole warp. Heads need not be
// a multiple of 16: tiles are zero past D. Loops over fragments have
// compile-time bounds (KD, ND, NT) as well as the head's, so that a GPU's
// compiler unrolls them and keeps the fragment arrays in registers.

// tc_el is element (t, d) of a 16-bit [B, H, T, D] operand as bits, 0 past
// T or D.
__device__ __forceinline__ u16 tc_el(const Op& x, const Heads& s, i64 b, i64 h, i64 t, i64 d, i64 Tn, i64 D) {
    return t < Tn && d < D ? (u16)GMEM(const u16, x.p, x.off + head_el(s, b, h, t, d)) : (u16)0;
}

// tc_frag_a loads the A fragments of rows r0…r0+15 of a head, kd chunks of
// 16 elements.
template <int KD>
__device__ void tc_frag_a(unsigned (*a)[4], const Op& x, const Heads& s, i64 b, i64 h, i64 r0, i64 Tn, i64 D, int kd) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    for (int kc = 0; kc < KD && kc < kd; kc++)
        for (int r = 0; r < 4; r++) {
            const i64 row = r0 + g + 8 * (r & 1), col = 16 * kc + 2 * t + 8 * (r >> 1);
            a[kc][r] = tc_pack(tc_el(x, s, b, h, row, col, Tn, D), tc_el(x, s, b, h, row, col + 1, Tn, D));
        }
}

// tc_load copies rows r0…r0+R-1 of a 16-bit head into the tile sh, up to
// D rounded up to 16, zero past T and D.
template <int R, int DM>
__device__ void tc_load(u16 (*sh)[DM + 8], const Op& x, const Heads& s, i64 b, i64 h, i64 r0, i64 Tn, i64 D) {
    const i64 Dp = (D + 15) / 16 * 16;
    for (i64 e = threadIdx.x; e < R * Dp; e += blockDim.x) {
        const i64 r = e / Dp, c = e % Dp;
        sh[r][c] = tc_el(x, s, b, h, r0 + r, c, Tn, D);
    }
}

// tc_frag_nk is a B fragment whose columns (n) are rows n0… of a tile and
// whose rows (k) are its elements k0…: B = tileᵀ, as the keys of q·kᵀ.
template <int DM>
__device__ __forceinline__ void tc_frag_nk(unsigned* b, const u16 (*sh)[DM + 8], int n0, int k0) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    b[0] = tc_pack(sh[n0 + g][k0 + 2 * t], sh[n0 + g][k0 + 2 * t + 1]);
    b[1] = tc_pack(sh[n0 + g][k0 + 2 * t + 8], sh[n0 + g][k0 + 2 * t + 9]);
}

// tc_frag_kn is a B fragment whose rows (k) are rows k0… of a tile and
// whose columns (n) are its elements n0…: B = the tile, as the values of
// P·v.
template <int DM>
__device__ __forceinline__ void tc_frag_kn(unsigned* b, const u16 (*sh)[DM + 8], int k0, int n0) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    b[0] = tc_pack(sh[k0 + 2 * t][n0 + g], sh[k0 + 2 * t + 1][n0 + g]);
    b[1] = tc_pack(sh[k0 + 2 * t + 8][n0 + g], sh[k0 + 2 * t + 9][n0 + g]);
}

// tc_c2a makes the A fragment of columns 16kc…16kc+15 from the 16-bit C
// fragments of column tiles 2kc (lo) and 2kc+1 (hi).
__device__ __forceinline__ void tc_c2a(unsigned* a, const u16* lo, const u16* hi) {
    a[0] = tc_pack(lo[0], lo[1]);
    a[1] = tc_pack(lo[2], lo[3]);
    a[2] = tc_pack(hi[0], hi[1]);
    a[3] = tc_pack(hi[2], hi[3]);
}

// tc_abt computes c[nt] = a·tileᵀ for the column tiles lo ≤ nt < hi (rows
// 8nt… of the tile), over kd chunks of 16; the other tiles are 0.
template <int NT, int KD, int DM>
__device__ __forceinline__ void tc_abt(float (*c)[4], const unsigned (*a)[4], const u16 (*sh)[DM + 8], int kd, int lo, int hi,
                                       bool bf16) {
    for (int nt = 0; nt < NT; nt++) {
        for (int e = 0; e < 4; e++) c[nt][e] = 0;
        if (nt < lo || nt >= hi) continue;
        for (int kc = 0; kc < KD && kc < kd; kc++) {
            unsigned bb[2];
            tc_frag_nk<DM>(bb, sh, 8 * nt, 16 * kc);
            mma_16816(c[nt], a[kc], bb, c[nt], bf16);
        }
    }
}

// tc_cols is how many column tiles of 8 from j0 reach a row at most last
// (last < j0: none), at most NT.
__device__ __forceinline__ int tc_cols(i64 j0, i64 last, int NT) {
    if (last < j0) return 0;
    const i64 n = (last - j0) / 8 + 1;
    return n < NT ? (int)n : NT;
}

// tc_row_stats gives a lane's rows r0+g and r0+g+8 their log-sum-exp,
// start and Δ = dout·out (each lane of the row's 4 sums every 4th
// element).
__device__ void tc_row_stats(float* lse_r, i64* start_r, float* delta_r, const Op& lse, const Op& seg, const Op& dout,
                             const Heads& sdo, const Op& out, const Heads& so, i64 bh, i64 b, i64 h, i64 r0, i64 Tn, i64 D) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 2; r++) {
        const i64 i = r0 + g + 8 * r;
        float s = 0;
        if (i < Tn)
            for (i64 d = t; d < D; d += 4) s += ld<float>(dout, head_el(sdo, b, h, i, d)) * ld<float>(out, head_el(so, b, h, i, d));
        delta_r[r] = quad_sum(s);
        lse_r[r] = i < Tn ? ld<float>(lse, bh * Tn + i) : 0.0f;
        start_r[r] = i < Tn ? att_start(seg, b, Tn, i) : Tn;
    }
}

// flash_fwd_tc is flash_fwd's 16-bit path: a first pass over the keys for
// each row's maximum and sum, a second for the normalised probabilities,
// dropped and rounded, times v.
template <int BR, int BC, int DM>
__device__ void flash_fwd_tc(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk,
                             Op v, Heads sv, double scale_, double p, u64 seed, Op seg, double softcap) {
    static_assert(BR == 16 * FA_TC_WARPS && BC % 16 == 0 && DM % 16 == 0, "a warp per 16 query rows");
    constexpr int KD = DM / 16, NT = BC / 8, ND = DM / 8;
    __shared__ u16 Ks[BC][DM + 8];
    __shared__ u16 Vs[BC][DM + 8];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const bool bf = q.dt == DT_BF16;
    const int kd = (int)((D + 15) / 16), nd = (int)((D + 7) / 8);
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p)), ninf = -__int_as_float(0x7f800000);
    const i64 nq = (Tn + BR - 1) / BR;
    for (i64 wi = blockIdx.x; wi < B * H * nq; wi += gridDim.x) {
        const i64 bh = wi / nq, i0 = (nq - 1 - wi % nq) * BR;  // the longest tiles first
        const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV), m = Tn - i0 < BR ? Tn - i0 : BR;
        // The warp's rows r0…, the last of them that sees keys (-1: none).
        const i64 r0 = i0 + 16 * w, last = r0 >= Tn ? -1 : (r0 + 15 < Tn - 1 ? r0 + 15 : Tn - 1);
        unsigned qa[KD][4];
        tc_frag_a<KD>(qa, q, sq, b, h, r0, Tn, D, kd);
        float mrow[2], lrow[2], inv[2], o[ND][4];
        i64 start[2];
        for (int r = 0; r < 2; r++) {
            const i64 i = r0 + g + 8 * r;
            mrow[r] = ninf;
            lrow[r] = 0;
            inv[r] = 0;
            start[r] = i < Tn ? att_start(seg, b, Tn, i) : Tn;
        }
        for (int e = 0; e < ND; e++)
            for (int c = 0; c < 4; c++) o[e][c] = 0;
        const i64 k0 = att_block_start(seg, b, Tn, i0), first = k0 / BC * BC;
        for (int pass = 0; pass < 2; pass++) {
            for (i64 j0 = first; j0 < i0 + m; j0 += BC) {
                __syncthreads();  // the last tile's products are done with Ks and Vs
                tc_load<BC, DM>(Ks, k, sk, b, hk, j0, Tn, D);
                if (pass == 1) tc_load<BC, DM>(Vs, v, sv, b, hk, j0, Tn, D);
                __syncthreads();
                const int nlive = tc_cols(j0, last, NT);
                float s[NT][4];
                tc_abt<NT, KD, DM>(s, qa, Ks, kd, 0, nlive, bf);
                for (int nt = 0; nt < NT; nt++)
                    for (int e = 0; e < 4; e++) {
                        const i64 i = r0 + g + 8 * (e >> 1), j = j0 + 8 * nt + 2 * t + (e & 1);
                        s[nt][e] = (i < Tn && j <= i && j >= start[e >> 1]) ? fa_cap(s[nt][e] * scale, cap) : ninf;
                    }
                if (pass == 0) {
                    for (int r = 0; r < 2; r++) {
                        float mx = ninf;
                        for (int nt = 0; nt < NT; nt++) mx = xmax(mx, xmax(s[nt][2 * r], s[nt][2 * r + 1]));
                        const float mn = xmax(mrow[r], quad_max(mx));
                        // Rows with no key yet keep a sum of 0 and factor 1.
                        const float alpha = mn == ninf ? 1.0f : xexp(mrow[r] - mn);
                        float sum = 0;
                        for (int nt = 0; nt < NT; nt++)
                            for (int c = 2 * r; c < 2 * r + 2; c++) sum += s[nt][c] == ninf ? 0.0f : xexp(s[nt][c] - mn);
                        lrow[r] = lrow[r] * alpha + quad_sum(sum);
                        mrow[r] = mn;
                    }
                    continue;
                }
                u16 pb[NT][4];
                for (int nt = 0; nt < NT; nt++)
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1;
                        const i64 i = r0 + g + 8 * r, j = j0 + 8 * nt + 2 * t + (e & 1);
                        float x = 0;
                        if (s[nt][e] != ninf) x = xexp(s[nt][e] - mrow[r]) * inv[r] * fa_drop(p, keep, seed, bh, Tn, i, j);
                        pb[nt][e] = tc_bits(x, bf);
                    }
                for (int kc = 0; kc < NT / 2 && 2 * kc < nlive; kc++) {
                    unsigned pa[4];
                    tc_c2a(pa, pb[2 * kc], pb[2 * kc + 1]);
                    for (int e = 0; e < ND && e < nd; e++) {
                        unsigned vb[2];
                        tc_frag_kn<DM>(vb, Vs, 16 * kc, 8 * e);
                        mma_16816(o[e], pa, vb, o[e], bf);
                    }
                }
            }
            if (pass == 0)
                for (int r = 0; r < 2; r++) inv[r] = 1.0f / lrow[r];
        }
        for (int r = 0; r < 2; r++) {
            const i64 i = r0 + g + 8 * r;
            if (i >= Tn) continue;
            for (int e = 0; e < ND && e < nd; e++)
                for (int c = 0; c < 2; c++) {
                    const i64 d = 8 * e + 2 * t + c;
                    if (d < D) st<float>(out, head_el(so, b, h, i, d), o[e][2 * r + c]);
                }
            if (t == 0) st<float>(lse, bh * Tn + i, mrow[r] + xlog(lrow[r]));
        }
    }
}

// flash_bwd_kv_tc is flash_bwd_kv on tensor cores: a warp's 16 keys
// against the query tiles from the diagonal on (of each query head of
// the key head's group, in order), sᵀ = k·qᵀ and dPᵀ = v·doutᵀ, then
// dv += P'ᵀ·dout and dk += dSᵀ·q.
template <int BR, int BC, int DM>
__device__ void flash_bwd_kv_tc(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dk, Heads sdk, Op dv, Heads sdv, Op dout, Heads sdo,
                                Op out, Heads so, Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, double scale_,
                                double p, u64 seed, Op seg, double softcap) {
    static_assert(BC == 16 * FA_TC_WARPS && BR % 16 == 0 && DM % 16 == 0, "a warp per 16 keys");
    constexpr int KD = DM / 16, NT = BR / 8, ND = DM / 8;
    __shared__ u16 Qs[BR][DM + 8];
    __shared__ u16 dOs[BR][DM + 8];
    __shared__ float lse_s[BR], delta_s[BR];
    __shared__ i64 start_s[BR];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const bool bf = q.dt == DT_BF16;
    const int kd = (int)((D + 15) / 16), nd = (int)((D + 7) / 8);
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p));
    const i64 nk = (Tn + BC - 1) / BC, G = H / KV;
    for (i64 wi = blockIdx.x; wi < B * KV * nk; wi += gridDim.x) {
        const i64 bg = wi / nk, j0 = (wi % nk) * BC;  // the longest (first) key tiles first
        const i64 b = bg / KV, hk = bg % KV, c0 = j0 + 16 * w;
        unsigned ka[KD][4], va[KD][4];
        tc_frag_a<KD>(ka, k, sk, b, hk, c0, Tn, D, kd);
        tc_frag_a<KD>(va, v, sv, b, hk, c0, Tn, D, kd);
        float gk[ND][4], gv[ND][4];
        for (int e = 0; e < ND; e++)
            for (int c = 0; c < 4; c++) gk[e][c] = gv[e][c] = 0;
        // The group's query heads in order, each over its query tiles.
        for (i64 h = hk * G, bh = b * H + h; h < (hk + 1) * G; h++, bh++) {
            for (i64 i0 = j0 / BR * BR; i0 < Tn; i0 += BR) {
                // Starts never decrease along a row: a tile whose first row
                // starts after the key tile's last key sees none of it, and
                // neither does any tile after it (a window's end).
                if (att_start(seg, b, Tn, i0) > j0 + BC - 1) break;
                __syncthreads();  // the last tile's products are done with Qs, dOs and the statistics
                for (int rg = w; rg < BR / 16; rg += FA_TC_WARPS) {
                    float lr[2], dr[2];
                    i64 sr[2];
                    tc_row_stats(lr, sr, dr, lse, seg, dout, sdo, out, so, bh, b, h, i0 + 16 * rg, Tn, D);
                    if (t == 0)
                        for (int r = 0; r < 2; r++) {
                            lse_s[16 * rg + g + 8 * r] = lr[r];
                            delta_s[16 * rg + g + 8 * r] = dr[r];
                            start_s[16 * rg + g + 8 * r] = sr[r];
                        }
                }
                __syncthreads();
                tc_load<BR, DM>(Qs, q, sq, b, h, i0, Tn, D);
                tc_load<BR, DM>(dOs, dout, sdo, b, h, i0, Tn, D);
                __syncthreads();
                // Query tiles of 8 that reach the warp's keys (a query before
                // its first key sees none) and lie before T.
                int lo = c0 > i0 ? (int)((c0 - i0) / 8) : 0, hi = tc_cols(i0, Tn - 1, NT);
                if (c0 >= Tn) lo = hi;
                float s[NT][4], dp[NT][4];
                tc_abt<NT, KD, DM>(s, ka, Qs, kd, lo, hi, bf);
                tc_abt<NT, KD, DM>(dp, va, dOs, kd, lo, hi, bf);
                u16 pb[NT][4], db[NT][4];
                for (int nt = 0; nt < NT; nt++)
                    for (int e = 0; e < 4; e++) {
                        const int r = 8 * nt + 2 * t + (e & 1);
                        const i64 j = c0 + g + 8 * (e >> 1), i = i0 + r;
                        float pij = 0, ds = 0, z = 1, dc = 1;
                        if (i < Tn && j <= i && j >= start_s[r]) {
                            pij = fa_prob(s[nt][e] * scale, lse_s[r], cap, &dc);
                            z = fa_drop(p, keep, seed, bh, Tn, i, j);
                            ds = p > 0 ? pij * (z * dp[nt][e] - delta_s[r]) : pij * (dp[nt][e] - delta_s[r]);
                            if (cap != 0) ds *= dc;
                        }
                        pb[nt][e] = tc_bits(pij * z, bf);
                        db[nt][e] = tc_bits(ds, bf);
                    }
                for (int kc = 0; kc < BR / 16; kc++) {
                    if (2 * kc + 1 < lo || 2 * kc >= hi) continue;
                    unsigned pa[4], da[4];
                    tc_c2a(pa, pb[2 * kc], pb[2 * kc + 1]);
                    tc_c2a(da, db[2 * kc], db[2 * kc + 1]);
                    for (int e = 0; e < ND && e < nd; e++) {
                        unsigned xb[2];
                        tc_frag_kn<DM>(xb, dOs, 16 * kc, 8 * e);
                        mma_16816(gv[e], pa, xb, gv[e], bf);
                        tc_frag_kn<DM>(xb, Qs, 16 * kc, 8 * e);
                        mma_16816(gk[e], da, xb, gk[e], bf);
                    }
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            const i64 j = c0 + g + 8 * r;
            if (j >= Tn) continue;
            for (int e = 0; e < ND && e < nd; e++)
                for (int c = 0; c < 2; c++) {
                    const i64 d = 8 * e + 2 * t + c;
                    if (d >= D) continue;
                    st<float>(dk, head_el(sdk, b, hk, j, d), scale * gk[e][2 * r + c]);
                    st<float>(dv, head_el(sdv, b, hk, j, d), gv[e][2 * r + c]);
                }
        }
    }
}

// flash_bwd_q_tc is flash_bwd_q on tensor cores: a warp's 16 query rows
// against the key tiles up to the diagonal, dq = scale·dS·k.
template <int BR, int BC, int DM>
__device__ void flash_bwd_q_tc(i64 B, i64 H, i64 KV, i64 Tn, i64 D, Op dq, Heads sdq, Op dout, Heads sdo, Op out, Heads so,
                               Op lse, Op q, Heads sq, Op k, Heads sk, Op v, Heads sv, double scale_, double p, u64 seed,
                               Op seg, double softcap) {
    static_assert(BR == 16 * FA_TC_WARPS && BC % 16 == 0 && DM % 16 == 0, "a warp per 16 query rows");
    constexpr int KD = DM / 16, NT = BC / 8, ND = DM / 8;
    __shared__ u16 Ks[BC][DM + 8];
    __shared__ u16 Vs[BC][DM + 8];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const bool bf = q.dt == DT_BF16;
    const int kd = (int)((D + 15) / 16), nd = (int)((D + 7) / 8);
    const float scale = (float)scale_, cap = (float)softcap, keep = (float)(1 / (1 - p));
    const i64 nq = (Tn + BR - 1) / BR;
    for (i64 wi = blockIdx.x; wi < B * H * nq; wi += gridDim.x) {
        const i64 bh = wi / nq, i0 = (nq - 1 - wi % nq) * BR;
        const i64 b = bh / H, h = bh % H, hk = att_kv_head(h, H, KV), m = Tn - i0 < BR ? Tn - i0 : BR;
        const i64 r0 = i0 + 16 * w, last = r0 >= Tn ? -1 : (r0 + 15 < Tn - 1 ? r0 + 15 : Tn - 1);
        unsigned qa[KD][4], ga[KD][4];
        tc_frag_a<KD>(qa, q, sq, b, h, r0, Tn, D, kd);
        tc_frag_a<KD>(ga, dout, sdo, b, h, r0, Tn, D, kd);
        float lse_r[2], delta_r[2];
        i64 start[2];
        tc_row_stats(lse_r, start, delta_r, lse, seg, dout, sdo, out, so, bh, b, h, r0, Tn, D);
        float gq[ND][4];
        for (int e = 0; e < ND; e++)
            for (int c = 0; c < 4; c++) gq[e][c] = 0;
        const i64 k0 = att_block_start(seg, b, Tn, i0);
        for (i64 j0 = k0 / BC * BC; j0 < i0 + m; j0 += BC) {
            __syncthreads();
            tc_load<BC, DM>(Ks, k, sk, b, hk, j0, Tn, D);
            tc_load<BC, DM>(Vs, v, sv, b, hk, j0, Tn, D);
            __syncthreads();
            const int nlive = tc_cols(j0, last, NT);
            float s[NT][4], dp[NT][4];
            tc_abt<NT, KD, DM>(s, qa, Ks, kd, 0, nlive, bf);
            tc_abt<NT, KD, DM>(dp, ga, Vs, kd, 0, nlive, bf);
            u16 db[NT][4];
            for (int nt = 0; nt < NT; nt++)
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1;
                    const i64 i = r0 + g + 8 * r, j = j0 + 8 * nt + 2 * t + (e & 1);
                    float ds = 0, dc = 1;
                    if (i < Tn && j <= i && j >= start[r]) {
                        const float pij = fa_prob(s[nt][e] * scale, lse_r[r], cap, &dc);
                        const float z = fa_drop(p, keep, seed, bh, Tn, i, j);
                        ds = p > 0 ? pij * (z * dp[nt][e] - delta_r[r]) : pij * (dp[nt][e] - delta_r[r]);
                        if (cap != 0) ds *= dc;
                    }
                    db[nt][e] = tc_bits(ds, bf);
                }
            for (int kc = 0; kc < NT / 2 && 2 * kc < nlive; kc++) {
                unsigned da[4];
                tc_c2a(da, db[2 * kc], db[2 * kc + 1]);
                for (int e = 0; e < ND && e < nd; e++) {
                    unsigned kb[2];
                    tc_frag_kn<DM>(kb, Ks, 16 * kc, 8 * e);
                    mma_16816(gq[e], da, kb, gq[e], bf);
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            const i64 i = r0 + g + 8 * r;
            if (i >= Tn) continue;
            for (int e = 0; e < ND && e < nd; e++)
                for (int c = 0; c < 2; c++) {
                    const i64 d = 8 * e + 2 * t + c;
                    if (d < D) st<float>(dq, head_el(sdq, b, h, i, d), scale * gq[e][2 * r + c]);
                }
        }
    }
}

extern "C" __global__ void k_flash_fwd_tc_d64 FA_FWD_ARGS { flash_fwd_tc<FA_TC_FWD_BR64, FA_TC_FWD_BC64, 64> FA_FWD_CALL; }
extern "C" __global__ void k_flash_fwd_tc_d128 FA_FWD_ARGS { flash_fwd_tc<FA_TC_FWD_BR128, FA_TC_FWD_BC128, FA_DMAX> FA_FWD_CALL; }
extern "C" __global__ void k_flash_bwd_kv_tc_d64 FA_KV_ARGS { flash_bwd_kv_tc<FA_TC_BWD_BR64, FA_TC_BWD_BC64, 64> FA_KV_CALL; }
extern "C" __global__ void k_flash_bwd_kv_tc_d128 FA_KV_ARGS {
    flash_bwd_kv_tc<FA_TC_BWD_BR128, FA_TC_BWD_BC128, FA_DMAX> FA_KV_CALL;
}
extern "C" __global__ void k_flash_bwd_q_tc_d64 FA_Q_ARGS { flash_bwd_q_tc<FA_TC_BWD_BR64, FA_TC_BWD_BC64, 64> FA_Q_CALL; }
extern "C" __global__ void k_flash_bwd_q_tc_d128 FA_Q_ARGS { flash_bwd_q_tc<FA_TC_BWD_BR128, FA_TC_BWD_BC128, FA_DMAX> FA_Q_CALL; }

// ---------------------------------------------------------------- 8-bit Adam
//
// device.Adam8bitBlock, bit for bit: one block of threads per block of
// Q8_BLOCK elements; each thread keeps its elements' new moments, the block
// reduces their absmax, and the moments are stored again as codes relative
// to it. Every operation is rounded on its own (the _rn intrinsics: no
// fused multiply-adds), in the CPU's order.

#define Q8_PER_THREAD (Q8_BLOCK / BLOCK)

// q8_signed and q8_unsigned round y (a moment times its factor) to a code:
// the F32 bits of |y| rounded to 3 mantissa bits, ties to even.
__device__ __forceinline__ unsigned char q8_signed(float y) {
    unsigned b = __float_as_uint(y), s = b >> 31;
    b &= 0x7fffffffu;
    unsigned r = (b + 0x7ffffu + ((b >> 20) & 1u)) >> 20;
    if (r > 0x7fu) r = 0x7fu;
    if (r == 0) return 0;
    return (unsigned char)(r | (s << 7));
}
__device__ __forceinline__ unsigned char q8_unsigned(float y) {
    unsigned b = __float_as_uint(y) & 0x7fffffffu;
    unsigned r = (b + 0x7ffffu + ((b >> 20) & 1u)) >> 20;
    return (unsigned char)(r > 0xffu ? 0xffu : r);
}

// Adam8 are device.Adam8bitConsts, then the dequantisation factors.
struct Adam8 {
    double grad_scale, wd, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps;
    double deq_signed, deq_unsigned, k_signed, k_unsigned;
};

extern "C" __global__ void k_adam8bit(i64 n, Op p, Op g, Op m, Op v, Op ms, Op vs, Adam8 c) {
    __shared__ float sh[BLOCK];
    const float gs = (float)c.grad_scale, wd = (float)c.wd, decay = (float)c.decay;
    const float b1 = (float)c.beta1, omb1 = (float)c.one_minus_beta1, b2 = (float)c.beta2, omb2 = (float)c.one_minus_beta2;
    const float step_size = (float)c.step_size, isb = (float)c.inv_sqrt_bc2, eps = (float)c.eps;
    const float dqs = (float)c.deq_signed, dqu = (float)c.deq_unsigned, ks = (float)c.k_signed, ku = (float)c.k_unsigned;
    const i64 nblocks = (n + Q8_BLOCK - 1) / Q8_BLOCK;
    for (i64 blk = blockIdx.x; blk < nblocks; blk += gridDim.x) {
        const i64 base = blk * Q8_BLOCK;
        const float sm = GMEM(const float, ms.p, ms.off + blk), sv = GMEM(const float, vs.p, vs.off + blk);
        float mw[Q8_PER_THREAD], vw[Q8_PER_THREAD];
        float am = 0, av = 0;
        for (int k = 0; k < Q8_PER_THREAD; k++) {
            const i64 i = base + threadIdx.x + (i64)k * blockDim.x;
            mw[k] = vw[k] = 0;
            if (i >= n) continue;
            const float pi = GMEM(const float, p.p, p.off + i);
            float gi = __fmul_rn(GMEM(const float, g.p, g.off + i), gs);
            gi = __fadd_rn(gi, __fmul_rn(wd, pi));
            const unsigned cm = GMEM(const unsigned char, m.p, m.off + i), cv = GMEM(const unsigned char, v.p, v.off + i);
            float qm = __fmul_rn(__uint_as_float((cm & 0x7fu) << 20), dqs);
            if (cm & 0x80u) qm = -qm;
            const float qv = __fmul_rn(__uint_as_float(cv << 20), dqu);
            const float mo = __fmul_rn(qm, sm);
            const float mi = __fadd_rn(__fmul_rn(b1, mo), __fmul_rn(omb1, gi));
            const float vo = __fmul_rn(qv, sv);
            const float vi = __fadd_rn(__fmul_rn(b2, vo), __fmul_rn(__fmul_rn(omb2, gi), gi));
            const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), isb), eps);
            const float st = __fdiv_rn(__fmul_rn(step_size, mi), den);
            GMEM(float, p.p, p.off + i) = __fsub_rn(__fmul_rn(pi, decay), st);
            mw[k] = mi;
            vw[k] = vi;
            am = xmax(am, fabsf(mi));
            av = xmax(av, vi);
        }
        am = block_reduce(am, RED_MAX, sh);
        av = block_reduce(av, RED_MAX, sh);
        const float km = am > 0 ? __fdiv_rn(ks, am) : 0.0f;
        const float kv = av > 0 ? __fdiv_rn(ku, av) : 0.0f;
        for (int k = 0; k < Q8_PER_THREAD; k++) {
            const i64 i = base + threadIdx.x + (i64)k * blockDim.x;
            if (i >= n) continue;
            GMEM(unsigned char, m.p, m.off + i) = q8_signed(__fmul_rn(mw[k], km));
            GMEM(unsigned char, v.p, v.off + i) = q8_unsigned(__fmul_rn(vw[k], kv));
        }
        if (threadIdx.x == 0) {
            GMEM(float, ms.p, ms.off + blk) = am;
            GMEM(float, vs.p, vs.off + blk) = av;
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------- stochastic rounding

// k_sr_bf16 is device.StochasticRoundBF16: element i of src rounded into
// dst with the 16 random bits splitmix64(seed ^ splitmix64(offset + i))
// >> 48 added below bf16's mantissa, then truncated.
extern "C" __global__ void k_sr_bf16(i64 n, Op dst, Op src, u64 seed, i64 offset) {
    GRID_STRIDE(i, n) {
        unsigned b = __float_as_uint(GMEM(const float, src.p, src.off + i));
        u16 r;
        if ((b & 0x7f800000u) == 0x7f800000u) {
            r = (b & 0x007fffffu) ? (u16)((b >> 16) | 0x40u) : (u16)(b >> 16);
        } else {
            unsigned bits = (unsigned)(splitmix64(seed ^ splitmix64((u64)(offset + i))) >> 48);
            r = (u16)((b + bits) >> 16);
        }
        GMEM(u16, dst.p, dst.off + i) = r;
    }
}

// ---------------------------------------------------------------- quantized weights

// k_dequant is device.Dequantize: element i of dst is element
// (r0 + i/w, c0 + i%w) of a quantized matrix of C columns (NF4 when fmt is
// 0, Int8 when 1) whose parts lie at these byte offsets of src's buffer:
// a0 the absmax codes (NF4) or absmaxes (Int8), codes the codes, nested
// NF4's nested scales (its offset, levels and map are at 0, 4 and 68).
// The value is computed in F32 as device's definition computes it (the
// _rn intrinsics forbid contraction: quant4.go, quantint8.go) and rounded
// once to dst's dtype, so the composed product's tiles hold the values
// the CPU's product decodes.
extern "C" __global__ void k_dequant(i64 n, i64 w, Op dst, Op src, i64 fmt, i64 C, i64 r0, i64 c0, i64 a0, i64 codes, i64 nested) {
    const char* s = src.p;
    GRID_STRIDE(i, n) {
        const i64 f = (r0 + i / w) * C + c0 + i % w;
        const i64 b = f / QUANT_BLOCK;
        float v;
        if (fmt == 0) {
            const unsigned char c = GMEM(const unsigned char, s + codes, f >> 1);
            const int code = (f & 1) ? (c & 15) : (c >> 4);
            const float m = GMEM(const float, s + 68, GMEM(const unsigned char, s + a0, b));
            const float absmax = __fadd_rn(__fmul_rn(m, GMEM(const float, s + nested, b / NF4_NESTED)), GMEM(const float, s, 0));
            v = __fmul_rn(GMEM(const float, s + 4, code), absmax);
        } else {
            const float step = __fdiv_rn(GMEM(const float, s + a0, b), 127.0f);
            v = __fmul_rn((float)GMEM(const signed char, s + codes, f), step);
        }
        st<float>(dst, i, v);
    }
}

// quant_absmax returns the largest magnitude of block b of src (n
// elements in blocks of QUANT_BLOCK), compared as bits as device's
// blockAbsmax compares them (every NaN above the infinities), and sets
// *finite to whether it is finite.
__device__ __forceinline__ float quant_absmax(const Op& src, i64 n, i64 b, bool* finite) {
    const i64 lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
    unsigned m = 0;
    for (i64 i = lo; i < hi; i++) {
        unsigned u = __float_as_uint(ld<float>(src, i)) & 0x7fffffffu;
        m = u > m ? u : m;
    }
    *finite = m < 0x7f800000u;
    return __uint_as_float(m);
}

// quant_bad records in *bad the first non-finite element of block b
// (atomicMin: the smallest index over all blocks wins).
__device__ __forceinline__ void quant_bad(const Op& src, i64 n, i64 b, u64 bad) {
    const i64 lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
    for (i64 i = lo; i < hi; i++) {
        if ((__float_as_uint(ld<float>(src, i)) & 0x7fffffffu) >= 0x7f800000u) {
            atomicMin((u64*)bad, (u64)i);
            return;
        }
    }
}

// k_quant_absmax is the first pass of device.Quantize to NF4: each
// block's absmax as NF4Encode keeps it (a partial last block's raised to
// 1e-38), as F32 at byte 0 of out (the destination's storage, whose
// bytes are overwritten afterwards), and the first non-finite element in
// *bad.
extern "C" __global__ void k_quant_absmax(i64 n, Op src, u64 out, u64 bad) {
    const i64 blocks = (n + QUANT_BLOCK - 1) / QUANT_BLOCK;
    GRID_STRIDE(b, blocks) {
        bool finite;
        float a = quant_absmax(src, n, b, &finite);
        if (!finite) {
            quant_bad(src, n, b, bad);
            continue;
        }
        if ((b + 1) * QUANT_BLOCK > n) a = fmaxf(a, 1e-38f);
        GMEM(float, (char*)out, b) = a;
    }
}

// k_quant_nf4 is the second pass: the codes of every block, two to a
// byte (the even element in the high nibble, 7 padding an odd count),
// at byte offset codes of out, each the number of NF4's midpoints
// strictly below the element over its block's absmax (multiplied by the
// reciprocal, or divided in a partial block, as NF4Encode does). The 15
// midpoints come as F32 bits, two to a word.
extern "C" __global__ void k_quant_nf4(i64 n, Op src, u64 out, i64 codes, u64 m0, u64 m1, u64 m2, u64 m3, u64 m4, u64 m5, u64 m6, u64 m7) {
    const u64 mw[8] = {m0, m1, m2, m3, m4, m5, m6, m7};
    float mid[15];
    for (int k = 0; k < 15; k++) mid[k] = __uint_as_float((unsigned)(mw[k / 2] >> (32 * (k % 2))));
    const i64 blocks = (n + QUANT_BLOCK - 1) / QUANT_BLOCK;
    GRID_STRIDE(b, blocks) {
        bool finite;
        float a = quant_absmax(src, n, b, &finite);
        const bool partial = (b + 1) * QUANT_BLOCK > n;
        const float r = __fdiv_rn(1.0f, fmaxf(a, 1e-38f));
        if (partial) a = fmaxf(a, 1e-38f);
        const i64 lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
        for (i64 i = lo; i < hi; i += 2) {
            int c[2] = {7, 7};
            for (int j = 0; j < 2 && i + j < hi; j++) {
                const float x = ld<float>(src, i + j);
                const float y = partial ? __fdiv_rn(x, a) : __fmul_rn(x, r);
                int k = 0;
                for (int t = 0; t < 15; t++) k += mid[t] < y;
                c[j] = k;
            }
            GMEM(unsigned char, (char*)out + codes, i >> 1) = (unsigned char)(c[0] << 4 | c[1]);
        }
    }
}

// k_quant_int8 is device.Quantize to Int8 in one pass, as Int8Encode:
// each block's absmax at byte offset absmax of out and its codes,
// round-half-even of the element times 127/absmax, at byte offset codes;
// a non-finite block records its first such element in *bad.
extern "C" __global__ void k_quant_int8(i64 n, Op src, u64 out, i64 absmax, i64 codes, u64 bad) {
    const i64 blocks = (n + QUANT_BLOCK - 1) / QUANT_BLOCK;
    GRID_STRIDE(b, blocks) {
        bool finite;
        const float a = quant_absmax(src, n, b, &finite);
        if (!finite) {
            quant_bad(src, n, b, bad);
            continue;
        }
        GMEM(float, (char*)out + absmax, b) = a;
        const i64 lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
        const float r = a == 0.0f ? 0.0f : __fdiv_rn(127.0f, a);
        for (i64 i = lo; i < hi; i++) {
            float y = rintf(__fmul_rn(ld<float>(src, i), r));
            y = fminf(fmaxf(y, -127.0f), 127.0f);
            GMEM(signed char, (char*)out + codes, i) = (signed char)(int)y;
        }
    }
}
