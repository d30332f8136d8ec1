package data

import (
	"math/bits"
	"math/rand/v2"
)

// mix hashes two words into one (splitmix64's finaliser over a combination
// of both); it keys permutations and per-example random streams.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z ^= z >> 31
	z *= 0x94d049bb133111eb
	z ^= z >> 29
	z *= 0xbf58476d1ce4e5b9
	return z ^ (z >> 32)
}

// exampleRand returns the random stream that transforms of example idx use
// in a given epoch: a function of (seed, epoch, idx) only, so results do
// not depend on which worker reads the example or when.
func exampleRand(seed uint64, epoch, idx int) *rand.Rand {
	return rand.New(rand.NewPCG(mix(seed, uint64(epoch)), uint64(idx)))
}

// below maps a 64-bit hash onto [0, n) without a division (Lemire's
// multiply-shift).
func below(h uint64, n uint64) uint64 {
	hi, _ := bits.Mul64(h, n)
	return hi
}

const feistelRounds = 6

// permutation is a keyed bijection of [0, n): a balanced Feistel network
// on the smallest even number of bits that covers n, restricted to [0, n)
// by cycle walking. It shuffles an index range of any size in constant
// memory.
type permutation struct {
	n    uint64
	half uint
	mask uint64
	keys [feistelRounds]uint64
}

func newPermutation(n int, seed uint64) permutation {
	p := permutation{n: uint64(max(n, 0))}
	var b uint
	if p.n > 0 {
		b = uint(bits.Len64(p.n - 1))
	}
	p.half = max((b+1)/2, 1)
	p.mask = 1<<p.half - 1
	for r := range p.keys {
		p.keys[r] = mix(seed, uint64(r)+1)
	}
	return p
}

func (p *permutation) encrypt(x uint64) uint64 {
	l, r := x>>p.half, x&p.mask
	for _, k := range p.keys {
		l, r = r, l^(mix(r, k)&p.mask)
	}
	return l<<p.half | r
}

// at returns the image of i, which must lie in [0, n).
func (p *permutation) at(i int) int {
	x := uint64(i)
	for {
		x = p.encrypt(x)
		if x < p.n {
			return int(x)
		}
	}
}
