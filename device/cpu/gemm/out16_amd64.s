//go:build !purego

#include "textflag.h"

// ROUND rounds the 16 float32s of Z0 to bfloat16 into Y6, nearest-even,
// NaNs quiet (the integer method of the cpu package's conversion, so both
// round alike). Uses Z1-Z5, K3; constants Z20-Z24.
#define ROUND \
	VPSRLD  $16, Z0, Z1; \
	VPANDD  Z21, Z1, Z2; \
	VPADDD  Z20, Z0, Z3; \
	VPADDD  Z2, Z3, Z3; \
	VPSRLD  $16, Z3, Z3; \
	VPANDD  Z22, Z0, Z4; \
	VPCMPUD $6, Z23, Z4, K3; \
	VPORD   Z24, Z1, Z5; \
	VMOVDQA32 Z5, K3, Z3; \
	VPMOVDW Z3, Y6

// func tileBF16AVX512(c *uint16, ldc int, t *float32, ldt, rows, cols int, beta float32, withBeta bool)
// For each of rows rows: C[0:cols] = round(t[0:cols] + beta·C[0:cols]),
// cols <= 32, as two masked 16-lane halves.
TEXT ·tileBF16AVX512(SB), NOSPLIT, $0-53
	MOVQ c+0(FP), DI
	MOVQ ldc+8(FP), R8
	SHLQ $1, R8
	MOVQ t+16(FP), SI
	MOVQ ldt+24(FP), R9
	SHLQ $2, R9
	MOVQ rows+32(FP), R10
	MOVQ cols+40(FP), CX
	VBROADCASTSS beta+48(FP), Z25
	MOVBLZX withBeta+52(FP), R11

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

	// K1: lanes of the first half (min(cols, 16)); K2: of the second.
	// Shift counts must sit in CL, so cols moves to BX meanwhile.
	MOVQ CX, BX
	CMPQ CX, $16
	JLE  lo
	MOVQ $16, CX
lo:
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	MOVQ BX, CX
	SUBQ $16, CX
	JGT  hi
	XORL AX, AX
	JMP  mk2
hi:
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
mk2:
	KMOVW AX, K2

row:
	VMOVUPS.Z (SI), K1, Z0
	TESTQ R11, R11
	JZ   nob1
	VMOVDQU16.Z (DI), K1, Y7
	VPMOVZXWD Y7, Z7
	VPSLLD $16, Z7, Z7
	VFMADD231PS Z25, Z7, Z0
nob1:
	ROUND
	VMOVDQU16 Y6, K1, (DI)

	VMOVUPS.Z 64(SI), K2, Z0
	TESTQ R11, R11
	JZ   nob2
	VMOVDQU16.Z 32(DI), K2, Y7
	VPMOVZXWD Y7, Z7
	VPSLLD $16, Z7, Z7
	VFMADD231PS Z25, Z7, Z0
nob2:
	ROUND
	VMOVDQU16 Y6, K2, 32(DI)

	ADDQ R8, DI
	ADDQ R9, SI
	DECQ R10
	JNZ  row

	VZEROUPPER
	RET
