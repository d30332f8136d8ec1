package memory

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkAllocFree(b *testing.B) {
	b.Run("same-size", func(b *testing.B) {
		a, _ := newTestAllocator(0)
		b.ReportAllocs()
		for b.Loop() {
			blk, _ := a.Alloc(4*KiB, Activation)
			a.Free(blk)
		}
	})
	b.Run("mixed-64-live", func(b *testing.B) {
		a, _ := newTestAllocator(0)
		r := rand.New(rand.NewPCG(1, 2))
		sizes := make([]int64, 1024)
		for i := range sizes {
			sizes[i] = randomSize(r)
		}
		live := make([]*Block, 64)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			j := i % len(live)
			a.Free(live[j])
			live[j], _ = a.Alloc(sizes[i%len(sizes)], Activation)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		a, _ := newTestAllocator(0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				blk, _ := a.Alloc(64*KiB, Temporary)
				a.Free(blk)
			}
		})
	})
}
