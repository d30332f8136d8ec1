package gemm

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/x448/float16"
)

// Products with a quantized B (a frozen weight in device's NF4 or Int8
// format): op(B) is decoded while it is packed, a panel of nr columns of
// op(B) at a time into a small staging matrix in the product's own source
// format (float32, bfloat16, half or float64 values, each rounded once
// from its float32 definition), which the engine's own packer then packs
// as it packs any operand of that format. So B is read as codes (half a
// byte or a byte per element), no dequantized copy of the weight exists,
// and the staging lives in the engine's pooled workspace (at most nr×kc
// values: 96 KiB for a bfloat16 panel of 32×1536).

// QuantFormat names a block-quantized format.
type QuantFormat uint8

// The formats (device/quant4.go and device/quantint8.go define them).
const (
	// NF4: 4-bit codes, two per byte (element 2i in the high nibble of
	// byte i), each block's scale held as an 8-bit code of a nested
	// quantization: value = Levels[code]·(Map[AbsmaxCodes[b]]·Nested[b/256]
	// + Offset), every product and sum rounded to float32.
	NF4 QuantFormat = iota + 1
	// Int8: one signed byte per element: value = code·(Absmax[b]/127).
	Int8
)

// QuantBlock is the number of consecutive elements (row-major) sharing a
// scale; NF4's nested scales cover quantNested blocks each.
const (
	QuantBlock  = 64
	quantNested = 256
)

// Quant is a row-major Rows×Cols matrix in a quantized format, read as
// the B operand of the quantized products. A Quant is only read.
type Quant struct {
	Format      QuantFormat
	Rows, Cols  int
	Codes       []byte
	Absmax      []float32     // Int8: one per block
	AbsmaxCodes []byte        // NF4: one per block
	Nested      []float32     // NF4: one per 256 blocks
	Offset      float32       // NF4
	Levels      *[16]float32  // NF4: the code values
	Map         *[256]float32 // NF4: the absmax codes' values
}

// blocks is the number of scale blocks.
func (q *Quant) blocks() int { return (q.Rows*q.Cols + QuantBlock - 1) / QuantBlock }

// check panics unless q's slices fit its shape.
func (q *Quant) check(fn string) {
	n, nb := q.Rows*q.Cols, q.blocks()
	ok := q.Rows >= 0 && q.Cols >= 0
	switch q.Format {
	case NF4:
		ok = ok && len(q.Codes) >= (n+1)/2 && len(q.AbsmaxCodes) >= nb && len(q.Nested) >= (nb+quantNested-1)/quantNested &&
			q.Levels != nil && q.Map != nil
	case Int8:
		ok = ok && len(q.Codes) >= n && len(q.Absmax) >= nb
	default:
		ok = false
	}
	if !ok {
		panic(fmt.Sprintf("gemm: %s: a %d×%d quantized B (format %d) with %d code bytes, %d scales, %d absmax codes, %d nested scales",
			fn, q.Rows, q.Cols, q.Format, len(q.Codes), len(q.Absmax), len(q.AbsmaxCodes), len(q.Nested)))
	}
}

// scale returns block b's scale: NF4's absmax, Int8's step absmax/127.
func (q *Quant) scale(b int) float32 {
	if q.Format == NF4 {
		// Rounded after the product, before the sum: no fused multiply-add.
		return float32(q.Map[q.AbsmaxCodes[b]]*q.Nested[b/quantNested]) + q.Offset
	}
	return q.Absmax[b] / 127
}

// value returns flat element i in float32.
func (q *Quant) value(i int) float32 {
	if q.Format == NF4 {
		c := q.Codes[i>>1]
		if i&1 == 0 {
			c >>= 4
		}
		return float32(q.Levels[c&15] * q.scale(i/QuantBlock))
	}
	return float32(float32(int8(q.Codes[i])) * q.scale(i/QuantBlock))
}

// qtarget is the format decoded values are written in.
type qtarget uint8

