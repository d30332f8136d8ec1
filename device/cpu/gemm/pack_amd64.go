//go:build !purego

package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func pairRowsAVX512(out *uint32, src *uint16, ld, nq int, loadLo, loadHi, storeLo, storeHi uint16, outStride int)

//go:noescape
func transpose16F32(dst *float32, rows *[16]*float32, kc16, dstStride int, smask uint16)

//go:noescape
func copyRowsF32AVX512(dst *float32, src *float32, ld, kc int, loadLo, loadHi, storeLo, storeHi uint16, dstStride int)

// packF32AVX512 is packCopy for float32 with AVX-512 (packVectorAVX512):
// register transposes where rows of op(X) are contiguous, masked vector
// moves of each panel row where op(X) is transposed (3× faster than a
// memmove per panel row on the weight gradients' A).
func packF32AVX512(dst []float32, x mat[float32], i0, rows, p0, kc, mr, kg int) {
	done := 0
	if kg == 1 {
		done = packVectorAVX512(dst, x, i0, rows, p0, kc, mr, fmtF32)
	}
	if done < rows {
		packCopy(dst[done*kc:], x, i0+done, rows-done, p0, kc, mr, kg)
	}
}

// packPairsAVX512 is packPairs with the untransposed case (rows of op(X)
// contiguous, the activations of forward and input-gradient products)
// done by packF32AVX512's register transposes: a k pair is one 32-bit
// word, so a row of kc halves is a row of kc/2 words and the pair layout
// is the float32 layout of those words. It needs an even leading
// dimension, start column and kc (every block but an odd K's last).
func packPairsAVX512(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr, kg int) {
	if kg == 2 && x.trans && mr <= 32 && len(dst) > 0 {
		packPairRows(dst, x, i0, rows, p0, kc, mr)
		return
	}
	if kg != 2 || x.trans || x.ld%2 != 0 || p0%2 != 0 || kc%2 != 0 || len(dst) == 0 || len(x.data) < 2 {
		packPairs(dst, x, i0, rows, p0, kc, mr, kg)
		return
	}
	words := mat[float32]{
		data: unsafe.Slice((*float32)(unsafe.Pointer(&x.data[0])), len(x.data)/2),
		ld:   x.ld / 2,
	}
	d := unsafe.Slice((*float32)(unsafe.Pointer(&dst[0])), len(dst)/2)
	packF32AVX512(d, words, i0, rows, p0/2, kc/2, mr, 1)
}

// packPairRows is packPairs' transposed case with pairRowsAVX512
// interleaving each pair of source rows across a whole panel at once.
func packPairRows(dst []uint16, x mat[uint16], i0, rows, p0, kc, mr int) {
	kcp := roundUp(kc, 2)
	full := kc / 2
	d32 := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), len(dst)/2)
	storeLo, storeHi := lanes(mr)
	for ir := 0; ir < rows; ir += mr {
		nr := min(mr, rows-ir)
		pan := d32[ir*kcp/2 : (ir+mr)*kcp/2]
		if full > 0 {
			_ = x.data[(p0+2*full-1)*x.ld+i0+ir+nr-1] // the last element read
			loadLo, loadHi := lanes(nr)
			pairRowsAVX512(&pan[0], &x.data[p0*x.ld+i0+ir], x.ld, full, loadLo, loadHi, storeLo, storeHi, 4*mr)
		}
		if kc%2 == 1 {
			out := pan[full*mr : full*mr+mr]
			for i, v := range x.data[(p0+kc-1)*x.ld+i0+ir:][:nr] {
				out[i] = uint32(v)
			}
			clear(out[nr:])
		}
	}
}

//go:noescape
func transpose16BF16(dst *float32, rows *[16]*uint16, kc16, dstStride int, smask uint16)

//go:noescape
func transpose16F16(dst *float32, rows *[16]*uint16, kc16, dstStride int, smask uint16)

//go:noescape
func cvtRowsBF16AVX512(dst *float32, src *uint16, ld, kc int, loadLo, loadHi, storeLo, storeHi uint16, dstStride int)

//go:noescape
func cvtRowsF16AVX512(dst *float32, src *uint16, ld, kc int, loadLo, loadHi, storeLo, storeHi uint16, dstStride int)

// format is what a vector packer reads: float32, or a 16-bit format it
// converts to float32. Its methods call the assembly directly: through a
// func value, escape analysis would move the row pointers to the heap on
// every call.
type format uint8

const (
	fmtF32  format = iota
	fmtBF16        // converted by a shift
	fmtF16         // converted by VCVTPH2PS, exactly
)

func (f format) transpose(dst *float32, rows *[16]unsafe.Pointer, kc16, dstStride int, smask uint16) {
	switch f {
	case fmtF32:
		transpose16F32(dst, (*[16]*float32)(unsafe.Pointer(rows)), kc16, dstStride, smask)
	case fmtBF16:
		transpose16BF16(dst, (*[16]*uint16)(unsafe.Pointer(rows)), kc16, dstStride, smask)
	default:
		transpose16F16(dst, (*[16]*uint16)(unsafe.Pointer(rows)), kc16, dstStride, smask)
	}
}

