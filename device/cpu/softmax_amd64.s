//go:build !purego

#include "textflag.h"
#include "fastmath_amd64.h"

// Softmax over bfloat16 rows, widened and rounded in registers. Each
// kernel takes rows of n elements, n a multiple of 16, and performs the
// float32 path's operations in the same order (the max, expShiftF32AVX512,
// sumF32AVX512's four accumulators, one division, scaleF32AVX512; and
// dotF32AVX512 then softmaxGradF32AVX512), so both give the same bits.

// func softmaxBF16AVX512(y, x *uint16, tmp *float32, rows, n int, c *geluConsts)
// Each of rows rows: y = softmax(x), through tmp (n float32s).
TEXT ·softmaxBF16AVX512(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ tmp+16(FP), R8
	MOVQ rows+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	LOADCONSTS
	LOADROUND
	MOVL $0xc2aeac4f, DX          // -87.33654
	VPBROADCASTD DX, Z6

row:
	TESTQ R9, R9
	JE    done
	// The row's maximum, widening it into tmp on the way.
	LOADBF16((SI), Z2)
	VMOVUPS Z2, (R8)
	MOVQ $16, BX

max:
	CMPQ BX, CX
	JGE  maxed
	LOADBF16((SI)(BX*2), Z0)
	VMOVUPS Z0, (R8)(BX*4)
	VMAXPS Z0, Z2, Z2
	ADDQ $16, BX
	JMP  max

maxed:
	VMOVAPS Z2, Z0
	HFOLD(VMAXPS)
	VBROADCASTSS X0, Z7
	// e = exp(x - max) in place, summed as sumF32AVX512 sums.
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	XORQ BX, BX

exp4:
	LEAQ 64(BX), DX
	CMPQ DX, CX
	JGT  exp1
	EXPSHIFT((R8)(BX*4), (R8)(BX*4))
	VADDPS  Z13, Z2, Z2
	EXPSHIFT(64(R8)(BX*4), 64(R8)(BX*4))
	VADDPS  Z13, Z3, Z3
	EXPSHIFT(128(R8)(BX*4), 128(R8)(BX*4))
	VADDPS  Z13, Z4, Z4
	EXPSHIFT(192(R8)(BX*4), 192(R8)(BX*4))
	VADDPS  Z13, Z5, Z5
	MOVQ DX, BX
	JMP  exp4

exp1:
	CMPQ BX, CX
	JGE  summed
	EXPSHIFT((R8)(BX*4), (R8)(BX*4))
	VADDPS  Z13, Z2, Z2
	ADDQ $16, BX
	JMP  exp1

summed:
	VADDPS Z3, Z2, Z0
	VADDPS Z5, Z4, Z4
	VADDPS Z4, Z0, Z0
	HFOLD(VADDPS)
	VDIVSS X0, X29, X9            // 1/sum, rounded as Go's float32 division
	VBROADCASTSS X9, Z9
	XORQ BX, BX

scale:
	CMPQ BX, CX
	JGE  next
	VMULPS (R8)(BX*4), Z9, Z0
	STOREBF16(Z0, (DI)(BX*2))
	ADDQ $16, BX
	JMP  scale

next:
	LEAQ (SI)(CX*2), SI
	LEAQ (DI)(CX*2), DI
	DECQ R9
	JMP  row

done:
	VZEROUPPER
	RET

// func softmaxGradBF16AVX512(dx, y, dy *uint16, rows, n int, c *geluConsts)
// Each of rows rows: dx = y·(dy - Σ dy·y).
TEXT ·softmaxGradBF16AVX512(SB), NOSPLIT, $0-48
	MOVQ dx+0(FP), DI
	MOVQ y+8(FP), SI
	MOVQ dy+16(FP), R8
	MOVQ rows+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSS 48(AX), Z28      // abs mask, for STOREBF16
	LOADROUND

grow:
	TESTQ R9, R9
	JE    gdone
	// s = Σ dy·y with dotF32AVX512's four accumulators.
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	XORQ BX, BX

dot4:
	LEAQ 64(BX), DX
	CMPQ DX, CX
	JGT  dot1
	LOADBF16((R8)(BX*2), Z5)
	LOADBF16((SI)(BX*2), Z9)
	VFMADD231PS Z9, Z5, Z0
	LOADBF16(32(R8)(BX*2), Z6)
	LOADBF16(32(SI)(BX*2), Z9)
	VFMADD231PS Z9, Z6, Z2
	LOADBF16(64(R8)(BX*2), Z7)
	LOADBF16(64(SI)(BX*2), Z9)
	VFMADD231PS Z9, Z7, Z3
	LOADBF16(96(R8)(BX*2), Z8)
	LOADBF16(96(SI)(BX*2), Z9)
	VFMADD231PS Z9, Z8, Z4
	MOVQ DX, BX
	JMP  dot4

dot1:
	CMPQ BX, CX
	JGE  dotted
	LOADBF16((R8)(BX*2), Z5)
	LOADBF16((SI)(BX*2), Z9)
	VFMADD231PS Z9, Z5, Z0
	ADDQ $16, BX
	JMP  dot1

dotted:
	VADDPS Z2, Z0, Z0
	VADDPS Z4, Z3, Z3
	VADDPS Z3, Z0, Z0
	HFOLD(VADDPS)
	VBROADCASTSS X0, Z1
	XORQ BX, BX

grad:
	CMPQ BX, CX
	JGE  gnext
	LOADBF16((R8)(BX*2), Z6)
	VSUBPS Z1, Z6, Z6
	LOADBF16((SI)(BX*2), Z7)
	VMULPS Z7, Z6, Z6
	STOREBF16(Z6, (DI)(BX*2))
	ADDQ $16, BX
	JMP  grad

gnext:
	LEAQ (SI)(CX*2), SI
	LEAQ (DI)(CX*2), DI
	LEAQ (R8)(CX*2), R8
	DECQ R9
	JMP  grow

gdone:
	VZEROUPPER
	RET
