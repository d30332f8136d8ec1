//go:build cudaemu

package cu

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// testKernels exercise the emulator itself: barriers, shared memory,
// warp primitives, atomics and the bounds checks.
const testKernels = `
typedef long long i64;
extern "C" __global__ void k_reverse(float* out, const float* in) {
    __shared__ float sh[256];
    int t = threadIdx.x;
    sh[t] = GMEM(const float, in, blockIdx.x * blockDim.x + t);
    __syncthreads();
    GMEM(float, out, blockIdx.x * blockDim.x + t) = sh[blockDim.x - 1 - t];
}
extern "C" __global__ void k_reverse_racy(float* out, const float* in) {
    __shared__ float sh[256];
    int t = threadIdx.x;
    sh[t] = GMEM(const float, in, blockIdx.x * blockDim.x + t);
    GMEM(float, out, blockIdx.x * blockDim.x + t) = sh[blockDim.x - 1 - t];
}
extern "C" __global__ void k_shfl(i64* out, i64 kind, i64 arg, i64 width) {
    i64 v = 100 * (i64)threadIdx.x;
    i64 r = 0;
    switch (kind) {
    case 0: r = __shfl_sync(0xffffffffu, v, (int)arg, (int)width); break;
    case 1: r = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, (int)width); break;
    case 2: r = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, (int)width); break;
    case 3: r = __shfl_xor_sync(0xffffffffu, v, (int)arg, (int)width); break;
    }
    GMEM(i64, out, threadIdx.x) = r;
}
extern "C" __global__ void k_vote(unsigned* out) {
    int p = threadIdx.x % 3 == 0;
    unsigned b = __ballot_sync(0xffffffffu, p);
    int all = __all_sync(0xffffffffu, threadIdx.x < 1000);
    int any = __any_sync(0xffffffffu, threadIdx.x == 33);
    if (threadIdx.x % 32 == 0) {
        int w = threadIdx.x / 32;
        GMEM(unsigned, out, 3 * w) = b;
        GMEM(unsigned, out, 3 * w + 1) = (unsigned)all;
        GMEM(unsigned, out, 3 * w + 2) = (unsigned)any;
    }
}
extern "C" __global__ void k_count(int* counter) { atomicAdd(&GMEM(int, counter, 0), 1); }
extern "C" __global__ void k_fill(float* out, i64 n) {
    for (i64 i = threadIdx.x; i <= n; i += blockDim.x) GMEM(float, out, i) = 1;  // one too many
}
extern "C" __global__ void k_deadlock(int* out) {
    if (threadIdx.x == 0) __syncthreads();
    else __syncwarp();
    GMEM(int, out, 0) = 1;
}
extern "C" __global__ void k_count_rw(float* out, const float* in, i64 n) {
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = GMEM(const float, in, i) + GMEM(const float, in, i);  // read twice, counted once
        GMEM(float, out, i) = v;                                         // written
        GMEM(float, out, n + i) += v;                                    // read and written
    }
}
extern "C" __global__ void k_uninit(float* out) {
    __shared__ float sh[64];
    GMEM(float, out, threadIdx.x) = sh[threadIdx.x];
}
`

type testModule struct {
	t *testing.T
	m Module
}

func loadTestKernels(t *testing.T) *testModule {
	t.Helper()
	image, log, err := CompileKernels(testKernels, "emu_test.cu")
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, log)
	}
	m, err := LoadData(image)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	return &testModule{t, m}
}

// buffer is emulated device memory tracked as one live allocation.
type buffer struct {
	p DevicePtr
	n int64
}

func alloc(t *testing.T, n int64) buffer {
	t.Helper()
	p, err := MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := Track(p, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Untrack(p)
		if err := MemFree(p); err != nil {
			t.Error(err)
		}
	})
	return buffer{p, n}
}

func (b buffer) write(t *testing.T, data unsafe.Pointer) {
	t.Helper()
	if err := MemcpyHtoD(b.p, data, b.n); err != nil {
		t.Fatal(err)
	}
}

func (b buffer) read(t *testing.T, data unsafe.Pointer) {
	t.Helper()
	if err := MemcpyDtoH(data, b.p, b.n); err != nil {
		t.Fatal(err)
	}
}

func (m *testModule) launch(name string, grid, block int, args ...uint64) error {
	m.t.Helper()
	f, err := m.m.Function(name)
	if err != nil {
		m.t.Fatal(err)
	}
	starts := make([]int32, len(args))
	for i := range starts {
		starts[i] = int32(i)
	}
	return Launch(f, grid, block, Stream{}, args, starts)
}