const (
	qF32 qtarget = iota
	qBF16
	qF16
	qF64
)

// bf16Round rounds a finite float32 to bfloat16, to nearest even.
func bf16Round(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// put writes v into dst[i] in format t.
func put[S float32 | float64 | uint16](dst []S, i int, v float32, t qtarget) {
	switch d := any(dst).(type) {
	case []float32:
		d[i] = v
	case []float64:
		d[i] = float64(v)
	case []uint16:
		if t == qBF16 {
			d[i] = bf16Round(v)
		} else {
			d[i] = float16.Fromfloat32(v).Bits()
		}
	}
}

// decode writes the len(dst) elements of q from flat index f into dst,
// in format t: whole groups of 16 (which never straddle a block) with
// AVX-512 where the CPU has it, the rest one by one. The vector path
// prefetches the codes of the elements ahead positions on (0: the next
// groups'), which the caller decodes next.
func decode[S float32 | float64 | uint16](dst []S, q *Quant, t qtarget, f, ahead int) {
	n, i := len(dst), 0
	if t != qF64 && hasQuantAVX512 && n >= 16 {
		for ; i < n && (f+i)%16 != 0; i++ {
			put(dst, i, q.value(f+i), t)
		}
		i += decodeVector(unsafe.Pointer(unsafe.SliceData(dst[i:])), (n-i)/16, q, t, f+i, ahead)
	}
	for ; i < n; i++ {
		put(dst, i, q.value(f+i), t)
	}
}

// decodeVector decodes g groups of 16 elements from flat index f (a
// multiple of 16) into dst with the vector kernels, a batch of groups
// at a time with their scales gathered first, and returns 16·g.
func decodeVector(dst unsafe.Pointer, g int, q *Quant, t qtarget, f, ahead int) int {
	if ahead <= 0 {
		ahead = 16 * 64 // the next batch's
	}
	if q.Format == NF4 {
		ahead /= 2
	}
	const batch = 64
	var sc [batch]float32
	size := uintptr(4)
	if t != qF32 {
		size = 2
	}
	for g0 := 0; g0 < g; g0 += batch {
		gb := min(batch, g-g0)
		for j := range gb {
			sc[j] = q.scale((f + 16*(g0+j)) / QuantBlock)
		}
		p := unsafe.Add(dst, uintptr(16*g0)*size)
		at := f + 16*g0
		if q.Format == NF4 {
			_ = q.Codes[(at+16*gb)/2-1]
			nf4DecodeAVX512(p, &q.Codes[at/2], &sc[0], q.Levels, gb, int(t), ahead)
		} else {
			_ = q.Codes[at+16*gb-1]
			i8DecodeAVX512(p, &q.Codes[at], &sc[0], gb, int(t), ahead)
		}
	}
	return 16 * g
}

// quantB is a product's quantized B, as the driver's region carries it:
// the matrix, the format its values are staged in, and whether op(B) is
// its transpose.
type quantB struct {
	q      *Quant
	t      qtarget
	transB bool
}

// stage returns ws's staging buffer viewed as n elements of S.
func stage[S, D any, C float32 | float64](ws *workspace[D, C], n int) []S {
	var s S
	size := int(unsafe.Sizeof(s))
	ws.stage = grow(ws.stage, n*size+8)
	// Aligned to S (the byte slice's start is at least 8-aligned).
	return unsafe.Slice((*S)(unsafe.Pointer(unsafe.SliceData(ws.stage))), n)
}

// packQuant packs columns j0…j0+nc of op(B), k from pc to pc+kc, into
// ws.b's panels (kcp values per panel row): each panel of nr columns is
// decoded into staging in S's format and packed by the engine's packer.
// Column j of op(B) is row j of the stored matrix when op(B) is its
// transpose (a Linear's x·Wᵀ: a contiguous run of k), and its column j
// otherwise (the input gradient dy·W: each k a run of the panel's
// columns).
func (e *engine[S, D, C]) packQuant(ws *workspace[D, C], qb quantB, j0, nc, pc, kc, kcp int) {
	nr, kg, q := e.nr, e.kg, qb.q
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		var x mat[S]
		if qb.transB {
			st := stage[S](ws, cols*kc)
			for i := range cols {
				decodeAny(st[i*kc:(i+1)*kc], q, qb.t, (j0+jr+i)*q.Cols+pc, prefetchRows*q.Cols)
			}
			x = mat[S]{data: st, ld: kc}
		} else {
			st := stage[S](ws, kc*cols)
			for p := range kc {
				decodeAny(st[p*cols:(p+1)*cols], q, qb.t, (pc+p)*q.Cols+j0+jr, prefetchRows*q.Cols)
			}
			x = mat[S]{data: st, ld: cols, trans: true}
		}
		e.pack(ws.b[jr*kcp:], x, 0, cols, 0, kc, nr, kg)
	}
}

