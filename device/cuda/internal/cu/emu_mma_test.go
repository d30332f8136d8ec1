//go:build cudaemu

package cu

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// mmaKernels load the fragments of memfit_mma_m16n8k16 as kernel.h lays
// them out (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type"), from row-major A (16×16), B (16×8) and C (16×8) of one
// product per warp, and store D (16×8) row-major. how makes a warp misuse
// the primitive: 1 lane 5 skips it, 2 lanes 16… shuffle instead, 3 lane 3
// gives another type.
const mmaKernels = `
typedef unsigned short u16;
__device__ unsigned pair(const u16* m, long long i, long long j) {
    return (unsigned)GMEM(const u16, m, i) | ((unsigned)GMEM(const u16, m, j) << 16);
}
extern "C" __global__ void k_mma(float* D, const u16* A, const u16* B, const float* C, long long type, long long how) {
    const int lane = threadIdx.x % 32, w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int g = lane >> 2, t = lane & 3;
    const u16* a = A + 256 * w;
    const u16* b = B + 128 * w;
    const float* c = C + 128 * w;
    unsigned af[4] = {pair(a, 16 * g + 2 * t, 16 * g + 2 * t + 1), pair(a, 16 * (g + 8) + 2 * t, 16 * (g + 8) + 2 * t + 1),
                      pair(a, 16 * g + 2 * t + 8, 16 * g + 2 * t + 9), pair(a, 16 * (g + 8) + 2 * t + 8, 16 * (g + 8) + 2 * t + 9)};
    unsigned bf[2] = {pair(b, 8 * (2 * t) + g, 8 * (2 * t + 1) + g), pair(b, 8 * (2 * t + 8) + g, 8 * (2 * t + 9) + g)};
    float cf[4] = {GMEM(const float, c, 8 * g + 2 * t), GMEM(const float, c, 8 * g + 2 * t + 1),
                   GMEM(const float, c, 8 * (g + 8) + 2 * t), GMEM(const float, c, 8 * (g + 8) + 2 * t + 1)};
    float d[4] = {0, 0, 0, 0};
    if (how == 1 && lane == 5) return;
    if (how == 2 && lane >= 16) {
        d[0] = __shfl_xor_sync(0xffffffffu, cf[0], 1);
    } else {
        memfit_mma_m16n8k16((int)type ^ (how == 3 && lane == 3), d, af, bf, cf);
    }
    float* o = D + 128 * w;
    GMEM(float, o, 8 * g + 2 * t) = d[0];
    GMEM(float, o, 8 * g + 2 * t + 1) = d[1];
    GMEM(float, o, 8 * (g + 8) + 2 * t) = d[2];
    GMEM(float, o, 8 * (g + 8) + 2 * t + 1) = d[3];
}
`

func loadMMAKernels(t *testing.T) *testModule {
	t.Helper()
	image, log, err := CompileKernels(mmaKernels, "emu_mma_test.cu")
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

// mmaTypes are the emulator's mma input types and their rounding.
var mmaTypes = []struct {
	name string
	code uint64
	typ  DataType
}{{"bf16", 0, R16BF}, {"f16", 1, R16F}}

// TestMMA checks every lane's D against the product computed in Go in the
// documented order (C, then the 16 exact products in k order, each sum
// rounded to float32), for 4 warps over 2 blocks of 64 threads: each warp
// its own product, from values that make every element of the fragments
// count (a misplaced element changes the sum).
func TestMMA(t *testing.T) {
	m := loadMMAKernels(t)
	const warps = 4
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ty := range mmaTypes {
		t.Run(ty.name, func(t *testing.T) {
			a := make([]float64, warps*256)
			b := make([]float64, warps*128)
			c := make([]float32, warps*128)
			for i := range a {
				a[i] = roundTo(ty.typ, 4*rng.Float64()-2)
			}
			for i := range b {
				b[i] = roundTo(ty.typ, 4*rng.Float64()-2)
			}
			for i := range c {
				c[i] = float32(rng.NormFloat64())
			}
			ab, bb, cb, db := alloc(t, int64(2*len(a))), alloc(t, int64(2*len(b))), alloc(t, int64(4*len(c))), alloc(t, int64(4*len(c)))
			ab.write(t, unsafe.Pointer(&encode(ty.typ, a)[0]))
			bb.write(t, unsafe.Pointer(&encode(ty.typ, b)[0]))
			cb.write(t, unsafe.Pointer(&c[0]))
			if err := m.launch("k_mma", 2, 64, uint64(db.p), uint64(ab.p), uint64(bb.p), uint64(cb.p), ty.code, 0); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(c))
			db.read(t, unsafe.Pointer(&got[0]))
			for w := range warps {
				for i := range 16 {
					for j := range 8 {
						want := c[128*w+8*i+j]
						for k := range 16 {
							want += float32(a[256*w+16*i+k]) * float32(b[128*w+8*k+j])
						}
						if g := got[128*w+8*i+j]; math.Float32bits(g) != math.Float32bits(want) {
							t.Errorf("warp %d D[%d][%d] = %v, want %v", w, i, j, g, want)
						}
					}
				}
			}
		})
	}
}

// TestMMAMisuse: an mma that not every lane of a whole warp reaches, or
// that its lanes call with different types, fails the launch.
func TestMMAMisuse(t *testing.T) {
	m := loadMMAKernels(t)
	zeros := make([]byte, 4*256)
	bufs := make([]buffer, 4)
	for i := range bufs {
		bufs[i] = alloc(t, int64(len(zeros)))
		bufs[i].write(t, unsafe.Pointer(&zeros[0]))
	}
	for _, c := range []struct {
		name         string
		threads, how int
		want1, want2 string
	}{
		{"lane exits", 32, 1, "mma.sync", "lane"},
		{"lanes shuffle", 32, 2, "mma.sync", "divergent"},
		{"types differ", 32, 3, "mma.sync", "different types"},
		{"half a warp", 16, 0, "mma.sync", "all 32 lanes"},
	} {
		err := m.launch("k_mma", 1, c.threads, uint64(bufs[0].p), uint64(bufs[1].p), uint64(bufs[2].p), uint64(bufs[3].p), 0, uint64(c.how))
		if err == nil || !strings.Contains(err.Error(), c.want1) || !strings.Contains(err.Error(), c.want2) || !strings.Contains(err.Error(), "k_mma") {
			t.Errorf("%s: %v, want an error naming k_mma and saying %q, %q", c.name, err, c.want1, c.want2)
		}
	}
}