func TestBarrierOrdersSharedMemory(t *testing.T) {
	m := loadTestKernels(t)
	const n = 2 * 256
	in, out := alloc(t, 4*n), alloc(t, 4*n)
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	in.write(t, unsafe.Pointer(&src[0]))
	for _, k := range []struct {
		name string
		ok   bool
	}{{"k_reverse", true}, {"k_reverse_racy", false}} {
		if err := m.launch(k.name, 2, 256, uint64(out.p), uint64(in.p)); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		out.read(t, unsafe.Pointer(&got[0]))
		wrong := 0
		for b := 0; b < 2; b++ {
			for i := 0; i < 256; i++ {
				if got[b*256+i] != src[b*256+255-i] {
					wrong++
				}
			}
		}
		if k.ok && wrong > 0 {
			t.Errorf("%s: %d of %d values wrong", k.name, wrong, n)
		}
		// Without the barrier a thread reads slots not yet written: poison
		// (NaN) or the previous block's values.
		if !k.ok && wrong < n/4 {
			t.Errorf("%s: only %d of %d values wrong: the threads did not interleave", k.name, wrong, n)
		}
	}
}

func TestShuffles(t *testing.T) {
	m := loadTestKernels(t)
	const threads = 64
	out := alloc(t, 8*threads)
	cases := []struct {
		kind, arg, width int
		src              func(lane int) int
	}{
		{0, 5, 32, func(l int) int { return l&^31 + 5 }},
		{0, 3, 8, func(l int) int { return l&^7 + 3 }},
		{1, 2, 32, func(l int) int {
			if l%32 < 2 {
				return l
			}
			return l - 2
		}},
		{2, 16, 32, func(l int) int {
			if l%32+16 >= 32 {
				return l
			}
			return l + 16
		}},
		{2, 1, 4, func(l int) int {
			if l%4 == 3 {
				return l
			}
			return l + 1
		}},
		{3, 1, 32, func(l int) int { return l ^ 1 }},
		{3, 16, 32, func(l int) int { return l ^ 16 }},
	}
	for _, c := range cases {
		if err := m.launch("k_shfl", 1, threads, uint64(out.p), uint64(c.kind), uint64(c.arg), uint64(c.width)); err != nil {
			t.Fatal(err)
		}
		got := make([]int64, threads)
		out.read(t, unsafe.Pointer(&got[0]))
		for l := range threads {
			if want := int64(100 * c.src(l)); got[l] != want {
				t.Errorf("shuffle kind %d arg %d width %d: lane %d got %d, want %d", c.kind, c.arg, c.width, l, got[l], want)
			}
		}
	}
}

func TestVotes(t *testing.T) {
	m := loadTestKernels(t)
	out := alloc(t, 4*3*2)
	if err := m.launch("k_vote", 1, 64, uint64(out.p)); err != nil {
		t.Fatal(err)
	}
	got := make([]uint32, 6)
	out.read(t, unsafe.Pointer(&got[0]))
	for w := range 2 {
		var ballot uint32
		for l := range 32 {
			if (32*w+l)%3 == 0 {
				ballot |= 1 << l
			}
		}
		any := uint32(0)
		if w == 1 {
			any = 1
		}
		if got[3*w] != ballot || got[3*w+1] != 1 || got[3*w+2] != any {
			t.Errorf("warp %d: ballot %#x all %d any %d, want %#x 1 %d", w, got[3*w], got[3*w+1], got[3*w+2], ballot, any)
		}
	}
}

func TestAtomics(t *testing.T) {
	m := loadTestKernels(t)
	c := alloc(t, 4)
	zero := int32(0)
	c.write(t, unsafe.Pointer(&zero))
	if err := m.launch("k_count", 7, 96, uint64(c.p)); err != nil {
		t.Fatal(err)
	}
	var got int32
	c.read(t, unsafe.Pointer(&got))
	if got != 7*96 {
		t.Errorf("counter %d, want %d", got, 7*96)
	}
}

