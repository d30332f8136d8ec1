//go:build !purego

#include "textflag.h"
#include "fastmath_amd64.h"

// Row primitives of the softmax kernels. Every function takes n, a
// multiple of 16 and at least 16; the Go wrappers do the tails. The
// reductions keep four accumulators so that consecutive vector operations
// do not wait on each other, then fold the lanes.

// func maxF32AVX512(x *float32, n int) float32
TEXT ·maxF32AVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Z0
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	VMOVAPS Z0, Z4
	MOVQ $16, BX

mloop4:
	LEAQ 64(BX), DX
	CMPQ DX, CX
	JGT  mloop1
	VMAXPS (SI)(BX*4), Z0, Z0
	VMAXPS 64(SI)(BX*4), Z2, Z2
	VMAXPS 128(SI)(BX*4), Z3, Z3
	VMAXPS 192(SI)(BX*4), Z4, Z4
	MOVQ DX, BX
	JMP  mloop4

mloop1:
	CMPQ BX, CX
	JGE  mdone
	VMAXPS (SI)(BX*4), Z0, Z0
	ADDQ $16, BX
	JMP  mloop1

mdone:
	VMAXPS Z2, Z0, Z0
	VMAXPS Z4, Z3, Z3
	VMAXPS Z3, Z0, Z0
	HFOLD(VMAXPS)
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func sumF32AVX512(x *float32, n int) float32
TEXT ·sumF32AVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	XORQ BX, BX

sloop4:
	LEAQ 64(BX), DX
	CMPQ DX, CX
	JGT  sloop1
	VADDPS (SI)(BX*4), Z0, Z0
	VADDPS 64(SI)(BX*4), Z2, Z2
	VADDPS 128(SI)(BX*4), Z3, Z3
	VADDPS 192(SI)(BX*4), Z4, Z4
	MOVQ DX, BX
	JMP  sloop4

sloop1:
	CMPQ BX, CX
	JGE  sdone
	VADDPS (SI)(BX*4), Z0, Z0
	ADDQ $16, BX
	JMP  sloop1

