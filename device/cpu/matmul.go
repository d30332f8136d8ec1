package cpu

import (
	"sync"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu/gemm"
)

// tilePool holds the f32 tiles of products with 16-bit outputs.
var tilePool = sync.Pool{New: func() any { return new([]float32) }}

// Gemm runs a batched matrix product. A batch of at least as many products
// as threads (attention heads) is spread over goroutines a product at a
// time, each product running start to finish on one goroutine; otherwise
// each product parallelises inside the gemm package.
func (d *Device) Gemm(g device.Gemm) {
	if g.Batch == 0 || g.M == 0 || g.N == 0 {
		return
	}
	one := func(dev *Device, b int) {
		oa := g.A.Offset + b*g.StrideA
		ob := g.B.Offset + b*g.StrideB
		oc := g.C.Offset + b*g.StrideC
		dev.gemmOne(g, oa, ob, oc)
	}
	if parts := min(d.threads, g.Batch); parts > 1 && g.Batch*g.M*g.N*g.K >= 1<<20 &&
		(g.Batch%parts == 0 || g.Batch >= 4*parts) {
		// Products of equal size split evenly (or nearly) over the
		// goroutines; each runs serially, conversions included.
		serial := &Device{raw: d.raw, mem: d.mem, threads: 1}
		var wg sync.WaitGroup
		for p := 0; p < parts; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := g.Batch * p / parts; b < g.Batch*(p+1)/parts; b++ {
					one(serial, b)
				}
			}()
		}
		wg.Wait()
		return
	}
	for b := 0; b < g.Batch; b++ {
		one(d, b)
	}
}

func (d *Device) gemmOne(g device.Gemm, oa, ob, oc int) {
	alpha, beta := float32(g.Alpha), float32(g.Beta)
	t := gemm.Threads(d.threads)
	switch g.A.DType {
	case device.F64:
		t.Dgemm(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, f64s(g.A)[oa:], g.LDA, f64s(g.B)[ob:], g.LDB, g.Beta, f64s(g.C)[oc:], g.LDC)
	case device.F32:
		t.Sgemm(g.TransA, g.TransB, g.M, g.N, g.K, alpha, f32s(g.A)[oa:], g.LDA, f32s(g.B)[ob:], g.LDB, beta, f32s(g.C)[oc:], g.LDC)
	case device.BF16, device.F16:
		lowGemm := t.GemmBF16
		if g.A.DType == device.F16 {
			lowGemm = t.GemmF16
		}
		a, b := u16s(g.A)[oa:], u16s(g.B)[ob:]
		if g.C.DType == device.F32 {
			lowGemm(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, f32s(g.C)[oc:], g.LDC)
			return
		}
		// Low-precision output: accumulate in an f32 tile, then round once.
		// The tile is pooled host scratch (with beta 0 GEMM overwrites it).
		tp := tilePool.Get().(*[]float32)
		if cap(*tp) < g.M*g.N {
			*tp = make([]float32, g.M*g.N)
		}
		tmp := (*tp)[:g.M*g.N]
		defer tilePool.Put(tp)
		cv := device.View{Buf: g.C.Buf, DType: g.C.DType, Offset: oc, Shape: []int{g.M, g.N}, Strides: []int{g.LDC, 1}}
		tv := device.View{Buf: device.Buffer{Host: f32bytes(tmp)}, DType: device.F32, Shape: []int{g.M, g.N}, Strides: []int{g.N, 1}}
		if beta != 0 {
			d.Copy(tv, cv)
		}
		lowGemm(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, tmp, g.N)
		d.Copy(cv, tv)
	default:
		panic("cpu: gemm on dtype " + g.A.DType.String())
	}
}
