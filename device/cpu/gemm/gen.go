//go:build ignore

// gen writes kernel_amd64.s and transpose_amd64.s, the amd64
// micro-kernels and register transposes (the converting ones pack 16-bit
// operands for the float32 kernels). Run it with go generate (or
//
//	go run gen.go && gofmt -l . && go test .
//
// ); -o writes them into another directory, which is how
// TestGeneratedAssemblyIsCurrent checks that the committed files are what
// gen.go makes.
//
// The kernels are fully unrolled over the register tile, so writing them
// by hand would be long and error-prone; this program is their source.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

var out bytes.Buffer

func p(format string, args ...any) { fmt.Fprintf(&out, "\t"+format+"\n", args...) }
func label(l string)               { fmt.Fprintf(&out, "%s:\n", l) }

// kernel describes one register-tile micro-kernel.
type kernel struct {
	name   string
	mr     int    // rows of the tile
	vecs   int    // vectors per row (nr = vecs*lanes)
	reg    string // "Z" or "Y"
	vbytes int    // bytes per vector
	bf16   bool   // VDPBF16PS on bf16 pairs instead of VFMADD231PS on float32
	unroll int
	pfA    int  // prefetch distance for A in bytes (0: none)
	bcst   bool // FMA with an embedded-broadcast memory operand (no broadcast register)
	to16   bool // C is bfloat16: the tile is rounded (nearest even) as it is written
}

func (k kernel) acc(i, v int) string { return fmt.Sprintf("%s%d", k.reg, i*k.vecs+v) }

func (k kernel) bReg(v int) int { return k.mr*k.vecs + v }

func (k kernel) bcReg(i int) int { return k.mr*k.vecs + k.vecs + i%2 }

// vdpbf16ps returns the EVEX encoding of vdpbf16ps zmm(src2), zmm(src1), zmm(dst)
// (AT&T order; dst += pairwise bf16 dot of src1 and src2): EVEX.512.F3.0F38.W0 52 /r.
func vdpbf16ps(src2, src1, dst int) []byte {
	inv := func(b int) byte { return byte(^b & 1) }
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | 0b0010
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0b10
	p2 := byte(0b10<<5) | inv(src1>>4)<<3
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0x62, p0, p1, p2, 0x52, modrm}
}

func (k kernel) step(u int) {
	lanesBytes := k.vecs * k.vbytes
	for v := 0; v < k.vecs; v++ {
		p("VMOVUPS %d(BX), %s%d", u*lanesBytes+v*k.vbytes, k.reg, k.bReg(v))
	}
	for i := 0; i < k.mr; i++ {
		bc := k.bcReg(i)
		if k.bcst {
			for v := 0; v < k.vecs; v++ {
				p("VFMADD231PS.BCST %d(AX), %s%d, %s", (u*k.mr+i)*4, k.reg, k.bReg(v), k.acc(i, v))
			}
			continue
		}
		if k.bf16 {
			p("VPBROADCASTD %d(AX), Z%d", (u*k.mr+i)*4, bc)
		} else {
			p("VBROADCASTSS %d(AX), %s%d", (u*k.mr+i)*4, k.reg, bc)
		}
		for v := 0; v < k.vecs; v++ {
			dst := i*k.vecs + v
			if k.bf16 {
				enc := vdpbf16ps(k.bReg(v), bc, dst)
				s := ""
				for j, b := range enc {
					if j > 0 {
						s += "; "
					}
					s += fmt.Sprintf("BYTE $0x%02x", b)
				}
				p("%s // VDPBF16PS Z%d, Z%d, Z%d", s, k.bReg(v), bc, dst)
			} else {
				p("VFMADD231PS %s%d, %s%d, %s", k.reg, k.bReg(v), k.reg, bc, k.acc(i, v))
			}
		}
	}
}

