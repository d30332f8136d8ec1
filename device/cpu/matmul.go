package cpu

import (
	"sync"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu/gemm"
)

// Gemm runs a batched matrix product. A batch of at least as many products
// as threads (attention heads) is spread over goroutines a product at a
// time, each product running start to finish on one goroutine; otherwise
// each product parallelises inside the gemm package.
func (d *Device) Gemm(g device.Gemm) {
	if g.Batch == 0 || g.M == 0 || g.N == 0 {
		return
	}
	if g.HasBias() && (g.Bias.DType != device.F32 || g.A.DType == device.F64) {
		// The products add a float32 bias to float32 sums; the rest is
		// written into C first.
		g = device.BiasFirst(d, g)
	}
	total := g.Groups() * g.Batch
	if parts := min(d.threads, total); parts > 1 && total*g.M*g.N*g.K >= 1<<20 &&
		(total%parts == 0 || total >= 4*parts) {
		d.gemmSpread(g, parts, total)
		return
	}
	gemmRange(d, &g, 0, total)
}

// gemmSpread runs products of equal size split evenly (or nearly) over
// parts goroutines; each runs serially, conversions included. Apart from
// Gemm so that only this path moves g to the heap for its goroutines.
func (d *Device) gemmSpread(g device.Gemm, parts, total int) {
	serial := &Device{raw: d.raw, mem: d.mem, threads: 1}
	var wg sync.WaitGroup
	for q := 0; q < parts; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gemmRange(serial, &g, total*q/parts, total*(q+1)/parts)
		}()
	}
	wg.Wait()
}

// gemmRange runs products [p0, p1) of g on dev, numbered across groups:
// p = o·Batch + b.
func gemmRange(dev *Device, g *device.Gemm, p0, p1 int) {
	for p := p0; p < p1; p++ {
		o, b := p/g.Batch, p%g.Batch
		oa := g.A.Offset + o*g.OuterStrideA + b*g.StrideA
		ob := g.B.Offset + o*g.OuterStrideB + b*g.StrideB
		oc := g.C.Offset + o*g.OuterStrideC + b*g.StrideC
		dev.gemmOne(g, oa, ob, oc)
	}
}

func (d *Device) gemmOne(g *device.Gemm, oa, ob, oc int) {
	alpha, beta := float32(g.Alpha), float32(g.Beta)
	t := gemm.Options{Threads: d.threads, Triangle: gemm.Triangle(g.Triangle)}
	if g.HasBias() {
		t.Bias = f32s(g.Bias)[g.Bias.Offset:][:g.N]
	}
	switch g.A.DType {
	case device.F64:
		t.Dgemm(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, f64s(g.A)[oa:], g.LDA, f64s(g.B)[ob:], g.LDB, g.Beta, f64s(g.C)[oc:], g.LDC)
	case device.F32:
		t.Sgemm(g.TransA, g.TransB, g.M, g.N, g.K, alpha, f32s(g.A)[oa:], g.LDA, f32s(g.B)[ob:], g.LDB, beta, f32s(g.C)[oc:], g.LDC)
	case device.BF16, device.F16:
		a, b := u16s(g.A)[oa:], u16s(g.B)[ob:]
		bf := g.A.DType == device.BF16
		switch {
		case g.C.DType == device.F32 && bf:
			t.GemmBF16(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, f32s(g.C)[oc:], g.LDC)
		case g.C.DType == device.F32:
			t.GemmF16(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, f32s(g.C)[oc:], g.LDC)
		case bf:
			// A 16-bit C is rounded tile by tile inside the product.
			t.GemmBF16To(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, u16s(g.C)[oc:], g.LDC)
		default:
			t.GemmF16To(g.TransA, g.TransB, g.M, g.N, g.K, alpha, a, g.LDA, b, g.LDB, beta, u16s(g.C)[oc:], g.LDC)
		}
	default:
		panic("cpu: gemm on dtype " + g.A.DType.String())
	}
}
