//go:build !purego

#include "textflag.h"

// func adamF32AVX512(p, grad, m, v *float32, n int, c *adamConsts)
// Updates n elements (a multiple of 16) in place. c holds, as float32:
// gradScale, beta1, 1-beta1, beta2, 1-beta2, stepSize, 1/sqrt(bc2), eps,
// wd (L2 term added to the gradient), decay (1-lr·wd for AdamW, else 1).
TEXT ·adamF32AVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSS 0(AX), Z20
	VBROADCASTSS 4(AX), Z21
	VBROADCASTSS 8(AX), Z22
	VBROADCASTSS 12(AX), Z23
	VBROADCASTSS 16(AX), Z24
	VBROADCASTSS 20(AX), Z25
	VBROADCASTSS 24(AX), Z26
	VBROADCASTSS 28(AX), Z27
	VBROADCASTSS 32(AX), Z28
	VBROADCASTSS 36(AX), Z29
	XORQ BX, BX

loop:
	CMPQ CX, $16
	JLT  done
	VMOVUPS (SI)(BX*4), Z0       // g
	VMOVUPS (DI)(BX*4), Z1       // p
	VMULPS  Z20, Z0, Z0          // g *= gradScale
	VFMADD231PS Z28, Z1, Z0      // g += wd·p
	VMULPS  Z29, Z1, Z1          // p *= decay
	VMOVUPS (R8)(BX*4), Z2       // m
	VMULPS  Z21, Z2, Z2          // m *= beta1
	VFMADD231PS Z22, Z0, Z2      // m += (1-beta1)·g
	VMOVUPS (R9)(BX*4), Z3       // v
	VMULPS  Z0, Z0, Z4           // g²
	VMULPS  Z23, Z3, Z3          // v *= beta2
	VFMADD231PS Z24, Z4, Z3      // v += (1-beta2)·g²
	VSQRTPS Z3, Z5               // sqrt(v)
	VMULPS  Z26, Z5, Z5          // sqrt(v)/sqrt(bc2)
	VADDPS  Z27, Z5, Z5          // + eps
	VDIVPS  Z5, Z2, Z6           // m / denominator
	VFNMADD231PS Z25, Z6, Z1     // p -= stepSize·m/denominator
	VMOVUPS Z1, (DI)(BX*4)
	VMOVUPS Z2, (R8)(BX*4)
	VMOVUPS Z3, (R9)(BX*4)
	ADDQ    $16, BX
	SUBQ    $16, CX
	JMP     loop

done:
	VZEROUPPER
	RET
