package cpu

import "github.com/memfit/memfit/device"

// StochasticRoundBF16 is device.StochasticRounder: element i of src
// rounded into dst with the bits device.StochasticBF16Bits(seed,
// offset+i), so a result does not depend on the split between threads.
func (d *Device) StochasticRoundBF16(dst, src device.View, seed uint64, offset int64) {
	n := src.Len()
	if n == 0 {
		return
	}
	in := f32s(src)[src.Offset : src.Offset+n]
	out := u16s(dst)[dst.Offset : dst.Offset+n]
	const block = 1 << 14
	parallelBlocks(d.threads, (n+block-1)/block, func(b0, b1 int) {
		for i := b0 * block; i < min(b1*block, n); i++ {
			out[i] = device.StochasticBF16(in[i], device.StochasticBF16Bits(seed, uint64(offset)+uint64(i)))
		}
	})
}
