//go:build !purego

package gemm

//go:noescape
func transpose16F32(dst *float32, rows *[16]*float32, kc16, dstStride int, smask uint16)

// packF32AVX512 is packCopy for float32 with AVX-512: the transposing case
// (rows of op(X) contiguous in memory, one k per lane) runs 16×16 register
// transposes over full panels instead of scalar scattered stores.
func packF32AVX512(dst []float32, x mat[float32], i0, rows, p0, kc, mr, kg int) {
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
