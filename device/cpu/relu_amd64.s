//go:build !purego

#include "textflag.h"

// func reluF32AVX512(y, x *float32, n int)
// y = max(x, 0) for n (a multiple of 16) elements; NaN gives 0, as the
// scalar loop's "x > 0 ? x : 0" does.
TEXT ·reluF32AVX512(SB), NOSPLIT, $0-24
	MOVQ   y+0(FP), DI
	MOVQ   x+8(FP), SI
	MOVQ   n+16(FP), CX
	VXORPS Z1, Z1, Z1
	XORQ   BX, BX

rloop:
	CMPQ    CX, $16
	JLT     rdone
	VMOVUPS (SI)(BX*4), Z0
	VMAXPS  Z1, Z0, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     rloop

rdone:
	VZEROUPPER
	RET

// func reluGradF32AVX512(out, v, grad *float32, n int)
// out = v > 0 ? grad : 0 for n (a multiple of 16) elements (v is the input or
// the output of the ReLU: both are positive at the same places).
TEXT ·reluGradF32AVX512(SB), NOSPLIT, $0-32
	MOVQ   out+0(FP), DI
	MOVQ   v+8(FP), SI
	MOVQ   grad+16(FP), DX
	MOVQ   n+24(FP), CX
	VXORPS Z1, Z1, Z1
	XORQ   BX, BX

gloop:
	CMPQ    CX, $16
	JLT     gdone
	VMOVUPS (SI)(BX*4), Z0
	VCMPPS  $14, Z1, Z0, K1
	VMOVUPS.Z (DX)(BX*4), K1, Z2
	VMOVUPS Z2, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     gloop

gdone:
	VZEROUPPER
	RET
