// Macros shared by the package's AVX-512 kernels (gelu_amd64.s,
// rowops_amd64.s, softmax_amd64.s).

// Constants (geluConsts), 4 bytes each: 0 log2(e), 4 1.5·2^23, 8 ln2hi,
// 12 ln2lo, 16..40 c7..c1, 44 1, 48 0x7fffffff, 52 int32 127,
// 56 -2·sqrt(2/pi), 60 -2k, 64 -87, 68 88, 72 2·sqrt(2/pi), 76 6k
// (k = 0.044715·sqrt(2/pi)), 80 0x7fff, 84 1, 88 0x7f800000, 92 0x40.
//
// Registers (LOADCONSTS, the exp constants): Z20 log2e, Z21 magic,
// Z22 ln2hi, Z23 ln2lo, Z24-Z27 c7-c4, Z16-Z18 c3-c1, Z29 1, Z28 abs
// mask, Z31 127.

#define LOADCONSTS \
	VBROADCASTSS 0(AX), Z20; \
	VBROADCASTSS 4(AX), Z21; \
	VBROADCASTSS 8(AX), Z22; \
	VBROADCASTSS 12(AX), Z23; \
	VBROADCASTSS 16(AX), Z24; \
	VBROADCASTSS 20(AX), Z25; \
	VBROADCASTSS 24(AX), Z26; \
	VBROADCASTSS 28(AX), Z27; \
	VBROADCASTSS 32(AX), Z16; \
	VBROADCASTSS 36(AX), Z17; \
	VBROADCASTSS 40(AX), Z18; \
	VBROADCASTSS 44(AX), Z29; \
	VBROADCASTSS 48(AX), Z28; \
	VBROADCASTSS 52(AX), Z31

// EXP computes Z13 = exp(x) for x in [-87.3, 88.3] (LOADCONSTS): n =
// round(x·log2 e) by adding 1.5·2^23, r = x - n·ln2 (x is overwritten by
// r), a degree-7 polynomial, and 2^n put into the exponent bits. Scratch:
// Z11, Z12.
#define EXP(x) \
	VMOVAPS Z21, Z11; \
	VFMADD231PS Z20, x, Z11; \
	VSUBPS  Z21, Z11, Z12; \
	VFNMADD231PS Z22, Z12, x; \
	VFNMADD231PS Z23, Z12, x; \
	VMOVAPS Z24, Z13; \
	VFMADD213PS Z25, x, Z13; \
	VFMADD213PS Z26, x, Z13; \
	VFMADD213PS Z27, x, Z13; \
	VFMADD213PS Z16, x, Z13; \
	VFMADD213PS Z17, x, Z13; \
	VFMADD213PS Z18, x, Z13; \
	VFMADD213PS Z29, x, Z13; \
	VPSUBD  Z21, Z11, Z11; \
	VPADDD  Z31, Z11, Z11; \
	VPSLLD  $23, Z11, Z11; \
	VMULPS  Z11, Z13, Z13

// EXPSHIFTZ10 sets Z13 to exp(Z10 - Z7), and to 0 where Z10 - Z7 is
// below -87.3 (Z6). Uses Z10-Z14, K1.
#define EXPSHIFTZ10 \
	VSUBPS  Z7, Z10, Z10; \
	VCMPPS  $1, Z6, Z10, K1; \
	VMAXPS  Z6, Z10, Z10; \
	EXP(Z10); \
	VPXORD  Z14, Z14, Z14; \
	VMOVAPS Z14, K1, Z13

// EXPSHIFT writes exp(x - Z7) of the 16 float32s at src to dst, and 0
// where x - Z7 is below -87.3 (Z6): softmax's numerators. Uses Z10-Z14, K1.
#define EXPSHIFT(src, dst) \
	VMOVUPS src, Z10; \
	EXPSHIFTZ10; \
	VMOVUPS Z13, dst

// EXPSHIFTMASK is EXPSHIFT on the lanes of K2 only (a row's last, partial
// vector): masked-off lanes are neither read (no fault past the row) nor
// written.
#define EXPSHIFTMASK(src, dst) \
	VMOVUPS.Z src, K2, Z10; \
	EXPSHIFTZ10; \
	VMOVUPS Z13, K2, dst

// HFOLD folds the 16 lanes of Z0 with OP into X0's lowest element.
#define HFOLD(OP) \
	VEXTRACTF64X4 $1, Z0, Y1; \
	OP Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	OP X1, X0, X0; \
	VPERMILPS $0x4e, X0, X1; \
	OP X1, X0, X0; \
	VPERMILPS $0xb1, X0, X1; \
	OP X1, X0, X0

// LOADBF16 widens 16 bfloat16s at addr into float32s in reg.
#define LOADBF16(addr, reg) \
	VPMOVZXWD addr, reg; \
	VPSLLD $16, reg, reg

// LOADROUND loads STOREBF16's constants: Z15 +inf bits, Z30 0x7fff.
#define LOADROUND \
	VBROADCASTSS 88(AX), Z15; \
	VBROADCASTSS 80(AX), Z30

// STOREBF16 rounds the float32s of src to 16 bfloat16s at addr,
// nearest-even, NaNs quiet: the package's conversion (convert_amd64.s), so
// a fused kernel rounds as a separate Copy would. Needs LOADCONSTS (Z28)
// and LOADROUND. Scratch: Z10-Z12, K1.
#define STOREBF16(src, addr) \
	VPSRLD $16, src, Z10; \
	VPANDD.BCST 84(AX), Z10, Z11; \
	VPADDD Z11, src, Z11; \
	VPADDD Z30, Z11, Z11; \
	VPSRLD $16, Z11, Z11; \
	VPANDD Z28, src, Z12; \
	VPCMPUD $6, Z15, Z12, K1; \
	VPORD.BCST 92(AX), Z10, K1, Z11; \
	VPMOVDW Z11, Y12; \
	VMOVDQU Y12, addr
