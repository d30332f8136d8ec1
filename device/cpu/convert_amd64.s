//go:build !purego

#include "textflag.h"

// func bf16FromF32AVX512(dst *uint16, src *float32, n int)
// Rounds n (a multiple of 16) float32s to bfloat16, nearest-even; a NaN
// stays a (quiet) NaN.
TEXT ·bf16FromF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z20          // rounding bias
	MOVL $1, AX
	VPBROADCASTD AX, Z21          // 1
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z22          // abs mask
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z23          // +inf
	MOVL $0x40, AX
	VPBROADCASTD AX, Z24          // quiet bit of a bf16 NaN
	XORQ BX, BX

cloop:
	CMPQ CX, $16
	JLT  cdone
	VMOVDQU32 (SI)(BX*4), Z0
	VPSRLD  $16, Z0, Z1           // x >> 16
	VPANDD  Z21, Z1, Z2           // lsb
	VPADDD  Z20, Z0, Z3
	VPADDD  Z2, Z3, Z3            // x + 0x7fff + lsb
	VPSRLD  $16, Z3, Z3           // rounded
	VPANDD  Z22, Z0, Z4           // |x|
	VPCMPUD $6, Z23, Z4, K1       // K1 = |x| > inf: NaN
	VPORD   Z24, Z1, Z5           // (x >> 16) | 0x40
	VMOVDQA32 Z5, K1, Z3          // NaNs take the quiet pattern
	VPMOVDW Z3, Y6
	VMOVDQU Y6, (DI)(BX*2)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     cloop

cdone:
	VZEROUPPER
	RET

// func f32FromBF16AVX512(dst *float32, src *uint16, n int)
TEXT ·f32FromBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ BX, BX

wloop:
	CMPQ CX, $16
	JLT  wdone
	VPMOVZXWD (SI)(BX*2), Z0
	VPSLLD  $16, Z0, Z0
	VMOVDQU32 Z0, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     wloop

wdone:
	VZEROUPPER
	RET
