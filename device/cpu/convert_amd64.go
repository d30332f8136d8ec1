//go:build !purego

package cpu

//go:noescape
func bf16FromF32AVX512(dst *uint16, src *float32, n int)

//go:noescape
func f32FromBF16AVX512(dst *float32, src *uint16, n int)

// bf16FromF32Vector converts the largest multiple of 16 elements with
// AVX-512 and returns how many it did.
func bf16FromF32Vector(dst []uint16, src []float32) int {
	n := min(len(dst), len(src)) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	bf16FromF32AVX512(&dst[0], &src[0], n)
	return n
}

// f32FromBF16Vector widens the largest multiple of 16 elements.
func f32FromBF16Vector(dst []float32, src []uint16) int {
	n := min(len(dst), len(src)) &^ 15
	if !hasAVX512 || n == 0 {
		return 0
	}
	f32FromBF16AVX512(&dst[0], &src[0], n)
	return n
}
