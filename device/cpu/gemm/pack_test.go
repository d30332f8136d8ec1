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