sdone:
	VADDPS Z2, Z0, Z0
	VADDPS Z4, Z3, Z3
	VADDPS Z3, Z0, Z0
	HFOLD(VADDPS)
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func dotF32AVX512(a, b *float32, n int) float32
TEXT ·dotF32AVX512(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	XORQ BX, BX

dloop4:
	LEAQ 64(BX), DX
	CMPQ DX, CX
	JGT  dloop1
	VMOVUPS (SI)(BX*4), Z5
	VMOVUPS 64(SI)(BX*4), Z6
	VMOVUPS 128(SI)(BX*4), Z7
	VMOVUPS 192(SI)(BX*4), Z8
	VFMADD231PS (DI)(BX*4), Z5, Z0
	VFMADD231PS 64(DI)(BX*4), Z6, Z2
	VFMADD231PS 128(DI)(BX*4), Z7, Z3
	VFMADD231PS 192(DI)(BX*4), Z8, Z4
	MOVQ DX, BX
	JMP  dloop4

dloop1:
	CMPQ BX, CX
	JGE  ddone
	VMOVUPS (SI)(BX*4), Z5
	VFMADD231PS (DI)(BX*4), Z5, Z0
	ADDQ $16, BX
	JMP  dloop1

ddone:
	VADDPS Z2, Z0, Z0
	VADDPS Z4, Z3, Z3
	VADDPS Z3, Z0, Z0
	HFOLD(VADDPS)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func scaleF32AVX512(y *float32, n int, s float32)
// y *= s.
TEXT ·scaleF32AVX512(SB), NOSPLIT, $0-20
	MOVQ y+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Z1
	XORQ BX, BX

cloop:
	CMPQ BX, CX
	JGE  cdone
	VMULPS (DI)(BX*4), Z1, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ $16, BX
	JMP  cloop

cdone:
	VZEROUPPER
	RET

// func softmaxGradF32AVX512(out, y, gr *float32, n int, s float32)
// out = y·(gr - s).
TEXT ·softmaxGradF32AVX512(SB), NOSPLIT, $0-36
	MOVQ out+0(FP), DI
	MOVQ y+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z1
	XORQ BX, BX

gloop:
	CMPQ BX, CX
	JGE  gdone
	VMOVUPS (DX)(BX*4), Z0
	VSUBPS Z1, Z0, Z0
	VMULPS (SI)(BX*4), Z0, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ $16, BX
	JMP  gloop

gdone:
	VZEROUPPER
	RET

// func sumSqDevF32AVX512(x *float32, n int, mu float32) float32
// Σ (x - mu)².
TEXT ·sumSqDevF32AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mu+16(FP), Z1
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	XORQ BX, BX

vloop2:
	LEAQ 32(BX), DX
	CMPQ DX, CX
	JGT  vloop1
	VSUBPS (SI)(BX*4), Z1, Z5
	VSUBPS 64(SI)(BX*4), Z1, Z6
	VFMADD231PS Z5, Z5, Z0
	VFMADD231PS Z6, Z6, Z2
	MOVQ DX, BX
	JMP  vloop2

vloop1:
	CMPQ BX, CX
	JGE  vdone
	VSUBPS (SI)(BX*4), Z1, Z5
	VFMADD231PS Z5, Z5, Z0
	ADDQ $16, BX
	JMP  vloop1

vdone:
	VADDPS Z2, Z0, Z0
	HFOLD(VADDPS)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func lnApplyF32AVX512(y, x, gm, bt *float32, n int, mu, rs float32)
// y = (x - mu)·rs·gm + bt.
TEXT ·lnApplyF32AVX512(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gm+16(FP), R8
	MOVQ bt+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS mu+40(FP), Z1
	VBROADCASTSS rs+44(FP), Z2
	XORQ BX, BX

aloop:
	CMPQ BX, CX
	JGE  adone
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS Z1, Z0, Z0
	VMULPS Z2, Z0, Z0
	VMOVUPS (R9)(BX*4), Z3
	VFMADD231PS (R8)(BX*4), Z0, Z3
	VMOVUPS Z3, (DI)(BX*4)
	ADDQ $16, BX
	JMP  aloop

adone:
	VZEROUPPER
	RET

// func lnGradStatsF32AVX512(x, gr, gm, dg, db *float32, n int, mu, rs float32, s *[2]float32)
// With xhat = (x - mu)·rs and gg = gr·gm: s[0] = Σ gg, s[1] = Σ gg·xhat,
// and dg += gr·xhat, db += gr element by element.
TEXT ·lnGradStatsF32AVX512(SB), NOSPLIT, $0-64
	MOVQ x+0(FP), SI
	MOVQ gr+8(FP), DX
	MOVQ gm+16(FP), R8
	MOVQ dg+24(FP), R9
	MOVQ db+32(FP), R10
	MOVQ n+40(FP), CX
	VBROADCASTSS mu+48(FP), Z1
	VBROADCASTSS rs+52(FP), Z2
	MOVQ s+56(FP), AX
	VPXORD Z3, Z3, Z3             // Σ gg
	VPXORD Z4, Z4, Z4             // Σ gg·xhat
	XORQ BX, BX

tloop:
	CMPQ BX, CX
	JGE  tdone
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS Z1, Z0, Z0
	VMULPS Z2, Z0, Z0             // xhat
	VMOVUPS (DX)(BX*4), Z5        // gr
	VMULPS (R8)(BX*4), Z5, Z6     // gg
	VADDPS Z6, Z3, Z3
	VFMADD231PS Z6, Z0, Z4
	VMOVUPS (R9)(BX*4), Z7
	VFMADD231PS Z5, Z0, Z7
	VMOVUPS Z7, (R9)(BX*4)
	VADDPS (R10)(BX*4), Z5, Z7
	VMOVUPS Z7, (R10)(BX*4)
	ADDQ $16, BX
	JMP  tloop

tdone:
	VMOVAPS Z3, Z0
	HFOLD(VADDPS)
	VMOVSS X0, 0(AX)
	VMOVAPS Z4, Z0
	HFOLD(VADDPS)
	VMOVSS X0, 4(AX)
	VZEROUPPER
	RET

// func lnGradDxF32AVX512(out, x, gr, gm *float32, n int, mu, rs, a, b float32)
// out = rs·(gr·gm - a - (x - mu)·rs·b).
TEXT ·lnGradDxF32AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gr+16(FP), DX
	MOVQ gm+24(FP), R8
	MOVQ n+32(FP), CX
	VBROADCASTSS mu+40(FP), Z1
	VBROADCASTSS rs+44(FP), Z2
	VBROADCASTSS a+48(FP), Z3
	VBROADCASTSS b+52(FP), Z4
	XORQ BX, BX

xloop:
	CMPQ BX, CX
	JGE  xdone
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS Z1, Z0, Z0
	VMULPS Z2, Z0, Z0             // xhat
	VMOVUPS (DX)(BX*4), Z5
	VMULPS (R8)(BX*4), Z5, Z5     // gg
	VSUBPS Z3, Z5, Z5             // gg - a
	VFNMADD231PS Z4, Z0, Z5       // - xhat·b
	VMULPS Z2, Z5, Z5
	VMOVUPS Z5, (DI)(BX*4)
	ADDQ $16, BX
	JMP  xloop

xdone:
	VZEROUPPER
	RET

// func binaryF32AVX512(op int, y, a, b *float32, n int)
// y = a op b for op 0 (add), 1 (sub), 2 (mul).
TEXT ·binaryF32AVX512(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), AX
	MOVQ y+8(FP), DI
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), DX
	MOVQ n+32(FP), CX
	XORQ BX, BX
	CMPQ AX, $1
	JEQ  subloop
	JGT  mulloop

addloop:
	CMPQ BX, CX
	JGE  bdone
	VMOVUPS (SI)(BX*4), Z0
	VADDPS (DX)(BX*4), Z0, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ $16, BX
	JMP  addloop

subloop:
	CMPQ BX, CX
	JGE  bdone
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS (DX)(BX*4), Z0, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ $16, BX
	JMP  subloop

mulloop:
	CMPQ BX, CX
	JGE  bdone
	VMOVUPS (SI)(BX*4), Z0
	VMULPS (DX)(BX*4), Z0, Z0
	VMOVUPS Z0, (DI)(BX*4)
	ADDQ $16, BX
	JMP  mulloop

bdone:
	VZEROUPPER
	RET

// func binaryBF16AVX512(op int, y, a, b *uint16, n int)
// y = a op b on bfloat16 bits for op 0 (add), 1 (sub), 2 (mul): widened
// exactly, combined in float32, rounded to nearest even (NaNs quiet), as
// the converting path does. n is a multiple of 16.
TEXT ·binaryBF16AVX512(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), AX
	MOVQ y+8(FP), DI
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), DX
	MOVQ n+32(FP), CX
	MOVL $0x7fff, R8
	VPBROADCASTD R8, Z20          // rounding bias
	MOVL $1, R8
	VPBROADCASTD R8, Z21          // 1
	MOVL $0x7fffffff, R8
	VPBROADCASTD R8, Z22          // abs mask
	MOVL $0x7f800000, R8
	VPBROADCASTD R8, Z23          // +inf
	MOVL $0x40, R8
	VPBROADCASTD R8, Z24          // quiet bit of a bf16 NaN
	XORQ BX, BX

hloop:
	CMPQ BX, CX
	JGE  hdone
	VPMOVZXWD (SI)(BX*2), Z0
	VPSLLD $16, Z0, Z0
	VPMOVZXWD (DX)(BX*2), Z7
	VPSLLD $16, Z7, Z7
	CMPQ AX, $1
	JEQ  hsub
	JGT  hmul
	VADDPS Z7, Z0, Z0
	JMP  hround
hsub:
	VSUBPS Z7, Z0, Z0
	JMP  hround
hmul:
	VMULPS Z7, Z0, Z0
hround:
	VPSRLD  $16, Z0, Z1
	VPANDD  Z21, Z1, Z2
	VPADDD  Z20, Z0, Z3
	VPADDD  Z2, Z3, Z3
	VPSRLD  $16, Z3, Z3
	VPANDD  Z22, Z0, Z4
	VPCMPUD $6, Z23, Z4, K1
	VPORD   Z24, Z1, Z5
	VMOVDQA32 Z5, K1, Z3
	VPMOVDW Z3, Y6
	VMOVDQU Y6, (DI)(BX*2)
	ADDQ $16, BX
	JMP  hloop

hdone:
	VZEROUPPER
	RET