// TestBoundsChecks: an access one element past a live allocation, or into
// a freed one, fails the launch naming the kernel, thread, line and index.
func TestBoundsChecks(t *testing.T) {
	m := loadTestKernels(t)
	out := alloc(t, 4*100)
	err := m.launch("k_fill", 1, 32, uint64(out.p), 100)
	var r *Result
	if !errors.As(err, &r) || r.Code != 700 {
		t.Fatalf("launch past the end: %v, want CUDA_ERROR_ILLEGAL_ADDRESS", err)
	}
	for _, want := range []string{"k_fill", "thread (4,0,0)", "kernels.cu:", "byte 0 past the end of a 400-byte allocation", "element 100 of 100"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// A freed (untracked) buffer is no longer live.
	p, err := MemAlloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer MemFree(p)
	if err := Track(p, 64); err != nil {
		t.Fatal(err)
	}
	Untrack(p)
	if err := m.launch("k_uninit", 1, 1, uint64(p)); err == nil || !strings.Contains(err.Error(), "k_uninit") {
		t.Errorf("write into a freed buffer: %v", err)
	}
	// Driver copies stay inside device memory.
	buf := make([]byte, 500)
	if err := MemcpyDtoH(unsafe.Pointer(&buf[0]), out.p, 500); err == nil {
		t.Error("copy of 500 bytes out of a 400-byte allocation succeeded")
	}
}

func TestUninitialisedSharedMemoryIsPoisoned(t *testing.T) {
	m := loadTestKernels(t)
	out := alloc(t, 4*64)
	if err := m.launch("k_uninit", 1, 64, uint64(out.p)); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 64)
	out.read(t, unsafe.Pointer(&got[0]))
	for i, v := range got {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("shared[%d] read before any write is %v, want the NaN poison", i, v)
		}
	}
}

func TestDeadlockIsReported(t *testing.T) {
	m := loadTestKernels(t)
	out := alloc(t, 4)
	err := m.launch("k_deadlock", 1, 64, uint64(out.p))
	if err == nil || !strings.Contains(err.Error(), "deadlock") || !strings.Contains(err.Error(), "k_deadlock") {
		t.Errorf("threads at different barriers: %v, want a deadlock naming the kernel", err)
	}
}

// TestGemm checks the emulated cublasGemmEx against a float64 reference in
// cuBLAS's column-major terms, for each type, transpose, batch and beta.
func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type dtype struct {
		t    DataType
		size int
		tol  float64
	}
	types := []dtype{{R32F, 4, 1e-5}, {R64F, 8, 1e-12}, {R16F, 2, 2e-3}, {R16BF, 2, 1e-2}}
	b := &Blas{open: true}
	for _, ty := range types {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, beta := range []float64{0, 0.5} {
				const m, n, k, batch = 5, 3, 7, 2
				lda := m + 1
				if tr[0] {
					lda = k + 2
				}
				ldb := k
				if tr[1] {
					ldb = n + 1
				}
				ldc := m + 3
				sa, sb, sc := int64(lda*max(m, k)+3), int64(ldb*max(n, k)+1), int64(ldc*n+2)
				A := make([]float64, sa*batch)
				B := make([]float64, sb*batch)
				C := make([]float64, sc*batch)
				for _, s := range [][]float64{A, B, C} {
					for i := range s {
						s[i] = roundTo(ty.t, rng.Float64()*2-1)
					}
				}
				if beta == 0 {
					for i := range C {
						C[i] = math.NaN() // must not be read
					}
				}
				da, db, dc := alloc(t, int64(len(A)*ty.size)), alloc(t, int64(len(B)*ty.size)), alloc(t, int64(len(C)*ty.size))
				for _, x := range []struct {
					buf  buffer
					vals []float64
				}{{da, A}, {db, B}, {dc, C}} {
					raw := encode(ty.t, x.vals)
					x.buf.write(t, unsafe.Pointer(&raw[0]))
				}
				g := Gemm{TransA: tr[0], TransB: tr[1], M: m, N: n, K: k, Alpha: 1.5, Beta: beta,
					A: da.p, B: db.p, C: dc.p, AType: ty.t, BType: ty.t, CType: ty.t,
					Lda: lda, Ldb: ldb, Ldc: ldc, StrideA: sa, StrideB: sb, StrideC: sc, Batch: batch, Compute: Compute32F}
				if ty.t == R64F {
					g.Compute = Compute64F
				}
				if err := b.Gemm(g); err != nil {
					t.Fatal(err)
				}
				raw := make([]byte, len(C)*ty.size)
				dc.read(t, unsafe.Pointer(&raw[0]))
				got := decode(ty.t, raw)
				for bi := int64(0); bi < batch; bi++ {
					for j := 0; j < n; j++ {
						for i := 0; i < m; i++ {
							var want float64
							for l := 0; l < k; l++ {
								ai := int64(i + l*lda)
								if tr[0] {
									ai = int64(l + i*lda)
								}
								bj := int64(l + j*ldb)
								if tr[1] {
									bj = int64(j + l*ldb)
								}
								want += A[bi*sa+ai] * B[bi*sb+bj]
							}
							want *= 1.5
							ci := bi*sc + int64(i+j*ldc)
							if beta != 0 {
								want += beta * C[ci]
							}
							if d := math.Abs(got[ci] - want); d > ty.tol*(1+math.Abs(want))*4 {
								t.Fatalf("type %d trans %v beta %v: C[%d](%d,%d) = %v, want %v", ty.t, tr, beta, bi, i, j, got[ci], want)
							}
						}
					}
				}
			}
		}
	}
	// An operand that reaches past its allocation fails.
	small := alloc(t, 4*10)
	err := b.Gemm(Gemm{M: 4, N: 4, K: 4, Alpha: 1, A: small.p, B: small.p, C: small.p, AType: R32F, BType: R32F, CType: R32F,
		Lda: 4, Ldb: 4, Ldc: 4, Batch: 1, Compute: Compute32F})
	if err == nil || !strings.Contains(err.Error(), "operand A") {
		t.Errorf("gemm past an allocation: %v", err)
	}
}

