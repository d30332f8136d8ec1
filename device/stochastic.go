package device

import (
	"encoding/binary"
	"math"
)

// Stochastic rounding to bfloat16: x is rounded up (in magnitude) with the
// probability of its distance from the bf16 value below it, so the
// rounding is unbiased (its expectation is x) and updates far below half a
// bf16 unit survive on average where round-to-nearest loses every one.
// It is what makes parameters stored in bf16 without an F32 master copy
// train (-weights bf16). Element i of a call draws its 16 random bits from
// (seed, offset+i) alone, so a result does not depend on how the elements
// are split between calls or threads.

// StochasticRounder rounds F32 values into BF16 stochastically in one pass.
type StochasticRounder interface {
	// StochasticRoundBF16 writes src (F32) into dst (BF16, same length,
	// both contiguous), element i rounded with the bits
	// StochasticBF16Bits(seed, offset+i).
	StochasticRoundBF16(dst, src View, seed uint64, offset int64)
}

// CapStochasticRound names StochasticRounder for Has and Without.
const CapStochasticRound = "stochastic_round"

// StochasticBF16 rounds x to bf16 with the 16 random bits r: the bits of
// x plus r, truncated, which rounds up with probability (the bits below
// bf16's mantissa)/2¹⁶. Infinities stay; a NaN becomes a quiet NaN with
// its sign, as BF16FromF32 makes it.
func StochasticBF16(x float32, r uint16) uint16 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 {
		if b&0x007fffff != 0 {
			return uint16(b>>16) | 0x40
		}
		return uint16(b >> 16)
	}
	return uint16((b + uint32(r)) >> 16)
}

// StochasticBF16Bits are the random bits of element i under seed.
func StochasticBF16Bits(seed, i uint64) uint16 {
	return uint16(mix64(seed^mix64(i)) >> 48)
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// StochasticRoundBF16 runs d's stochastic rounding, or the host
// composition of StochasticBF16 (the same bits; no device temporaries):
// chunks of src are read, rounded and written to dst.
func StochasticRoundBF16(d Device, dst, src View, seed uint64, offset int64) {
	if k, ok := capable(d, CapStochasticRound).(StochasticRounder); ok {
		k.StochasticRoundBF16(dst, src, seed, offset)
		return
	}
	const chunk = 1 << 16
	n := src.Len()
	in := make([]byte, 4*min(n, chunk))
	out := make([]byte, 2*min(n, chunk))
	for lo := 0; lo < n; lo += chunk {
		m := min(chunk, n-lo)
		d.Read(in[:4*m], src.Buf, int64(4*(src.Offset+lo)))
		for i := range m {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
			binary.LittleEndian.PutUint16(out[2*i:], StochasticBF16(x, StochasticBF16Bits(seed, uint64(offset)+uint64(lo+i))))
		}
		d.Write(dst.Buf, int64(2*(dst.Offset+lo)), out[:2*m])
	}
}