// prefetchRows is how many rows ahead a panel's decoding prefetches
// codes: the panel reads a short run of each stored row in turn, a stride
// the hardware prefetchers miss (without it, decoding a Linear's weight
// took as long as its product's arithmetic).
const prefetchRows = 8

// decodeAny is decode for an engine's source type S (float32, float64 or
// uint16 bits).
func decodeAny[S any](dst []S, q *Quant, t qtarget, f, ahead int) {
	switch d := any(dst).(type) {
	case []float32:
		decode(d, q, t, f, ahead)
	case []float64:
		decode(d, q, t, f, ahead)
	case []uint16:
		decode(d, q, t, f, ahead)
	default:
		panic("gemm: no quantized staging for this engine")
	}
}

// DecodeF32 writes row r, columns [c0, c0+len(dst)) of q as float32
// values (the dequantized values of the definition, bit for bit).
func (q *Quant) DecodeF32(dst []float32, r, c0 int) {
	q.rowCheck(r, c0, len(dst))
	decode(dst, q, qF32, r*q.Cols+c0, 0)
}

// DecodeBF16 is DecodeF32 rounded to bfloat16 bits (nearest even).
func (q *Quant) DecodeBF16(dst []uint16, r, c0 int) {
	q.rowCheck(r, c0, len(dst))
	decode(dst, q, qBF16, r*q.Cols+c0, 0)
}

// DecodeF16 is DecodeF32 rounded to half-precision bits (nearest even).
func (q *Quant) DecodeF16(dst []uint16, r, c0 int) {
	q.rowCheck(r, c0, len(dst))
	decode(dst, q, qF16, r*q.Cols+c0, 0)
}

// DecodeF64 is DecodeF32 widened to float64.
func (q *Quant) DecodeF64(dst []float64, r, c0 int) {
	q.rowCheck(r, c0, len(dst))
	decode(dst, q, qF64, r*q.Cols+c0, 0)
}

func (q *Quant) rowCheck(r, c0, n int) {
	if r < 0 || r >= q.Rows || c0 < 0 || c0+n > q.Cols {
		panic(fmt.Sprintf("gemm: decoding row %d, columns %d:%d of a %d×%d quantized matrix", r, c0, c0+n, q.Rows, q.Cols))
	}
	q.check("Decode")
}

// quantPrologue checks a quantized product's operands and reports
// whether there is work to do.
func quantPrologue(fn string, transA, transB bool, m, n, k, la, lda int, b *Quant, lc, ldc int) bool {
	b.check(fn)
	if rows, cols := b.Rows, b.Cols; transB && (rows != n || cols != k) || !transB && (rows != k || cols != n) {
		panic(fmt.Sprintf("gemm: %s: B is %d×%d, op(B) must be %d×%d (transB=%v)", fn, rows, cols, k, n, transB))
	}
	lb := max(b.Rows*b.Cols, 1)
	return prologue(fn, transA, transB, m, n, k, la, lda, lb, max(b.Cols, 1), lc, ldc)
}

