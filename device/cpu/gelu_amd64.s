//go:build !purego

#include "textflag.h"
#include "fastmath_amd64.h"

// LOADGELU loads what the GELU kernels need beyond LOADCONSTS' exp
// constants: Z1 -2·sqrt(2/pi), Z2 -2k, Z3 -87, Z4 88, Z19 2·sqrt(2/pi),
// Z14 6k, Z15 +inf bits, Z30 0x7fff (bf16 rounding bias).
#define LOADGELU \
	LOADCONSTS; \
	VBROADCASTSS 56(AX), Z1; \
	VBROADCASTSS 60(AX), Z2; \
	VBROADCASTSS 64(AX), Z3; \
	VBROADCASTSS 68(AX), Z4; \
	VBROADCASTSS 72(AX), Z19; \
	VBROADCASTSS 76(AX), Z14; \
	LOADROUND

// GELUEXP computes e = exp(w) into Z13, w = -2u = v·(-2·sqrt(2/pi) - 2k·v²)
// from v in Z0 clamped to [-87, 88] (so that 2^n stays a normal float and
// 1+e finite), with v² left in Z5: GELU is v·σ(2u) = v/(1+e). A NaN v
// gives w = -87, and the NaN comes back through v. Scratch: Z8, Z11, Z12.
#define GELUEXP \
	VMULPS Z0, Z0, Z5; \
	VMOVAPS Z1, Z8; \
	VFMADD231PS Z2, Z5, Z8; \
	VMULPS Z0, Z8, Z8; \
	VMAXPS Z3, Z8, Z8; \
	VMINPS Z4, Z8, Z8; \
	EXP(Z8)

// GELUY computes Z6 = gelu(v) = v/(1+e) after GELUEXP.
#define GELUY \
	VADDPS Z29, Z13, Z13; \
	VDIVPS Z13, Z0, Z6

// GELUD computes Z6 = gelu'(v) = s·(1 + v·s·e·(2·sqrt(2/pi) + 6k·v²)),
// s = 1/(1+e), after GELUEXP (σ' = σ²·e). Scratch: Z7, Z9, Z10.
#define GELUD \
	VADDPS Z29, Z13, Z10; \
	VDIVPS Z10, Z29, Z9; \
	VMOVAPS Z19, Z6; \
	VFMADD231PS Z14, Z5, Z6; \
	VMULPS Z9, Z13, Z7; \
	VMULPS Z0, Z7, Z7; \
	VFMADD213PS Z29, Z7, Z6; \
	VMULPS Z9, Z6, Z6

// func geluF32AVX512(y, x *float32, n int, c *geluConsts)
// y = gelu(x) for n (a multiple of 16) elements.
TEXT ·geluF32AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), AX
	LOADGELU
	XORQ BX, BX

gloop:
	CMPQ CX, $16
	JLT  gdone
	VMOVUPS (SI)(BX*4), Z0
	GELUEXP
	GELUY
	VMOVUPS Z6, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     gloop

gdone:
	VZEROUPPER
	RET

// func geluBF16AVX512(y, x *uint16, n int, c *geluConsts)
// geluF32AVX512 on bfloat16s, computed in float32 and rounded once.
TEXT ·geluBF16AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), AX
	LOADGELU
	XORQ BX, BX

hloop:
	CMPQ CX, $16
	JLT  hdone
	LOADBF16((SI)(BX*2), Z0)
	GELUEXP
	GELUY
	STOREBF16(Z6, (DI)(BX*2))
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     hloop

hdone:
	VZEROUPPER
	RET

// func geluGradF32AVX512(out, x, gr *float32, n int, c *geluConsts)
// out = gr·gelu'(x).
TEXT ·geluGradF32AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	LOADGELU
	XORQ BX, BX

bloop:
	CMPQ CX, $16
	JLT  bdone
	VMOVUPS (SI)(BX*4), Z0
	GELUEXP
	GELUD
	VMULPS  (DX)(BX*4), Z6, Z6
	VMOVUPS Z6, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     bloop

bdone:
	VZEROUPPER
	RET

// func geluGradBF16AVX512(out, x, gr *uint16, n int, c *geluConsts)
// geluGradF32AVX512 on bfloat16s, computed in float32 and rounded once.
TEXT ·geluGradBF16AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	LOADGELU
	XORQ BX, BX

kloop:
	CMPQ CX, $16
	JLT  kdone
	LOADBF16((SI)(BX*2), Z0)
	GELUEXP
	GELUD
	LOADBF16((DX)(BX*2), Z7)
	VMULPS  Z7, Z6, Z6
	STOREBF16(Z6, (DI)(BX*2))
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     kloop

kdone:
	VZEROUPPER
	RET

// func expShiftF32AVX512(y, x *float32, n int, shift float32, c *geluConsts)
// y = exp(x - shift) for n elements (the last up to 15 under a mask), with
// x - shift <= 0 (softmax rows); arguments below -87.3 (masked entries)
// give exactly 0.
TEXT ·expShiftF32AVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS shift+24(FP), Z7
	MOVQ c+32(FP), AX
	LOADCONSTS
	MOVL $0xc2aeac4f, DX          // -87.33654
	VPBROADCASTD DX, Z6
	XORQ BX, BX

eloop:
	CMPQ CX, $16
	JLT  edone
	EXPSHIFT((SI)(BX*4), (DI)(BX*4))
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     eloop

edone:
	TESTQ CX, CX
	JE    eret
	MOVL  $1, DX
	SHLL  CX, DX
	DECL  DX
	KMOVW DX, K2
	EXPSHIFTMASK((SI)(BX*4), (DI)(BX*4))

eret:
	VZEROUPPER
	RET
