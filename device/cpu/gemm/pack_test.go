package gemm

import (
	"fmt"
	"math"
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
		type packer struct {
			name string
			pack func(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int)
		}
		packers := []packer{{"generic", packCopy[uint16]}, {"pairs", packPairs}}
		for _, e := range bf16Engines {
			packers = append(packers, packer{e.name, e.pack})
		}
		for _, tc := range packers {
			b.Run(fmt.Sprintf("trans=%v/%s", trans, tc.name), func(b *testing.B) {
				for b.Loop() {
					tc.pack(dst, x, 0, 336, 0, 512, 14, 2)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(336*512), "ns/elem")
			})
		}
	}
}

// convertPackers are the converting packers to check against packConvert,
// by format.
var convertPackers = map[string][]struct {
	name string
	pack func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int)
}{}

// TestPackConvert: the vector converting packers lay out exactly what the
// table-driven one does, for both 16-bit formats, transposed or not, with
// partial panels, k below one transpose block and ragged k tails; every
// value converts bit for bit (a signalling NaN half may come out quiet).
func TestPackConvert(t *testing.T) {
	formats := []struct {
		name  string
		table func() *[1 << 16]float32
	}{{"bf16", bf16Table}, {"f16", f16Table}}
	const ld = 77
	src := make([]uint16, 90*ld)
	for i := range src {
		src[i] = uint16(i * 2654435761 >> 9) // every exponent, NaNs and subnormals included
	}
	for _, f := range formats {
		if len(convertPackers[f.name]) == 0 {
			t.Logf("%s: no vector packer on this CPU", f.name)
		}
		for _, pk := range convertPackers[f.name] {
			for _, mr := range []int{14, 16, 32} {
				for _, trans := range []bool{false, true} {
					for _, sh := range []struct{ i0, rows, p0, kc int }{{0, 28, 0, 16}, {3, 17, 5, 9}, {1, 14, 2, 1}, {0, 30, 0, 33}, {2, 45, 4, 40}, {0, 32, 0, 64}, {5, 60, 3, 31}} {
						x := mat[uint16]{src, ld, trans}
						n := roundUp(sh.rows, mr) * sh.kc
						want, got := make([]float32, n), make([]float32, n)
						for i := range got {
							want[i], got[i] = 7, 9
						}
						packConvert(want, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, f.table())
						pk.pack(got, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, 1)
						for i := range want {
							if bits(got[i]) != bits(want[i]) && !(isNaN(got[i]) && isNaN(want[i])) {
								t.Fatalf("%s %s, mr %d, trans %v %+v: element %d is %#x, want %#x", f.name, pk.name, mr, trans, sh, i, bits(got[i]), bits(want[i]))
							}
						}
					}
				}
			}
		}
	}
}

// f32Packers are the float32 packers to check against packCopy.
var f32Packers []struct {
	name string
	pack func(dst []float32, x mat[float32], i0, rows, p0, kc, mr, kg int)
}

// TestPackF32: the vector float32 packers lay out exactly what packCopy
// does, transposed or not, with partial panels and ragged k.
func TestPackF32(t *testing.T) {
	const ld = 77
	src := make([]float32, 90*ld)
	for i := range src {
		src[i] = float32(i) + 0.5
	}
	for _, pk := range f32Packers {
		for _, mr := range []int{6, 14, 16, 32} {
			for _, trans := range []bool{false, true} {
				for _, sh := range []struct{ i0, rows, p0, kc int }{{0, 28, 0, 16}, {3, 17, 5, 9}, {1, 14, 2, 1}, {0, 30, 0, 33}, {2, 45, 4, 40}, {0, 32, 0, 64}, {5, 60, 3, 31}} {
					x := mat[float32]{src, ld, trans}
					n := roundUp(sh.rows, mr) * sh.kc
					want, got := make([]float32, n), make([]float32, n)
					for i := range got {
						want[i], got[i] = 7, 9
					}
					packCopy(want, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, 1)
					pk.pack(got, x, sh.i0, sh.rows, sh.p0, sh.kc, mr, 1)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s, mr %d, trans %v %+v: element %d is %v, want %v", pk.name, mr, trans, sh, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func bits(f float32) uint32 { return math.Float32bits(f) }

func isNaN(f float32) bool { return f != f }

// BenchmarkPackConvert measures the bfloat16 converting packers on
// BenchmarkPack's A and B blocks, in ns per element.
func BenchmarkPackConvert(b *testing.B) {
	const ld = 1024
	src := make([]uint16, 1024*ld)
	packers := append([]struct {
		name string
		pack func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int)
	}{{"table", convertPacker(bf16Table)}}, convertPackers["bf16"]...)
	for _, tc := range []struct {
		name         string
		trans        bool
		rows, kc, mr int
	}{{"A", false, 336, 256, 14}, {"At", true, 336, 256, 14}, {"B", true, 1024, 256, 32}, {"Bt", false, 1024, 256, 32}} {
		for _, pk := range packers {
			b.Run(tc.name+"/"+pk.name, func(b *testing.B) {
				dst := make([]float32, roundUp(tc.rows, tc.mr)*tc.kc)
				x := mat[uint16]{src, ld, tc.trans}
				for b.Loop() {
					pk.pack(dst, x, 0, tc.rows, 0, tc.kc, tc.mr, 1)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tc.rows*tc.kc), "ns/elem")
			})
		}
	}
}
