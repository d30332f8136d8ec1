//go:build !purego

#include "textflag.h"

// Hand-written decoders of quantized B operands (quant.go): groups of 16
// elements, each group with its own float32 scale, written as float32,
// bfloat16 or half precision by out (0, 1, 2).

// STORE writes the 16 float32s of Z4 at DI as out (R8) says and moves DI
// on (the jumps count instructions: keep them in step with the lines).
// Uses Z7, Z8, Y6; constants Z20 (0x7fff) and Z21 (1).
#define STORE \
	CMPQ R8, $1; \
	JEQ  5(PC); \
	JGT  11(PC); \
	VMOVUPS Z4, (DI); \
	ADDQ $64, DI; \
	JMP  11(PC); \
	VPSRLD $16, Z4, Z7; \
	VPANDD Z21, Z7, Z7; \
	VPADDD Z20, Z4, Z8; \
	VPADDD Z7, Z8, Z8; \
	VPSRLD $16, Z8, Z8; \
	VPMOVDW Z8, Y6; \
	JMP  2(PC); \
	VCVTPS2PH $0, Z4, Y6; \
	VMOVDQU Y6, (DI); \
	ADDQ $32, DI

// func nf4DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, levels *[16]float32, n16, out, ahead int)
// For group g < n16: dst[16g+i] = levels[code(16g+i)]·scales[g], where the
// codes are 8 bytes per group, element 2j in the high nibble of byte j.
// The bfloat16 rounding is nearest-even on finite values (the products
// of finite levels and scales are finite). Each group also prefetches
// the codes ahead bytes on (the rows a panel decodes next: the hardware
// prefetchers do not follow short runs at a row's stride).
TEXT ·nf4DecodeAVX512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ levels+24(FP), AX
	MOVQ n16+32(FP), CX
	MOVQ out+40(FP), R8
	MOVQ ahead+48(FP), R9
	VMOVUPS (AX), Z0
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X15
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z20
	MOVL $1, AX
	VPBROADCASTD AX, Z21

nloop:
	TESTQ CX, CX
	JZ    ndone
	PREFETCHT0 (SI)(R9*1)
	MOVQ  (SI), X1
	VPSRLW $4, X1, X5
	VPAND X15, X5, X5
	VPAND X15, X1, X1
	VPUNPCKLBW X1, X5, X3
	VPMOVZXBD X3, Z2
	VPERMPS Z0, Z2, Z4
	VBROADCASTSS (DX), Z5
	VMULPS Z5, Z4, Z4
	STORE
	ADDQ $8, SI
	ADDQ $4, DX
	DECQ CX
	JMP  nloop

ndone:
	VZEROUPPER
	RET

// func i8DecodeAVX512(dst unsafe.Pointer, codes *byte, scales *float32, n16, out, ahead int)
// For group g < n16: dst[16g+i] = float32(int8(codes[16g+i]))·scales[g],
// prefetching as nf4DecodeAVX512 does.
TEXT ·i8DecodeAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ n16+24(FP), CX
	MOVQ out+32(FP), R8
	MOVQ ahead+40(FP), R9
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z20
	MOVL $1, AX
	VPBROADCASTD AX, Z21

iloop:
	TESTQ CX, CX
	JZ    idone
	PREFETCHT0 (SI)(R9*1)
	VPMOVSXBD (SI), Z2
	VCVTDQ2PS Z2, Z4
	VBROADCASTSS (DX), Z5
	VMULPS Z5, Z4, Z4
	STORE
	ADDQ $16, SI
	ADDQ $4, DX
	DECQ CX
	JMP  iloop

idone:
	VZEROUPPER
	RET
