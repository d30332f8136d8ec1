package gemm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// threads is the number of goroutines one GEMM may use.
var threads atomic.Int64

func init() { threads.Store(int64(runtime.GOMAXPROCS(0))) }

// SetThreads sets the number of goroutines a single GEMM may use (values
// below 1 mean 1) and returns the previous value. The default is
// runtime.GOMAXPROCS(0) at program start.
func SetThreads(n int) int {
	return int(threads.Swap(int64(max(n, 1))))
}

// Options shape one product: how many goroutines it may use and which
// triangle of its matrices matters. Threads 1 keeps a product on the
// calling goroutine, for callers that spread many small products (a batch
// of attention heads) over goroutines themselves: one goroutine per
// product packs each operand once and never waits for another. Threads
// below 1 mean 1.
type Options struct {
	Threads  int
	Triangle Triangle
	// Bias, when set, holds n values added to every row of C: the product
	// starts from it where it would start from beta·C, so beta must be 0
	// (a linear layer's x·Wᵀ + b without a pass that copies b into every
	// row first). A 16-bit C gets the bias in float32, before its one
	// rounding. Dgemm has none, nor a product with a Triangle.
	Bias []float32
}

// Triangle declares the triangular structure of a square product (M = N
// for LowerC, M = K for LowerA and UpperA), as in causal attention, so
// that the product skips the half that cannot matter.
type Triangle uint8

const (
	// Full is an ordinary product.
	Full Triangle = iota
	// LowerC computes only C's lower triangle (j <= i) and sets the
	// elements above the diagonal to zero. Beta must be 0.
	LowerC
	// LowerA declares op(A) zero above its diagonal (k > i): the caller
	// guarantees it, and the product may skip those elements.
	LowerA
	// UpperA declares op(A) zero below its diagonal (k < i).
	UpperA
)

// Sgemm computes C = alpha*op(A)*op(B) + beta*C in float32.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	Options{Threads: int(threads.Load())}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm is the package-level Sgemm with t's options.
func (t Options) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !prologue("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("Sgemm", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	run(t.Threads, t.tri(), sgemmEngine, &poolF32, m, n, k, alpha, mat[float32]{a, lda, transA}, mat[float32]{b, ldb, transB}, beta, c, ldc, nil)
}

// Dgemm computes C = alpha*op(A)*op(B) + beta*C in float64. It is meant for
// correctness (gradient checks), not speed: portable Go on every platform.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Options{Threads: int(threads.Load())}.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is the package-level Dgemm with t's options.
func (t Options) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if !prologue("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("Dgemm", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	run(t.Threads, t.tri(), dgemmEngine, &poolF64, m, n, k, alpha, mat[float64]{a, lda, transA}, mat[float64]{b, ldb, transB}, beta, c, ldc, nil)
}

