package gemm

import (
	"math"

	"github.com/x448/float16"
)

// tileBF16 rounds finished tiles into a bfloat16 C; out16_amd64.go
// replaces it with AVX-512 code where the CPU has it.
var tileBF16 tileFunc = tileBF16Go

func tileBF16Go(c []uint16, ldc int, t []float32, ldt, rows, cols int, beta float32) {
	for r := 0; r < rows; r++ {
		tr := t[r*ldt : r*ldt+cols]
		cr := c[r*ldc : r*ldc+cols]
		for j, v := range tr {
			if beta != 0 {
				v += beta * BF16ToF32(cr[j])
			}
			cr[j] = roundBF16(v)
		}
	}
}

// roundBF16 rounds to the nearest bfloat16, ties to even; a NaN stays a
// (quiet) NaN.
func roundBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func tileF16(c []uint16, ldc int, t []float32, ldt, rows, cols int, beta float32) {
	for r := 0; r < rows; r++ {
		tr := t[r*ldt : r*ldt+cols]
		cr := c[r*ldc : r*ldc+cols]
		for j, v := range tr {
			if beta != 0 {
				v += beta * F16ToF32(cr[j])
			}
			cr[j] = uint16(float16.Fromfloat32(v))
		}
	}
}
