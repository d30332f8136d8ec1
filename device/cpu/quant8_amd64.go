//go:build !purego

package cpu

import "github.com/memfit/memfit/device"

// adam8Args is the layout adam8Pass1AVX512 reads and writes: the step's
// constants, the block's old scales, the dequantisation factors, and
// (written) the new moments' absmax.
type adam8Args struct {
	c          device.Adam8bitConsts
	sm, sv     float32
	deqS, deqU float32
	am, av     float32
}

//go:noescape
func adam8Pass1AVX512(p, grad *float32, m, v *uint8, work *float32, n int, a *adam8Args)

//go:noescape
func adam8Pass2AVX512(m, v *uint8, work *float32, n int, km, kv float32)

// adam8Vector steps one block with AVX-512, computing exactly what
// device.Adam8bitBlock computes, and reports whether it could (AVX-512
// present, a multiple of 16 elements).
func adam8Vector(p, g []float32, m, v []uint8, ms, vs *float32, c *device.Adam8bitConsts, work []float32) bool {
	n := len(p)
	if !hasAVX512 || n == 0 || n%16 != 0 {
		return false
	}
	a := adam8Args{c: *c, sm: *ms, sv: *vs}
	a.deqS, a.deqU = device.Quant8DequantFactors()
	adam8Pass1AVX512(&p[0], &g[0], &m[0], &v[0], &work[0], n, &a)
	*ms, *vs = a.am, a.av
	km, kv := device.Quant8Factors(a.am, a.av)
	adam8Pass2AVX512(&m[0], &v[0], &work[0], n, km, kv)
	return true
}