func (f format) rows(dst *float32, src unsafe.Pointer, ld, kc int, loadLo, loadHi, storeLo, storeHi uint16, dstStride int) {
	switch f {
	case fmtF32:
		copyRowsF32AVX512(dst, (*float32)(src), ld, kc, loadLo, loadHi, storeLo, storeHi, dstStride)
	case fmtBF16:
		cvtRowsBF16AVX512(dst, (*uint16)(src), ld, kc, loadLo, loadHi, storeLo, storeHi, dstStride)
	default:
		cvtRowsF16AVX512(dst, (*uint16)(src), ld, kc, loadLo, loadHi, storeLo, storeHi, dstStride)
	}
}

// widen is one value as float32.
func widen[S float32 | uint16](v S, f format) float32 {
	switch v := any(v).(type) {
	case float32:
		return v
	case uint16:
		if f == fmtF16 {
			return F16ToF32(v)
		}
		return BF16ToF32(v)
	}
	panic("unreachable")
}

// lanes returns the masks of the first n of 32 lanes, as two 16-lane
// halves.
func lanes(n int) (lo, hi uint16) {
	return uint16(1<<min(n, 16) - 1), uint16(1<<max(n-16, 0) - 1)
}

// packVectorAVX512 packs rows i0… of op(X) (format f) into float32 panels
// of mr rows, one k per lane, with AVX-512, and returns how many rows it
// packed: all of them, whole panels from the first, or none where the
// shape does not suit it (the caller packs the rest).
func packVectorAVX512[S float32 | uint16](dst []float32, x mat[S], i0, rows, p0, kc, mr int, f format) int {
	if kc == 0 || rows == 0 {
		return rows
	}
	if x.trans {
		// Each k is a contiguous source row: mr lanes of it at once.
		if mr > 32 {
			return 0
		}
		storeLo, storeHi := lanes(mr)
		for ir := 0; ir < rows; ir += mr {
			nr := min(mr, rows-ir)
			pan := dst[ir*kc : ir*kc+mr*kc]
			_ = x.data[(p0+kc-1)*x.ld+i0+ir+nr-1] // the last element read
			loadLo, loadHi := lanes(nr)
			f.rows(&pan[0], unsafe.Pointer(&x.data[p0*x.ld+i0+ir]), x.ld, kc, loadLo, loadHi, storeLo, storeHi, 4*mr)
		}
		return rows
	}
	if kc < 16 || (mr > 16 && mr%16 != 0) {
		return 0
	}
	// Each row of op(X) is contiguous: 16×16 register transposes over the
	// whole panels, the last k mod 16 one by one.
	kc16 := kc &^ 15
	full := rows / mr * mr
	var rp [16]unsafe.Pointer
	for ir := 0; ir < full; ir += mr {
		pan := dst[ir*kc : ir*kc+mr*kc]
		for h := 0; h < mr; h += 16 {
			n := min(16, mr-h)
			for i := range rp {
				// Lanes past the panel repeat its last row; they are not stored.
				row := x.data[(i0+ir+h+min(i, n-1))*x.ld+p0:][:kc]
				rp[i] = unsafe.Pointer(&row[0])
			}
			_ = pan[(kc16-1)*mr+h+n-1]
			f.transpose(&pan[h], &rp, kc16/16, mr, uint16(1<<n-1))
		}
		for i := 0; i < mr; i++ {
			d := pan[i:]
			for p, v := range x.data[(i0+ir+i)*x.ld+p0:][kc16:kc] {
				d[(kc16+p)*mr] = widen(v, f)
			}
		}
	}
	return full
}

// convertPackerAVX512 returns packConvert for f's 16-bit format done with
// packVectorAVX512: one vector conversion per 16 values instead of a table
// lookup per value, so that the converting engines pack at the float32
// packer's speed (from half the bytes). The values are packConvert's, bit
// for bit (but that VCVTPH2PS quiets a signalling NaN half).
func convertPackerAVX512(f format, tab func() *[1 << 16]float32) func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int) {
	return func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, _ int) {
		if done := packVectorAVX512(dst, x, i0, rows, p0, kc, mr, f); done < rows {
			packConvert(dst[done*kc:], x, i0+done, rows-done, p0, kc, mr, tab())
		}
	}
}

var hasAVX512 = cpu.X86.HasAVX512F

//go:noescape
func fillRowsF32AVX512(dst *float32, ld, rows int, src *float32, maskLo, maskHi uint16)

// fillRows sets each of rows rows of t (ld apart, the last ending t) to
// b, up to 32 values, and reports whether it could.
func fillRows(t []float32, ld, rows int, b []float32) bool {
	if !hasAVX512 || len(b) == 0 {
		return false
	}
	lo, hi := lanes(len(b))
	fillRowsF32AVX512(&t[0], ld, rows, &b[0], lo, hi)
	return true
}
