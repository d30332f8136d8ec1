//go:build !purego

#include "textflag.h"

// Constants (geluConsts), 4 bytes each: 0 sqrt(2/pi), 4 k = 0.044715·sqrt(2/pi),
// 8 3k, 12 9, 16 log2(e), 20 1.5·2^23, 24 ln2hi, 28 ln2lo, 32..56 c7..c1,
// 60 1, 64 0.5, 68 0x7fffffff, 72 0x80000000, 76 int32 127.
//
// Registers: Z1 sqrt(2/pi), Z2 k, Z3 3k, Z4 0.5, Z19 9, Z20 log2e,
// Z21 magic, Z22 ln2hi, Z23 ln2lo, Z24-Z27 c7-c4, Z16-Z18 c3-c1, Z29 1,
// Z28 abs mask, Z30 sign mask, Z31 127.

#define LOADCONSTS \
	VBROADCASTSS 0(AX), Z1; \
	VBROADCASTSS 4(AX), Z2; \
	VBROADCASTSS 8(AX), Z3; \
	VBROADCASTSS 12(AX), Z19; \
	VBROADCASTSS 16(AX), Z20; \
	VBROADCASTSS 20(AX), Z21; \
	VBROADCASTSS 24(AX), Z22; \
	VBROADCASTSS 28(AX), Z23; \
	VBROADCASTSS 32(AX), Z24; \
	VBROADCASTSS 36(AX), Z25; \
	VBROADCASTSS 40(AX), Z26; \
	VBROADCASTSS 44(AX), Z27; \
	VBROADCASTSS 48(AX), Z16; \
	VBROADCASTSS 52(AX), Z17; \
	VBROADCASTSS 56(AX), Z18; \
	VBROADCASTSS 60(AX), Z29; \
	VBROADCASTSS 64(AX), Z4; \
	VBROADCASTSS 68(AX), Z28; \
	VBROADCASTSS 72(AX), Z30; \
	VBROADCASTSS 76(AX), Z31

// GELUARG computes u = v·(sqrt(2/pi) + k·v²) into Z8 from v in Z0, with
// v² left in Z5.
#define GELUARG \
	VMULPS Z0, Z0, Z5; \
	VMULPS Z2, Z5, Z8; \
	VADDPS Z1, Z8, Z8; \
	VMULPS Z0, Z8, Z8

// TANH computes Z9 = tanh(Z8) to absolute error < 3e-7: with a = min(|u|, 9),
// e = exp(-2a) by range reduction (n = round(-2a·log2 e) via the 1.5·2^23
// trick, r = -2a - n·ln2) and the degree-7 polynomial, tanh|u| =
// (1-e)/(1+e), and the sign of u put back. Scratch: Z10-Z13.
#define TANH \
	VPANDD Z28, Z8, Z10; \
	VMINPS Z19, Z10, Z10; \
	VADDPS Z10, Z10, Z10; \
	VMOVAPS Z21, Z11; \
	VFNMADD231PS Z20, Z10, Z11; \
	VSUBPS Z21, Z11, Z12; \
	VPXORD Z13, Z13, Z13; \
	VSUBPS Z10, Z13, Z10; \
	VFNMADD231PS Z22, Z12, Z10; \
	VFNMADD231PS Z23, Z12, Z10; \
	VMOVAPS Z24, Z13; \
	VFMADD213PS Z25, Z10, Z13; \
	VFMADD213PS Z26, Z10, Z13; \
	VFMADD213PS Z27, Z10, Z13; \
	VFMADD213PS Z16, Z10, Z13; \
	VFMADD213PS Z17, Z10, Z13; \
	VFMADD213PS Z18, Z10, Z13; \
	VFMADD213PS Z29, Z10, Z13; \
	VPSUBD Z21, Z11, Z11; \
	VPADDD Z31, Z11, Z11; \
	VPSLLD $23, Z11, Z11; \
	VMULPS Z11, Z13, Z13; \
	VSUBPS Z13, Z29, Z10; \
	VADDPS Z13, Z29, Z11; \
	VDIVPS Z11, Z10, Z9; \
	VPANDD Z30, Z8, Z10; \
	VPORD Z10, Z9, Z9

// func geluF32AVX512(y, x *float32, n int, c *geluConsts)
// y = 0.5·v·(1 + tanh u) for n (a multiple of 16) elements.
TEXT ·geluF32AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), AX
	LOADCONSTS
	XORQ BX, BX

gloop:
	CMPQ CX, $16
	JLT  gdone
	VMOVUPS (SI)(BX*4), Z0
	GELUARG
	TANH
	VADDPS  Z29, Z9, Z9
	VMULPS  Z4, Z0, Z6
	VMULPS  Z9, Z6, Z6
	VMOVUPS Z6, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     gloop

gdone:
	VZEROUPPER
	RET

// func geluGradF32AVX512(out, x, gr *float32, n int, c *geluConsts)
// out = gr·0.5·((1 + th) + v·(1 - th²)·(sqrt(2/pi) + 3k·v²)).
TEXT ·geluGradF32AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), AX
	LOADCONSTS
	XORQ BX, BX

bloop:
	CMPQ CX, $16
	JLT  bdone
	VMOVUPS (SI)(BX*4), Z0
	GELUARG
	TANH
	VMULPS  Z3, Z5, Z6
	VADDPS  Z1, Z6, Z6
	VMULPS  Z9, Z9, Z7
	VSUBPS  Z7, Z29, Z7
	VMULPS  Z7, Z6, Z6
	VMULPS  Z0, Z6, Z6
	VADDPS  Z29, Z9, Z9
	VADDPS  Z9, Z6, Z6
	VMULPS  Z4, Z6, Z6
	VMOVUPS (DX)(BX*4), Z7
	VMULPS  Z7, Z6, Z6
	VMOVUPS Z6, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     bloop

bdone:
	VZEROUPPER
	RET

// func expShiftF32AVX512(y, x *float32, n int, shift float32, c *geluConsts)
// y = exp(x - shift) for n (a multiple of 16) elements, with x - shift <= 0
// (softmax rows); arguments below -87.3 (masked entries) give exactly 0.
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
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS  Z7, Z0, Z10           // z = x - shift
	VCMPPS  $1, Z6, Z10, K1       // K1: z < -87.3
	VMAXPS  Z6, Z10, Z10
	VMOVAPS Z21, Z11
	VFMADD231PS Z20, Z10, Z11     // big = magic + z·log2e
	VSUBPS  Z21, Z11, Z12         // n
	VFNMADD231PS Z22, Z12, Z10    // r = z - n·ln2hi
	VFNMADD231PS Z23, Z12, Z10    // r -= n·ln2lo
	VMOVAPS Z24, Z13
	VFMADD213PS Z25, Z10, Z13
	VFMADD213PS Z26, Z10, Z13
	VFMADD213PS Z27, Z10, Z13
	VFMADD213PS Z16, Z10, Z13
	VFMADD213PS Z17, Z10, Z13
	VFMADD213PS Z18, Z10, Z13
	VFMADD213PS Z29, Z10, Z13
	VPSUBD  Z21, Z11, Z11
	VPADDD  Z31, Z11, Z11
	VPSLLD  $23, Z11, Z11
	VMULPS  Z11, Z13, Z13         // e = p·2^n
	VPXORD  Z14, Z14, Z14
	VMOVAPS Z14, K1, Z13          // masked entries: 0
	VMOVUPS Z13, (DI)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     eloop

edone:
	VZEROUPPER
	RET
