//go:build purego || !amd64

package gemm

import "unsafe"

// Without the vector decoders, decode converts one value at a time.
const hasQuantAVX512 = false

func nf4DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, levels *[16]float32, n16, out, ahead int) {
	panic("unreachable")
}

func i8DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, n16, out, ahead int) {
	panic("unreachable")
}