func roundTo(t DataType, v float64) float64 { return decode(t, encode(t, []float64{v}))[0] }

func encode(t DataType, v []float64) []byte {
	switch t {
	case R32F:
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(v))
	case R64F:
		out := append([]float64(nil), v...)
		return unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 8*len(v))
	}
	out := make([]uint16, len(v))
	for i, x := range v {
		b := math.Float32bits(float32(x))
		if t == R16BF {
			out[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
		} else {
			out[i] = f32ToF16(float32(x))
		}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 2*len(v))
}

func decode(t DataType, raw []byte) []float64 {
	switch t {
	case R32F:
		s := unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
		out := make([]float64, len(s))
		for i, x := range s {
			out[i] = float64(x)
		}
		return out
	case R64F:
		return append([]float64(nil), unsafe.Slice((*float64)(unsafe.Pointer(&raw[0])), len(raw)/8)...)
	}
	s := unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
	out := make([]float64, len(s))
	for i, h := range s {
		if t == R16BF {
			out[i] = float64(math.Float32frombits(uint32(h) << 16))
		} else {
			out[i] = float64(f16ToF32(h))
		}
	}
	return out
}

// f32ToF16 and f16ToF32 handle the normal range, which is all the test's
// values need.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	if a < 0x38800000 {
		return sign | uint16(math.RoundToEven(float64(math.Float32frombits(a))*(1<<24)))
	}
	r := a - 0x38000000
	r += 0xfff + (r>>13)&1
	return sign | uint16(r>>13)
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	if exp == 0 {
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// TestLaunchCounts checks what the counts record: distinct 32-byte sectors
// read and written per launch (a reference read twice counts once; a
// compound assignment reads and writes), every access, launches and
// blocks; a GEMM's operands column by column (a zero batch stride once);
// copies' bytes.
func TestLaunchCounts(t *testing.T) {
	m := loadTestKernels(t)
	const n = 100
	in, out := alloc(t, 4*n), alloc(t, 8*n)
	src := make([]float32, 2*n)
	in.write(t, unsafe.Pointer(&src[0]))
	out.write(t, unsafe.Pointer(&src[0]))
	CountLaunches(true)
	defer CountLaunches(false)
	for range 2 {
		if err := m.launch("k_count_rw", 3, 64, uint64(out.p), uint64(in.p), n); err != nil {
			t.Fatal(err)
		}
	}
	b := &Blas{open: true}
	a, bm, c := alloc(t, 4*12), alloc(t, 4*8), alloc(t, 4*12)
	// 3×4 by 4×2, twice (B shared: stride 0), into two 3×2 blocks of C.
	g := Gemm{M: 3, N: 2, K: 4, Alpha: 1, A: a.p, B: bm.p, C: c.p, AType: R32F, BType: R32F, CType: R32F,
		Lda: 3, Ldb: 4, Ldc: 3, StrideA: 0, StrideB: 0, StrideC: 6, Batch: 2, Compute: Compute32F}
	if err := b.Gemm(g); err != nil {
		t.Fatal(err)
	}
	got := LaunchCounts()
	var k *KernelCount
	for i := range got.Kernels {
		if got.Kernels[i].Name == "k_count_rw" {
			k = &got.Kernels[i]
		}
	}
	if k == nil {
		t.Fatalf("no counts for k_count_rw: %+v", got.Kernels)
	}
	// Per launch: in's 400 bytes are 13 sectors; out's first 400 bytes
	// written, the next 400 read and written: sectors 0-24 written, 12-24
	// read (sector 12 holds the end of one range and the start of the
	// other). Each block runs the loop over all of n: 3 blocks.
	want := KernelCount{Name: "k_count_rw", Launches: 2, Blocks: 6, ReadBytes: 2 * (13 + 13) * 32, WriteBytes: 2 * 25 * 32, Accesses: 2 * 3 * 4 * n}
	if *k != want {
		t.Errorf("k_count_rw: %+v, want %+v", *k, want)
	}
	if len(got.Gemms) != 1 {
		t.Fatalf("GEMM counts %+v, want one kind", got.Gemms)
	}
	// A (48 bytes: 2 sectors) and B (1) once each; C's two blocks of 24
	// bytes: 48 bytes, 2 sectors, written only (beta 0).
	wg := GemmCount{AType: R32F, BType: R32F, CType: R32F, Compute: Compute32F, Calls: 1, FMAs: 2 * 3 * 2 * 4, ReadBytes: 3 * 32, WriteBytes: 2 * 32}
	if got.Gemms[0] != wg {
		t.Errorf("GEMM counts %+v, want %+v", got.Gemms[0], wg)
	}
	if len(got.Copies) != 0 {
		t.Errorf("copies %+v before any was made", got.Copies)
	}
	back := make([]float32, 2*n)
	out.read(t, unsafe.Pointer(&back[0]))
	if c := LaunchCounts().Copies; len(c) != 1 || c[0] != (CopyCount{Kind: "DtoH", Calls: 1, Bytes: 8 * n}) {
		t.Errorf("copies %+v, want one DtoH of %d bytes", c, 8*n)
	}
	CountLaunches(true)
	if c := LaunchCounts(); len(c.Kernels)+len(c.Gemms)+len(c.Copies) != 0 {
		t.Errorf("after CountLaunches(true): %+v, want nothing", c)
	}
}

// TestGemmBias checks the bias epilogue as cuBLASLt defines it: bias[i]
// added to row i of every column of every batch in F32, after alpha·A·B,
// then one rounding to C's type; C is not read. The reference sums in the
// emulator's order, so the results are equal bit for bit.
func TestGemmBias(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b := &Blas{open: true}
	for _, ty := range []DataType{R32F, R16BF, R16F} {
		const m, n, k, batch = 6, 5, 9, 2
		A := make([]float64, m*k*batch)
		B := make([]float64, k*n)
		bias := make([]float64, m)
		for _, s := range [][]float64{A, B, bias} {
			for i := range s {
				s[i] = roundTo(ty, rng.Float64()*2-1)
			}
		}
		C := make([]float64, m*n*batch)
		for i := range C {
			C[i] = math.NaN() // never read
		}
		size := int64(2)
		if ty == R32F {
			size = 4
		}
		da, db, dc, dbias := alloc(t, int64(len(A))*size), alloc(t, int64(len(B))*size), alloc(t, int64(len(C))*size), alloc(t, m*size)
		for _, x := range []struct {
			buf  buffer
			vals []float64
		}{{da, A}, {db, B}, {dc, C}, {dbias, bias}} {
			raw := encode(ty, x.vals)
			x.buf.write(t, unsafe.Pointer(&raw[0]))
		}
		g := Gemm{M: m, N: n, K: k, Alpha: 0.5, A: da.p, B: db.p, C: dc.p, AType: ty, BType: ty, CType: ty,
			Lda: m, Ldb: k, Ldc: m, StrideA: m * k, StrideB: 0, StrideC: m * n, Batch: batch, Compute: Compute32F, Bias: dbias.p}
		if err := b.Gemm(g); err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, int64(len(C))*size)
		dc.read(t, unsafe.Pointer(&raw[0]))
		got := decode(ty, raw)
		for bi := range batch {
			for j := range n {
				for i := range m {
					var acc float32
					for l := range k {
						acc += float32(float32(A[bi*m*k+i+l*m]) * float32(B[l+j*k])) // no fused multiply-add
					}
					want := roundTo(ty, float64(float32(float32(0.5)*acc)+float32(bias[i])))
					if g := got[bi*m*n+i+j*m]; g != want {
						t.Errorf("type %d: C[%d](%d,%d) = %v, want %v", ty, bi, i, j, g, want)
					}
				}
			}
		}
		// A bias with beta is not cuBLASLt's epilogue.
		g.Beta = 1
		if err := b.Gemm(g); err == nil {
			t.Errorf("type %d: a bias with beta 1 was taken", ty)
		}
	}
}
