//go:build !purego

#include "textflag.h"

// func adam8Pass1AVX512(p, grad *float32, m, v *uint8, work *float32, n int, a *adam8Args)
// The first pass of device.Adam8bitBlock over n elements (a multiple of
// 16): dequantise the codes m and v with the old scales, update the
// moments and the parameter, write the new moments to work[0:n] and
// work[n:2n], and their absmax to a.am and a.av. Every operation is the
// Go code's, in its order, each rounded to F32 (no fused multiply-adds).
TEXT ·adam8Pass1AVX512(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ work+32(FP), R10
	MOVQ n+40(FP), CX
	MOVQ a+48(FP), AX
	LEAQ (R10)(CX*4), R11
	VBROADCASTSS 0(AX), Z20  // gradScale
	VBROADCASTSS 4(AX), Z21  // wd
	VBROADCASTSS 8(AX), Z22  // decay
	VBROADCASTSS 12(AX), Z23 // beta1
	VBROADCASTSS 16(AX), Z24 // 1-beta1
	VBROADCASTSS 20(AX), Z25 // beta2
	VBROADCASTSS 24(AX), Z26 // 1-beta2
	VBROADCASTSS 28(AX), Z27 // stepSize
	VBROADCASTSS 32(AX), Z28 // 1/sqrt(bc2)
	VBROADCASTSS 36(AX), Z29 // eps
	VBROADCASTSS 40(AX), Z30 // old m scale
	VBROADCASTSS 44(AX), Z31 // old v scale
	VBROADCASTSS 48(AX), Z18 // signed dequantisation factor
	VBROADCASTSS 52(AX), Z19 // unsigned dequantisation factor
	MOVL $0x7f, BX
	VPBROADCASTD BX, Z16
	MOVL $0x80, BX
	VPBROADCASTD BX, Z17
	MOVL $0x7fffffff, BX
	VPBROADCASTD BX, Z15
	VPXORD Z13, Z13, Z13 // absmax of m
	VPXORD Z14, Z14, Z14 // absmax of v
	XORQ DX, DX

loop1:
	CMPQ DX, CX
	JGE  done1
	VMOVUPS (SI)(DX*4), Z0
	VMULPS  Z20, Z0, Z0      // gi = g·gradScale
	VMOVUPS (DI)(DX*4), Z1   // pi
	VMULPS  Z21, Z1, Z2
	VADDPS  Z2, Z0, Z0       // gi += wd·pi
	VPMOVZXBD (R8)(DX*1), Z3 // m codes
	VPANDD  Z16, Z3, Z4
	VPSLLD  $20, Z4, Z4
	VMULPS  Z18, Z4, Z4      // |Q(c)|
	VPANDD  Z17, Z3, Z5
	VPSLLD  $24, Z5, Z5
	VPORD   Z5, Z4, Z4       // sign
	VMULPS  Z30, Z4, Z4      // mo
	VMULPS  Z23, Z4, Z4
	VMULPS  Z24, Z0, Z5
	VADDPS  Z5, Z4, Z4       // mi = beta1·mo + (1-beta1)·gi
	VPMOVZXBD (R9)(DX*1), Z6 // v codes
	VPSLLD  $20, Z6, Z6
	VMULPS  Z19, Z6, Z6
	VMULPS  Z31, Z6, Z6      // vo
	VMULPS  Z25, Z6, Z6
	VMULPS  Z26, Z0, Z7
	VMULPS  Z0, Z7, Z7
	VADDPS  Z7, Z6, Z6       // vi = beta2·vo + ((1-beta2)·gi)·gi
	VSQRTPS Z6, Z8
	VMULPS  Z28, Z8, Z8
	VADDPS  Z29, Z8, Z8      // den
	VMULPS  Z27, Z4, Z9
	VDIVPS  Z8, Z9, Z9       // stepSize·mi / den
	VMULPS  Z22, Z1, Z1
	VSUBPS  Z9, Z1, Z1       // p = p·decay - step
	VMOVUPS Z1, (DI)(DX*4)
	VMOVUPS Z4, (R10)(DX*4)
	VMOVUPS Z6, (R11)(DX*4)
	VPANDD  Z15, Z4, Z10
	VMAXPS  Z10, Z13, Z13
	VMAXPS  Z6, Z14, Z14
	ADDQ    $16, DX
	JMP     loop1

done1:
	VEXTRACTF32X8 $1, Z13, Y10
	VMAXPS        Y10, Y13, Y13
	VEXTRACTF128  $1, Y13, X10
	VMAXPS        X10, X13, X13
	VPERMILPS     $0x4e, X13, X10
	VMAXPS        X10, X13, X13
	VPERMILPS     $0xb1, X13, X10
	VMAXPS        X10, X13, X13
	VMOVSS        X13, 56(AX)
	VEXTRACTF32X8 $1, Z14, Y10
	VMAXPS        Y10, Y14, Y14
	VEXTRACTF128  $1, Y14, X10
	VMAXPS        X10, X14, X14
	VPERMILPS     $0x4e, X14, X10
	VMAXPS        X10, X14, X14
	VPERMILPS     $0xb1, X14, X10
	VMAXPS        X10, X14, X14
	VMOVSS        X14, 60(AX)
	VZEROUPPER
	RET

// func adam8Pass2AVX512(m, v *uint8, work *float32, n int, km, kv float32)
// The second pass: the codes of work[0:n] (first moment, signed) and
// work[n:2n] (second moment) scaled by km and kv, rounded as
// device.Quant8Store does: the F32 bits of |y| rounded to 3 mantissa
// bits (ties to even), clamped to the largest code, the sign bit set for
// a negative first moment whose magnitude code is not 0.
TEXT ·adam8Pass2AVX512(SB), NOSPLIT, $0-40
	MOVQ m+0(FP), R8
	MOVQ v+8(FP), R9
	MOVQ work+16(FP), R10
	MOVQ n+24(FP), CX
	LEAQ (R10)(CX*4), R11
	VBROADCASTSS km+32(FP), Z20
	VBROADCASTSS kv+36(FP), Z21
	MOVL $0x7ffff, BX
	VPBROADCASTD BX, Z16
	MOVL $0x7fffffff, BX
	VPBROADCASTD BX, Z17
	MOVL $1, BX
	VPBROADCASTD BX, Z18
	MOVL $0x7f, BX
	VPBROADCASTD BX, Z19
	MOVL $0xff, BX
	VPBROADCASTD BX, Z22
	XORQ DX, DX

loop2:
	CMPQ DX, CX
	JGE  done2
	VMULPS  (R10)(DX*4), Z20, Z0 // y = m·km
	VPANDD  Z17, Z0, Z1          // |y| bits
	VPSRLD  $20, Z1, Z2
	VPANDD  Z18, Z2, Z2
	VPADDD  Z16, Z1, Z1
	VPADDD  Z2, Z1, Z1
	VPSRLD  $20, Z1, Z1
	VPMINUD Z19, Z1, Z1
	VPSRLD  $31, Z0, Z3
	VPSLLD  $7, Z3, Z3
	VPTESTMD Z1, Z1, K1
	VPORD   Z3, Z1, K1, Z1
	VPMOVDB Z1, (R8)(DX*1)
	VMULPS  (R11)(DX*4), Z21, Z4 // y = v·kv
	VPANDD  Z17, Z4, Z5
	VPSRLD  $20, Z5, Z6
	VPANDD  Z18, Z6, Z6
	VPADDD  Z16, Z5, Z5
	VPADDD  Z6, Z5, Z5
	VPSRLD  $20, Z5, Z5
	VPMINUD Z22, Z5, Z5
	VPMOVDB Z5, (R9)(DX*1)
	ADDQ    $16, DX
	JMP     loop2

done2:
	VZEROUPPER
	RET
