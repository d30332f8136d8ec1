//go:build !purego

package gemm

import (
	"fmt"
	"testing"
)

// BenchmarkKernel measures the micro-kernels alone on L1-resident panels.
func BenchmarkKernel(b *testing.B) {
	for _, e := range f32Engines {
		for _, kq := range []int{64, 256} {
			b.Run(fmt.Sprintf("%s/kc=%d", e.name, kq), func(b *testing.B) {
				a, bb := make([]float32, e.mr*kq), make([]float32, e.nr*kq)
				c := make([]float32, e.mr*e.nr)
				for b.Loop() {
					e.kern(kq, a, bb, c, e.nr, 1, 0)
				}
				b.ReportMetric(2*float64(e.mr*e.nr*kq)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
	for _, e := range bf16Engines {
		kq := 128
		b.Run(fmt.Sprintf("%s/kc=%d", e.name, 2*kq), func(b *testing.B) {
			a, bb := make([]uint16, 2*e.mr*kq), make([]uint16, 2*e.nr*kq)
			c := make([]float32, e.mr*e.nr)
			for b.Loop() {
				e.kern(kq, a, bb, c, e.nr, 1, 0)
			}
			b.ReportMetric(4*float64(e.mr*e.nr*kq)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
