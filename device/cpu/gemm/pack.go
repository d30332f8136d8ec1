package gemm

import (
	"math"
	"sync"
	"unsafe"
)

// packCopy packs rows i0..i0+rows-1, columns p0..p0+kc-1 of op(X) into
// micro-panels of mr rows with kg k values per lane (see engine.pack).
func packCopy[T any](dst []T, x mat[T], i0, rows, p0, kc, mr, kg int) {
	kcp := roundUp(kc, kg)
	var zero T
	if x.trans && kg == 1 {
		// Read each source row once, sequentially, and deal it out to the
		// panels: far kinder to the prefetchers than panel by panel.
		for p := 0; p < kc; p++ {
			src := x.data[(p0+p)*x.ld+i0:][:rows]
			d := dst[p*mr:]
			for ir := 0; ir < rows; ir += mr {
				pd := d[ir*kcp : ir*kcp+mr]
				if ir+mr <= rows {
					copy(pd, src[ir:ir+mr])
				} else {
					clear(pd[copy(pd, src[ir:]):])
				}
			}
		}
		return
	}
	for ir := 0; ir < rows; ir += mr {
		nr := min(mr, rows-ir)
		pan := dst[ir*kcp : ir*kcp+mr*kcp]
		switch {
		case !x.trans && kg == 1:
			for i := 0; i < nr; i++ {
				src := x.data[(i0+ir+i)*x.ld+p0:][:kc]
				d := pan[i:]
				for p, v := range src {
					d[p*mr] = v
				}
			}
			if nr < mr {
				for p := 0; p < kc; p++ {
					clear(pan[p*mr+nr : p*mr+mr])
				}
			}
		case !x.trans:
			// Groups of kg consecutive k go side by side; walk them with
			// running offsets rather than a division per element.
			step := mr * kg
			for i := 0; i < nr; i++ {
				src := x.data[(i0+ir+i)*x.ld+p0:][:kc]
				d := pan[i*kg:]
				p, q := 0, 0
				if kg == 2 {
					for ; p+2 <= kc; p, q = p+2, q+step {
						d[q], d[q+1] = src[p], src[p+1]
					}
				}
				for ; p < kcp; p++ {
					v := zero
					if p < kc {
						v = src[p]
					}
					d[(p/kg)*step+p%kg] = v
				}
			}
			if nr < mr {
				for q := 0; q < kcp/kg; q++ {
					clear(pan[(q*mr+nr)*kg : (q+1)*mr*kg])
				}
			}
		default:
			for p := 0; p < kcp; p++ {
				d := pan[(p/kg)*mr*kg+p%kg:]
				if p < kc {
					src := x.data[(p0+p)*x.ld+i0+ir:][:nr]
					for i, v := range src {
						d[i*kg] = v
					}
				} else {
					for i := 0; i < nr; i++ {
						d[i*kg] = zero
					}
				}
				for i := nr; i < mr; i++ {
					d[i*kg] = zero
				}
			}
		}
	}
}

// packConvert is packCopy for 16-bit sources converted to float32 through
// a lookup table, one k per lane.
func packConvert(dst []float32, x mat[uint16], i0, rows, p0, kc, mr int, tab *[1 << 16]float32) {
	for ir := 0; ir < rows; ir += mr {
		nr := min(mr, rows-ir)
		pan := dst[ir*kc : ir*kc+mr*kc]
		if !x.trans {
			for i := 0; i < nr; i++ {
				src := x.data[(i0+ir+i)*x.ld+p0:][:kc]
				d := pan[i:]
				for p, v := range src {
					d[p*mr] = tab[v]
				}
			}
			if nr < mr {
				for p := 0; p < kc; p++ {
					clear(pan[p*mr+nr : p*mr+mr])
				}
			}
			continue
		}
		for p := 0; p < kc; p++ {
			d := pan[p*mr : p*mr+mr]
			src := x.data[(p0+p)*x.ld+i0+ir:][:nr]
			for i, v := range src {
				d[i] = tab[v]
			}
			clear(d[nr:])
		}
	}
}

// F16ToF32 converts an IEEE 754 half-precision bit pattern to float32
// exactly (subnormals, infinities and NaN payloads included).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: man × 2⁻²⁴, exact in float32.
	f := float32(man) * (1.0 / (1 << 24))
	return math.Float32frombits(sign | math.Float32bits(f))
}

// BF16ToF32 converts a bfloat16 bit pattern to float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

var (
	f16Table  = sync.OnceValue(func() *[1 << 16]float32 { return makeTable(F16ToF32) })
	bf16Table = sync.OnceValue(func() *[1 << 16]float32 { return makeTable(BF16ToF32) })
)

func makeTable(f func(uint16) float32) *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for i := range t {
		t[i] = f(uint16(i))
	}
	return t
}

// convertPacker returns an engine.pack for 16-bit sources with one k per lane.
func convertPacker(tab func() *[1 << 16]float32) func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int) {
	return func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, _ int) {
		packConvert(dst, x, i0, rows, p0, kc, mr, tab())
	}
}

// packPairs is packCopy for 16-bit operands packed in k pairs (kg 2, the
// VDPBF16PS layout) when op(X) is transposed (the weight-gradient
// products): each lane's pair of consecutive k values is one 32-bit word,
// so two source rows merge into one sequential pass over the panel instead
// of two interleaved half-word ones (1.5× faster; BenchmarkPackPairs).
// Untransposed, packCopy's pair loop is faster and is used.
func packPairs(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int) {
	if kg != 2 || !x.trans || len(dst) == 0 {
		packCopy(dst, x, i0, rows, p0, kc, mr, kg)
		return
	}
	kcp := roundUp(kc, 2)
	d32 := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), len(dst)/2)
	for ir := 0; ir < rows; ir += mr {
		nr := min(mr, rows-ir)
		pan := d32[ir*kcp/2 : (ir+mr)*kcp/2]
		for q := 0; q < kcp/2; q++ {
			p := 2 * q
			out := pan[q*mr : q*mr+mr]
			s0 := x.data[(p0+p)*x.ld+i0+ir:][:nr]
			if p+1 < kc {
				s1 := x.data[(p0+p+1)*x.ld+i0+ir:][:nr]
				for i, v := range s0 {
					out[i] = uint32(v) | uint32(s1[i])<<16
				}
			} else {
				for i, v := range s0 {
					out[i] = uint32(v)
				}
			}
			clear(out[nr:])
		}
	}
}
