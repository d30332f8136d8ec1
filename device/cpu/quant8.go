package cpu

import "github.com/memfit/memfit/device"

// Adam8bitStep applies one 8-bit Adam or AdamW update in place: blocks of
// device.Quant8Block elements split over goroutines in a fixed partition,
// each stepped by device.Adam8bitBlock, so the result does not depend on
// the thread count.
func (d *Device) Adam8bitStep(param, grad, m, v, mScale, vScale device.View, h device.AdamHyper) {
	n := param.Len()
	if n == 0 {
		return
	}
	p := f32s(param)[param.Offset : param.Offset+n]
	g := f32s(grad)[grad.Offset : grad.Offset+n]
	mq := u8s(m)[m.Offset : m.Offset+n]
	vq := u8s(v)[v.Offset : v.Offset+n]
	nb := device.Quant8Blocks(n)
	ms := f32s(mScale)[mScale.Offset : mScale.Offset+nb]
	vs := f32s(vScale)[vScale.Offset : vScale.Offset+nb]
	parallelBlocks(d.threads, nb, func(b0, b1 int) {
		sc := getScratch[float32]()
		defer putScratch(sc)
		work := sc.row(0, 2*device.Quant8Block)
		c := device.NewAdam8bitConsts(h)
		for b := b0; b < b1; b++ {
			lo, hi := b*device.Quant8Block, min((b+1)*device.Quant8Block, n)
			if !adam8Vector(p[lo:hi], g[lo:hi], mq[lo:hi], vq[lo:hi], &ms[b], &vs[b], &c, work) {
				device.Adam8bitBlock(p[lo:hi], g[lo:hi], mq[lo:hi], vq[lo:hi], &ms[b], &vs[b], h, work)
			}
		}
	})
}

// parallelBlocks splits [0, blocks) into contiguous parts, one per thread.
func parallelBlocks(threads, blocks int, work func(b0, b1 int)) {
	parallelRange(threads, blocks*parallelMin, func(s, e int) {
		work((s+parallelMin-1)/parallelMin, (e+parallelMin-1)/parallelMin)
	})
}

func u8s(v device.View) []uint8 { return v.Buf.Host }