func (k kernel) emit() {
	nr := k.vecs * k.vbytes / 4
	elem, celem, csize := "float32", "float32", 4
	if k.bf16 {
		elem = "uint16"
	}
	if k.to16 {
		celem, csize = "uint16", 2
	}
	fmt.Fprintf(&out, "\n// func %s(kq int, a, b *%s, c *%s, ldc int, alpha, beta float32)\n", k.name, elem, celem)
	if k.to16 {
		fmt.Fprintf(&out, "// %d×%d tile: C = round(alpha*A*B + beta*C) into bfloat16 (beta == 0: C is not read).\n", k.mr, nr)
	} else {
		fmt.Fprintf(&out, "// %d×%d tile: C = alpha*A*B + beta*C (beta == 0: C = alpha*A*B).\n", k.mr, nr)
	}
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-48\n", k.name)
	p("MOVQ kq+0(FP), CX")
	p("MOVQ a+8(FP), AX")
	p("MOVQ b+16(FP), BX")
	p("MOVQ c+24(FP), DI")
	p("MOVQ ldc+32(FP), R8")
	if k.to16 {
		p("SHLQ $1, R8")
	} else {
		p("SHLQ $2, R8")
	}
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.vecs; v++ {
			a := k.acc(i, v)
			if k.reg == "Z" {
				p("VPXORD %s, %s, %s", a, a, a)
			} else {
				p("VPXOR %s, %s, %s", a, a, a)
			}
		}
	}
	// Prefetch the C tile: it is read (or written) after the loop.
	p("MOVQ DI, R9")
	for i := 0; i < k.mr; i++ {
		for off := 0; off < nr*csize; off += 64 {
			p("PREFETCHT0 %d(R9)", off)
		}
		p("ADDQ R8, R9")
	}
	stepA := k.mr * 4
	stepB := k.vecs * k.vbytes
	label(k.name + "_loop")
	p("CMPQ CX, $%d", k.unroll)
	p("JL %s_tail", k.name)
	for u := 0; u < k.unroll; u++ {
		if k.pfA > 0 {
			p("PREFETCHT0 %d(AX)", k.pfA+u*stepA)
		}
		k.step(u)
	}
	p("ADDQ $%d, AX", k.unroll*stepA)
	p("ADDQ $%d, BX", k.unroll*stepB)
	p("SUBQ $%d, CX", k.unroll)
	p("JMP %s_loop", k.name)
	label(k.name + "_tail")
	p("TESTQ CX, CX")
	p("JE %s_update", k.name)
	k.step(0)
	p("ADDQ $%d, AX", stepA)
	p("ADDQ $%d, BX", stepB)
	p("DECQ CX")
	p("JMP %s_tail", k.name)

	label(k.name + "_update")
	if k.to16 {
		k.update16()
		return
	}
	al, be := fmt.Sprintf("%s%d", k.reg, k.bReg(0)), fmt.Sprintf("%s%d", k.reg, k.bReg(1))
	p("VBROADCASTSS alpha+40(FP), %s", al)
	p("MOVL beta+44(FP), DX")
	p("ANDL $0x7fffffff, DX") // -0 counts as zero
	p("JZ %s_overwrite", k.name)
	p("VBROADCASTSS beta+44(FP), %s", be)
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.vecs; v++ {
			a := k.acc(i, v)
			p("VMULPS %s, %s, %s", al, a, a)
			p("VFMADD231PS %d(DI), %s, %s", v*k.vbytes, be, a)
			p("VMOVUPS %s, %d(DI)", a, v*k.vbytes)
		}
		if i < k.mr-1 {
			p("ADDQ R8, DI")
		}
	}
	p("VZEROUPPER")
	p("RET")
	label(k.name + "_overwrite")
	for i := 0; i < k.mr; i++ {
		for v := 0; v < k.vecs; v++ {
			a := k.acc(i, v)
			p("VMULPS %s, %s, %s", al, a, a)
			p("VMOVUPS %s, %d(DI)", a, v*k.vbytes)
		}
		if i < k.mr-1 {
			p("ADDQ R8, DI")
		}
	}
	p("VZEROUPPER")
	p("RET")
}

