package gemm

import (
	"fmt"
	"testing"
)

// BenchmarkPack measures packing a 336×256 block of A and a 256×1024 block
// of B out of 1024-wide row-major storage, in ns per element.
func BenchmarkPack(b *testing.B) {
	const ld = 1024
	src := make([]float32, 1024*ld)
	for _, tc := range []struct {
		name         string
		trans        bool
		rows, kc, mr int
	}{{"A", false, 336, 256, 14}, {"At", true, 336, 256, 14}, {"B", true, 1024, 256, 32}, {"Bt", false, 1024, 256, 32}} {
		b.Run(fmt.Sprint(tc.name), func(b *testing.B) {
			dst := make([]float32, roundUp(tc.rows, tc.mr)*tc.kc)
			x := mat[float32]{src, ld, tc.trans}
			for b.Loop() {
				sgemmEngine.pack(dst, x, 0, tc.rows, 0, tc.kc, tc.mr, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tc.rows*tc.kc), "ns/elem")
		})
	}
}

// TestPackPairs: the word-wise bf16 packer lays out exactly what the
// generic one does, transposed or not, with partial panels and odd k.
func TestPackPairs(t *testing.T) {
	for _, ld := range []int{77, 78} {
		testPackPairs(t, ld)
	}
}

// pairPackers are the pair packers to check against packCopy.
var pairPackers = []struct {
	name string
	pack func(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int)
}{{"packPairs", packPairs}}

func testPackPairs(t *testing.T, ld int) {
	src := make([]uint16, 80*ld)
	for i := range src {
		src[i] = uint16(i*2654435761>>7) | 1
	}
	for _, mr := range []int{14, 32} {
		for _, trans := range []bool{false, true} {
			for _, sh := range []struct{ i0, rows, p0, kc int }{{0, 28, 0, 16}, {3, 17, 5, 9}, {1, 14, 2, 1}, {0, 30, 0, 33}, {2, 45, 4, 40}, {0, 32, 0, 64}} {
				x := mat[uint16]{src, ld, trans}
				n := roundUp(sh.rows, mr) * roundUp(sh.kc, 2)
				want, got := make([]uint16, n), make([]uint16, n)
				for i := range got {
					want[i], got[i] = 0xdead, 0xbeef
				}
				packCopy(want, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, 2)
				for _, pk := range pairPackers {
					for i := range got {
						got[i] = 0xbeef
					}
					pk.pack(got, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, 2)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s, ld %d, mr %d, trans %v %+v: element %d is %#x, want %#x", pk.name, ld, mr, trans, sh, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func BenchmarkPackPairs(b *testing.B) {
	const ld = 1536
	src := make([]uint16, 4096*ld)
	for _, trans := range []bool{false, true} {
		dst := make([]uint16, 336*512)
		x := mat[uint16]{src, ld, trans}
		for _, tc := range []struct {
			name string
			pack func(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int)
		}{{"generic", packCopy[uint16]}, {"pairs", packPairs}, {"engine", bf16Engine.pack}} {
			b.Run(fmt.Sprintf("trans=%v/%s", trans, tc.name), func(b *testing.B) {
				for b.Loop() {
					tc.pack(dst, x, 0, 336, 0, 512, 14, 2)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(336*512), "ns/elem")
			})
		}
	}
}
