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

// packF32AVX512 is packCopy for float32 with AVX-512: the transposing case
// (rows of op(X) contiguous in memory, one k per lane) runs 16×16 register
// transposes over full panels instead of scalar scattered stores, and the
// other moves each panel row with masked vector moves instead of a
// memmove call (3× faster on the weight gradients' transposed A).
func packF32AVX512(dst []float32, x mat[float32], i0, rows, p0, kc, mr, kg int) {
	if x.trans && kg == 1 && mr <= 32 && kc > 0 {
		storeLo, storeHi := lanes(mr)
		for ir := 0; ir < rows; ir += mr {
			nr := min(mr, rows-ir)
			pan := dst[ir*kc : ir*kc+mr*kc]
			_ = x.data[(p0+kc-1)*x.ld+i0+ir+nr-1] // the last element read
			loadLo, loadHi := lanes(nr)
			copyRowsF32AVX512(&pan[0], &x.data[p0*x.ld+i0+ir], x.ld, kc, loadLo, loadHi, storeLo, storeHi, 4*mr)
		}
		return
	}
	if x.trans || kg != 1 || kc < 16 || (mr > 16 && mr%16 != 0) {
		packCopy(dst, x, i0, rows, p0, kc, mr, kg)
		return
	}
	kc16 := kc &^ 15
	full := rows / mr * mr
	var rp [16]*float32
	for ir := 0; ir < full; ir += mr {
		pan := dst[ir*kc : ir*kc+mr*kc]
		for h := 0; h < mr; h += 16 {
			lanes := min(16, mr-h)
			for i := range rp {
				// Lanes past the panel repeat its last row; they are not stored.
				row := x.data[(i0+ir+h+min(i, lanes-1))*x.ld+p0:][:kc]
				rp[i] = &row[0]
			}
			_ = pan[(kc16-1)*mr+h+lanes-1]
			transpose16F32(&pan[h], &rp, kc16/16, mr, uint16(1<<lanes-1))
		}
		for i := 0; i < mr; i++ {
			d := pan[i:]
			for p, v := range x.data[(i0+ir+i)*x.ld+p0:][kc16:kc] {
				d[(kc16+p)*mr] = v
			}
		}
	}
	if full < rows {
		packCopy(dst[full*kc:], x, i0+full, rows-full, p0, kc, mr, kg)
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

// converter is a 16-bit format packConvertAVX512 converts. Its methods
// call the assembly directly: through a func value, escape analysis would
// move the row pointers to the heap on every call.
type converter struct{ half bool } // IEEE half precision, else bfloat16

var (
	bf16Converter = converter{}
	f16Converter  = converter{half: true}
)

func (cv converter) transpose(dst *float32, rows *[16]*uint16, kc16, dstStride int, smask uint16) {
	if cv.half {
		transpose16F16(dst, rows, kc16, dstStride, smask)
	} else {
		transpose16BF16(dst, rows, kc16, dstStride, smask)
	}
}

func (cv converter) rows(dst *float32, src *uint16, ld, kc int, loadLo, loadHi, storeLo, storeHi uint16, dstStride int) {
	if cv.half {
		cvtRowsF16AVX512(dst, src, ld, kc, loadLo, loadHi, storeLo, storeHi, dstStride)
	} else {
		cvtRowsBF16AVX512(dst, src, ld, kc, loadLo, loadHi, storeLo, storeHi, dstStride)
	}
}

func (cv converter) scalar(h uint16) float32 {
	if cv.half {
		return F16ToF32(h)
	}
	return BF16ToF32(h)
}

func (cv converter) table() *[1 << 16]float32 {
	if cv.half {
		return f16Table()
	}
	return bf16Table()
}

// packer returns packConvert for cv's format done with AVX-512: one vector
// conversion per 16 values instead of a table lookup per value, so that
// the converting engines pack at the float32 packer's speed (from half the
// bytes). The values are packConvert's, bit for bit (but that VCVTPH2PS
// quiets a signalling NaN half).
func (cv converter) packer() func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, kg int) {
	return func(dst []float32, x mat[uint16], i0, rows, p0, kc, mr, _ int) {
		packConvertAVX512(dst, x, i0, rows, p0, kc, mr, cv)
	}
}

// lanes returns the masks of the first n of 32 lanes, as two 16-lane
// halves.
func lanes(n int) (lo, hi uint16) {
	return uint16(1<<min(n, 16) - 1), uint16(1<<max(n-16, 0) - 1)
}

func packConvertAVX512(dst []float32, x mat[uint16], i0, rows, p0, kc, mr int, cv converter) {
	if kc == 0 || rows == 0 {
		return
	}
	if x.trans {
		// Each k is a contiguous source row: convert mr lanes of it at once.
		if mr > 32 {
			packConvert(dst, x, i0, rows, p0, kc, mr, cv.table())
			return
		}
		storeLo, storeHi := lanes(mr)
		for ir := 0; ir < rows; ir += mr {
			nr := min(mr, rows-ir)
			pan := dst[ir*kc : ir*kc+mr*kc]
			_ = x.data[(p0+kc-1)*x.ld+i0+ir+nr-1] // the last element read
			loadLo, loadHi := lanes(nr)
			cv.rows(&pan[0], &x.data[p0*x.ld+i0+ir], x.ld, kc, loadLo, loadHi, storeLo, storeHi, 4*mr)
		}
		return
	}
	if kc < 16 || (mr > 16 && mr%16 != 0) {
		packConvert(dst, x, i0, rows, p0, kc, mr, cv.table())
		return
	}
	// Each row of op(X) is contiguous: 16×16 register transposes, as
	// packF32AVX512.
	kc16 := kc &^ 15
	full := rows / mr * mr
	var rp [16]*uint16
	for ir := 0; ir < full; ir += mr {
		pan := dst[ir*kc : ir*kc+mr*kc]
		for h := 0; h < mr; h += 16 {
			n := min(16, mr-h)
			for i := range rp {
				// Lanes past the panel repeat its last row; they are not stored.
				row := x.data[(i0+ir+h+min(i, n-1))*x.ld+p0:][:kc]
				rp[i] = &row[0]
			}
			_ = pan[(kc16-1)*mr+h+n-1]
			cv.transpose(&pan[h], &rp, kc16/16, mr, uint16(1<<n-1))
		}
		for i := 0; i < mr; i++ {
			d := pan[i:]
			for p, v := range x.data[(i0+ir+i)*x.ld+p0:][kc16:kc] {
				d[(kc16+p)*mr] = cv.scalar(v)
			}
		}
	}
	if full < rows {
		packConvert(dst[full*kc:], x, i0+full, rows-full, p0, kc, mr, cv.table())
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