// update16 writes the tile into a bfloat16 C: alpha·acc (+ beta·C) rounded
// to nearest even with NaNs kept quiet, the integer method of the cpu
// package's conversion and of tileBF16AVX512, so a tile rounds alike
// whichever path writes it. The constants come from memory (bf16c<>) by
// embedded broadcast: only the four B and broadcast registers are free.
func (k kernel) update16() {
	al, be, t0, t1 := "Z28", "Z29", "Z30", "Z31"
	p("VBROADCASTSS alpha+40(FP), %s", al)
	p("VBROADCASTSS beta+44(FP), %s", be)
	p("MOVL beta+44(FP), DX")
	p("ANDL $0x7fffffff, DX") // -0 counts as zero
	for _, withBeta := range []bool{true, false} {
		if withBeta {
			p("JZ %s_overwrite", k.name)
		} else {
			label(k.name + "_overwrite")
		}
		for i := 0; i < k.mr; i++ {
			for v := 0; v < k.vecs; v++ {
				a := k.acc(i, v)
				off := v * 32 // 16 bfloat16s per vector
				p("VMULPS %s, %s, %s", al, a, a)
				if withBeta {
					p("VPMOVZXWD %d(DI), %s", off, t0)
					p("VPSLLD $16, %s, %s", t0, t0)
					p("VFMADD231PS %s, %s, %s", be, t0, a)
				}
				p("VPSRLD $16, %s, %s", a, t0)                  // high half
				p("VPANDD.BCST bf16c<>+0(SB), %s, %s", t0, t1)  // its lowest bit
				p("VPADDD %s, %s, %s", a, t1, t1)               // x + lsb
				p("VPADDD.BCST bf16c<>+4(SB), %s, %s", t1, t1)  // + 0x7fff
				p("VPSRLD $16, %s, %s", t1, t1)                 // rounded
				p("VPANDD.BCST bf16c<>+8(SB), %s, %s", a, a)    // |x|
				p("VPCMPUD.BCST $6, bf16c<>+12(SB), %s, K1", a) // NaN: |x| > +inf
				p("VPORD.BCST bf16c<>+16(SB), %s, K1, %s", t0, t1)
				p("VPMOVDW %s, Y30", t1)
				p("VMOVDQU32 Y30, %d(DI)", off)
			}
			if i < k.mr-1 {
				p("ADDQ R8, DI")
			}
		}
		p("VZEROUPPER")
		p("RET")
	}
}

// transposer is one of the register transposes emit writes: it
// loads 16 source values per row as float32, converting 16-bit ones.
type transposer struct {
	name string
	elem string   // Go type of the source elements
	load []string // instructions loading row i's 16 values into Z<i> (%[1]d: i)
}

var transposers = []transposer{
	{"transpose16F32", "float32", []string{"VMOVUPS (R9)(DX*4), Z%[1]d"}},
	// A bfloat16 is the high half of the float32 it stands for.
	{"transpose16BF16", "uint16", []string{"VPMOVZXWD (R9)(DX*2), Z%[1]d", "VPSLLD $16, Z%[1]d, Z%[1]d"}},
	// VCVTPH2PS converts every half exactly, subnormals included.
	{"transpose16F16", "uint16", []string{"VCVTPH2PS (R9)(DX*2), Z%[1]d"}},
}

