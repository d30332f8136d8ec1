//go:build !purego

package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func nf4DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, levels *[16]float32, n16, out, ahead int)

//go:noescape
func i8DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, n16, out, ahead int)

// hasQuantAVX512 reports whether the vector decoders run here.
var hasQuantAVX512 = cpu.X86.HasAVX512F