// noB is the B operand the driver is given when B is quantized.
func noB[S any]() mat[S] { return mat[S]{} }

// SgemmQ computes C = alpha·op(A)·op(B) + beta·C with B quantized,
// decoded to float32.
func (t Options) SgemmQ(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b *Quant, beta float32, c []float32, ldc int) {
	if !quantPrologue("SgemmQ", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("SgemmQ", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qF32, transB: transB}
	run(t.Threads, tri, sgemmEngine, &poolF32, m, n, k, alpha, mat[float32]{a, lda, transA}, noB[float32](), beta, c, ldc, nil)
}

// DgemmQ is SgemmQ in float64 (B's float32 values widened exactly), for
// gradient checks.
func (t Options) DgemmQ(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b *Quant, beta float64, c []float64, ldc int) {
	if !quantPrologue("DgemmQ", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("Dgemm", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qF64, transB: transB}
	run(t.Threads, tri, dgemmEngine, &poolF64, m, n, k, alpha, mat[float64]{a, lda, transA}, noB[float64](), beta, c, ldc, nil)
}

// GemmBF16Q is GemmBF16 with B quantized: its values rounded to bfloat16
// (the products' operands), accumulated and written in float32.
func (t Options) GemmBF16Q(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b *Quant, beta float32, c []float32, ldc int) {
	if !quantPrologue("GemmBF16Q", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("GemmBF16Q", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qBF16, transB: transB}
	am := mat[uint16]{a, lda, transA}
	if bf16Engine != nil {
		run(t.Threads, tri, bf16Engine, &poolU16, m, n, k, alpha, am, noB[uint16](), beta, c, ldc, nil)
		return
	}
	run(t.Threads, tri, bf16CvtEngine, &poolF32, m, n, k, alpha, am, noB[uint16](), beta, c, ldc, nil)
}

// GemmF16Q is GemmF16 with B quantized, its values rounded to half
// precision.
func (t Options) GemmF16Q(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b *Quant, beta float32, c []float32, ldc int) {
	if !quantPrologue("GemmF16Q", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("GemmF16Q", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qF16, transB: transB}
	run(t.Threads, tri, f16Engine, &poolF32, m, n, k, alpha, mat[uint16]{a, lda, transA}, noB[uint16](), beta, c, ldc, nil)
}

// GemmBF16ToQ is GemmBF16To with B quantized: a bfloat16 C, each element
// rounded once.
func (t Options) GemmBF16ToQ(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b *Quant, beta float32, c []uint16, ldc int) {
	if !quantPrologue("GemmBF16ToQ", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("GemmBF16ToQ", m, n, k, beta == 0)
	o := &out16{c: c, ldc: ldc, beta: beta, tile: tileBF16, bf16: true}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qBF16, transB: transB}
	am := mat[uint16]{a, lda, transA}
	if bf16Engine != nil {
		runTo16(t.Threads, tri, bf16Engine, &poolU16, m, n, k, alpha, am, noB[uint16](), o)
		return
	}
	runTo16(t.Threads, tri, bf16CvtEngine, &poolF32, m, n, k, alpha, am, noB[uint16](), o)
}

// GemmF16ToQ is GemmF16To with B quantized.
func (t Options) GemmF16ToQ(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b *Quant, beta float32, c []uint16, ldc int) {
	if !quantPrologue("GemmF16ToQ", transA, transB, m, n, k, len(a), lda, b, len(c), ldc) {
		return
	}
	t.check("GemmF16ToQ", m, n, k, beta == 0)
	o := &out16{c: c, ldc: ldc, beta: beta, tile: tileF16}
	tri := t.tri()
	tri.qb = quantB{q: b, t: qF16, transB: transB}
	runTo16(t.Threads, tri, f16Engine, &poolF32, m, n, k, alpha, mat[uint16]{a, lda, transA}, noB[uint16](), o)
}