// transpose emits t, which packs 16 rows × 16k columns into k-major
// float32 panels with 16×16 register transposes.
func (t transposer) emit() {
	fmt.Fprintf(&out, "\n// func %s(dst *float32, rows *[16]*%s, kc16, dstStride int, smask uint16)\n", t.name, t.elem)
	fmt.Fprintf(&out, "// For each of kc16 blocks of 16 columns: dst[(p+c)*dstStride+i] = rows[i][p+c] for i in smask.\n")
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-34\n", t.name)
	p("MOVQ dst+0(FP), DI")
	p("MOVQ rows+8(FP), AX")
	p("MOVQ kc16+16(FP), CX")
	p("MOVQ dstStride+24(FP), R8")
	p("SHLQ $2, R8")
	p("MOVWLZX smask+32(FP), BX")
	p("KMOVW BX, K1")
	p("XORQ DX, DX") // column offset in elements
	label("tr_loop")
	p("TESTQ CX, CX")
	p("JE tr_done")
	for i := 0; i < 16; i++ {
		p("MOVQ %d(AX), R9", i*8)
		for _, l := range t.load {
			p(l, i)
		}
	}
	// Stage 1: interleave 32-bit elements of row pairs.
	for j := 0; j < 8; j++ {
		p("VUNPCKLPS Z%d, Z%d, Z%d", 2*j+1, 2*j, 16+2*j)
		p("VUNPCKHPS Z%d, Z%d, Z%d", 2*j+1, 2*j, 16+2*j+1)
	}
	// Stage 2: interleave 64-bit pairs: u[4j+q] holds column 4L+q of rows 4j..4j+3 in 128-bit lane L.
	for j := 0; j < 4; j++ {
		t := 16 + 4*j
		p("VUNPCKLPD Z%d, Z%d, Z%d", t+2, t, 4*j)
		p("VUNPCKHPD Z%d, Z%d, Z%d", t+2, t, 4*j+1)
		p("VUNPCKLPD Z%d, Z%d, Z%d", t+3, t+1, 4*j+2)
		p("VUNPCKHPD Z%d, Z%d, Z%d", t+3, t+1, 4*j+3)
	}
	// Stages 3-4: gather the 128-bit lanes; store column c to dst+c*stride.
	for q := 0; q < 4; q++ {
		p("VSHUFF32X4 $0x44, Z%d, Z%d, Z16", 4+q, q)
		p("VSHUFF32X4 $0xEE, Z%d, Z%d, Z17", 4+q, q)
		p("VSHUFF32X4 $0x44, Z%d, Z%d, Z18", 12+q, 8+q)
		p("VSHUFF32X4 $0xEE, Z%d, Z%d, Z19", 12+q, 8+q)
		p("VSHUFF32X4 $0x88, Z18, Z16, Z20")
		p("VSHUFF32X4 $0xDD, Z18, Z16, Z21")
		p("VSHUFF32X4 $0x88, Z19, Z17, Z22")
		p("VSHUFF32X4 $0xDD, Z19, Z17, Z23")
		for L := 0; L < 4; L++ {
			c := 4*L + q
			p("MOVQ $%d, R10", c)
			p("IMULQ R8, R10")
			p("VMOVUPS Z%d, K1, (DI)(R10*1)", 20+L)
		}
	}
	p("ADDQ $16, DX")
	p("MOVQ R8, R10")
	p("SHLQ $4, R10")
	p("ADDQ R10, DI")
	p("DECQ CX")
	p("JMP tr_loop")
	label("tr_done")
	p("VZEROUPPER")
	p("RET")
}

func main() {
	dir := flag.String("o", ".", "directory to write the assembly files into")
	flag.Parse()
	out.WriteString("// Code generated by gen.go; DO NOT EDIT.\n\n//go:build !purego\n\n#include \"textflag.h\"\n")
	// On this Zen 5 (1 zmm FMA/cycle in practice) 14×32, 12×32, 8×48 and
	// 6×64 tiles, with and without embedded-broadcast FMAs, all ran within
	// 3% of each other in L1; 14×32 with VBROADCASTSS is kept.
	kernels := []kernel{
		{name: "kernF32AVX512", mr: 14, vecs: 2, reg: "Z", vbytes: 64, unroll: 4, pfA: 512},
		{name: "kernF32AVX2", mr: 6, vecs: 2, reg: "Y", vbytes: 32, unroll: 4, pfA: 256},
		{name: "kernBF16AVX512", mr: 14, vecs: 2, reg: "Z", vbytes: 64, bf16: true, unroll: 4, pfA: 512},
		{name: "kernBF16AVX512To16", mr: 14, vecs: 2, reg: "Z", vbytes: 64, bf16: true, unroll: 4, pfA: 512, to16: true},
	}
	// bf16c: update16's rounding constants: 1, 0x7fff, the absolute value
	// mask, +inf, a bfloat16 NaN's quiet bit.
	for i, v := range []uint32{1, 0x7fff, 0x7fffffff, 0x7f800000, 0x40} {
		fmt.Fprintf(&out, "DATA bf16c<>+%d(SB)/4, $0x%x\n", 4*i, v)
	}
	out.WriteString("GLOBL bf16c<>(SB), RODATA|NOPTR, $20\n")
	for _, k := range kernels {
		k.emit()
	}
	if err := os.WriteFile(filepath.Join(*dir, "kernel_amd64.s"), out.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out.Reset()
	out.WriteString("// Code generated by gen.go; DO NOT EDIT.\n\n//go:build !purego\n\n#include \"textflag.h\"\n")
	for _, t := range transposers {
		t.emit()
	}
	if err := os.WriteFile(filepath.Join(*dir, "transpose_amd64.s"), out.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