// GemmBF16 computes C = alpha*op(A)*op(B) + beta*C where A and B hold
// bfloat16 bit patterns; products are accumulated and written in float32.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	Options{Threads: int(threads.Load())}.GemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmBF16 is the package-level GemmBF16 with t's options.
func (t Options) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if !prologue("GemmBF16", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("GemmBF16", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	am, bm := mat[uint16]{a, lda, transA}, mat[uint16]{b, ldb, transB}
	if bf16Engine != nil {
		run(t.Threads, t.tri(), bf16Engine, &poolU16, m, n, k, alpha, am, bm, beta, c, ldc, nil)
		return
	}
	run(t.Threads, t.tri(), bf16CvtEngine, &poolF32, m, n, k, alpha, am, bm, beta, c, ldc, nil)
}

// GemmF16 computes C = alpha*op(A)*op(B) + beta*C where A and B hold IEEE
// half-precision bit patterns; they are converted to float32 while packing,
// and the float32 kernel accumulates and writes float32.
func GemmF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	Options{Threads: int(threads.Load())}.GemmF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmF16 is the package-level GemmF16 with t's options.
func (t Options) GemmF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if !prologue("GemmF16", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("GemmF16", m, n, k, beta == 0)
	if k == 0 || alpha == 0 {
		t.startC(m, n, beta, c, ldc)
		return
	}
	run(t.Threads, t.tri(), f16Engine, &poolF32, m, n, k, alpha, mat[uint16]{a, lda, transA}, mat[uint16]{b, ldb, transB}, beta, c, ldc, nil)
}

// GemmBF16To is GemmBF16 with a bfloat16 C: products are accumulated in
// float32 and each element is rounded once (to nearest even), as its tile
// is finished, so no float32 copy of C is written out and read back.
// Where k spans more than one of the engine's K blocks the partial sums
// wait in pooled float32 scratch of m×n.
func (t Options) GemmBF16To(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []uint16, ldc int) {
	if !prologue("GemmBF16To", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("GemmBF16To", m, n, k, beta == 0)
	o := &out16{c: c, ldc: ldc, beta: beta, tile: tileBF16, bf16: true}
	am, bm := mat[uint16]{a, lda, transA}, mat[uint16]{b, ldb, transB}
	if bf16Engine != nil {
		runTo16(t.Threads, t.tri(), bf16Engine, &poolU16, m, n, k, alpha, am, bm, o)
		return
	}
	runTo16(t.Threads, t.tri(), bf16CvtEngine, &poolF32, m, n, k, alpha, am, bm, o)
}

// GemmF16To is GemmF16 with a half-precision C, as GemmBF16To.
func (t Options) GemmF16To(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []uint16, ldc int) {
	if !prologue("GemmF16To", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc) {
		return
	}
	t.check("GemmF16To", m, n, k, beta == 0)
	o := &out16{c: c, ldc: ldc, beta: beta, tile: tileF16}
	runTo16(t.Threads, t.tri(), f16Engine, &poolF32, m, n, k, alpha, mat[uint16]{a, lda, transA}, mat[uint16]{b, ldb, transB}, o)
}

// accElems bounds the float32 partial sums a 16-bit product whose k spans
// several K blocks keeps between blocks (4 MiB): a larger C is computed a
// strip of rows at a time (columns too, when one row of tiles is already
// wider), each strip a product of its own. An element's sum is the same
// in any strip, so the bits do not depend on the split. A variable so
// that tests can make strips small.
var accElems = 1 << 20

// accPool keeps those partial sums, one buffer per product running at
// once, bounded like the workspaces.
var accPool struct {
	mu   sync.Mutex
	free [][]float32
}

func getAcc() []float32 {
	accPool.mu.Lock()
	defer accPool.mu.Unlock()
	if n := len(accPool.free); n > 0 {
		b := accPool.free[n-1]
		accPool.free[n-1] = nil
		accPool.free = accPool.free[:n-1]
		return b
	}
	return nil
}

func putAcc(b []float32) {
	accPool.mu.Lock()
	defer accPool.mu.Unlock()
	if len(accPool.free) < maxWorkspaces {
		if accPool.free == nil {
			accPool.free = make([][]float32, 0, maxWorkspaces)
		}
		accPool.free = append(accPool.free, b)
	}
}

func runTo16[D any](parts int, tri region, e *engine[uint16, D, float32], pool *wsPool[D, float32], m, n, k int, alpha float32, a, b mat[uint16], o *out16) {
	if k == 0 || alpha == 0 {
		// C = beta·C, a row of tiles at a time.
		var zero [maxTileCols]float32
		for i := 0; i < m; i++ {
			for j := 0; j < n; j += maxTileCols {
				cols := min(maxTileCols, n-j)
				clear(zero[:])
				if tri.bias != nil {
					biasRows(zero[:], maxTileCols, 1, cols, tri.bias, tri.col0+j)
				}
				o.finish(i, j, zero[:], maxTileCols, 1, cols)
			}
		}
		return
	}
	if e.nr > maxTileCols {
		panic("gemm: micro-tile wider than maxTileCols")
	}
	if _, kc := e.blocks(k); k <= kc {
		run(parts, tri, e, pool, m, n, k, alpha, a, b, 0, nil, n, o)
		return
	}
	// Strips of whole micro-tiles: w columns (all of them unless a row of
	// tiles is wider than the bound) by h rows. Strips of rows pack all of
	// B again for each strip, strips of columns all of A: the same number
	// of strips either way, so the cheaper operand to pack again decides.
	// A quantized B costs about three times A's packing per element (it
	// is decoded first), so unless A is over three times B's height it is
	// cut in strips of columns over all rows, each decoding its own
	// columns of B once.
	w := n
	if e.mr*n > accElems {
		w = max(e.nr, accElems/e.mr/e.nr*e.nr)
	}
	if tri.qb.q != nil && m < 3*n {
		w = min(n, max(e.nr, accElems/max(m, e.mr)/e.nr*e.nr))
	}
	h := max(e.mr, min(m, accElems/w)/e.mr*e.mr)
	acc := getAcc()
	for i0 := 0; i0 < m; i0 += h {
		for j0 := 0; j0 < n; j0 += w {
			sh, sw := min(h, m-i0), min(w, n-j0)
			acc = grow(acc, sh*sw)
			st := tri
			st.row0 += i0
			st.col0 += j0
			run(parts, st, e, pool, sh, sw, k, alpha, a.rowsFrom(i0), b.colsFrom(j0), 0, acc, sw, o.rowsFrom(i0).colsFrom(j0))
		}
	}
	putAcc(acc)
}

func (t Options) tri() region { return region{kind: t.Triangle, bias: t.Bias} }

// checkTriangle panics when a product's shape does not fit its Triangle.
func (t Options) check(fn string, m, n, k int, betaZero bool) {
	if t.Bias != nil && (len(t.Bias) < n || !betaZero || fn == "Dgemm" || t.Triangle != Full) {
		panic(fmt.Sprintf("gemm: %s: a bias needs n (%d) values, beta 0, a float32 product and no Triangle; it has %d values", fn, n, len(t.Bias)))
	}
	switch t.Triangle {
	case Full:
	case LowerC:
		if m != n || !betaZero {
			panic(fmt.Sprintf("gemm: %s: LowerC needs m == n and beta 0 (m=%d n=%d)", fn, m, n))
		}
	case LowerA, UpperA:
		if m != k {
			panic(fmt.Sprintf("gemm: %s: a triangular A needs m == k (m=%d k=%d)", fn, m, k))
		}
	default:
		panic(fmt.Sprintf("gemm: %s: unknown triangle %d", fn, t.Triangle))
	}
}

// prologue checks shapes, strides and slice lengths, panicking on a
// programming error, and reports whether there is any work to do.
func prologue(fn string, transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) bool {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: %s: negative size m=%d n=%d k=%d", fn, m, n, k))
	}
	if m == 0 || n == 0 {
		return false
	}
	checkOperand(fn, "a", transA, m, k, la, lda)
	checkOperand(fn, "b", transB, k, n, lb, ldb)
	if ldc < n || lc < (m-1)*ldc+n {
		panic(fmt.Sprintf("gemm: %s: c is %d×%d with ldc=%d but len(c)=%d", fn, m, n, ldc, lc))
	}
	return true
}

// checkOperand checks the storage of an op(X) that is rows×cols.
func checkOperand(fn, name string, trans bool, rows, cols, l, ld int) {
	if rows == 0 || cols == 0 {
		return
	}
	if trans {
		rows, cols = cols, rows
	}
	if ld < cols || l < (rows-1)*ld+cols {
		panic(fmt.Sprintf("gemm: %s: %s is stored %d×%d (trans=%v) with ld=%d but len=%d", fn, name, rows, cols, trans, ld, l))
	}
}

// startC sets C to what a product adds to: the bias in every row, or
// beta*C.
func (t Options) startC(m, n int, beta float32, c []float32, ldc int) {
	if t.Bias != nil {
		biasRows(c, ldc, m, n, t.Bias, 0)
		return
	}
	scaleC(m, n, beta, c, ldc)
}

// scaleC sets C = beta*C, with beta == 0 clearing C.
func scaleC[T float32 | float64](m, n int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		if beta == 1 {
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}
