package gemm

import "sync"

// mat describes op(X) over row-major storage: element (i, p) of op(X) is
// data[i*ld+p], or data[p*ld+i] when trans is set.
type mat[S any] struct {
	data  []S
	ld    int
	trans bool
}

// rowsFrom returns op(X) without its first i rows.
func (x mat[S]) rowsFrom(i int) mat[S] {
	if x.trans {
		x.data = x.data[i:]
	} else {
		x.data = x.data[i*x.ld:]
	}
	return x
}

// colsFrom returns op(X) without its first j columns.
func (x mat[S]) colsFrom(j int) mat[S] {
	if x.trans {
		x.data = x.data[j*x.ld:]
	} else {
		x.data = x.data[j:]
	}
	return x
}

// transposed returns op(X)ᵀ over the same storage.
func (x mat[S]) transposed() mat[S] {
	x.trans = !x.trans
	return x
}

// engine is one way to run a GEMM: source element type S, packed element
// type D and accumulator/output type C, a micro-kernel computing an mr×nr
// tile and the cache blocking around it.
type engine[S, D any, C float32 | float64] struct {
	name       string
	mr, nr, kg int // kg: k values packed side by side per lane (2 for bf16 pairs)
	mc, kc, nc int // cache blocks; mc % mr == 0, nc % nr == 0, kc % kg == 0

	// pack copies the rows i0..i0+rows-1 and columns p0..p0+kc-1 of op(X)
	// into micro-panels of mr rows: within a panel, k-group q holds
	// mr*kg values, row i's group at i*kg. Rows and k past the end are zero.
	pack func(dst []D, x mat[S], i0, rows, p0, kc, mr, kg int)

	// kern computes the mr×nr tile C = alpha*Ap*Bp + beta*C over kq
	// k-groups of packed A and B (beta == 0 overwrites C). c has at least
	// (mr-1)*ldc+nr elements.
	kern func(kq int, a, b []D, c []C, ldc int, alpha, beta C)
}

// workspace holds one goroutine's packing buffers.
type workspace[D any, C float32 | float64] struct {
	a, b []D
	tile []C
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

var (
	poolF32 sync.Pool // *workspace[float32, float32]
	poolF64 sync.Pool // *workspace[float64, float64]
	poolU16 sync.Pool // *workspace[uint16, float32]
)

func getWS[D any, C float32 | float64](p *sync.Pool) *workspace[D, C] {
	if w, ok := p.Get().(*workspace[D, C]); ok {
		return w
	}
	return new(workspace[D, C])
}

func roundUp(x, r int) int { return (x + r - 1) / r * r }

// serial runs the whole product on the calling goroutine. k > 0 and alpha != 0.
//
// With o set (C float32 only) the output is o's 16-bit C: each tile is
// accumulated in float32 and rounded once when its last K block is done,
// with o.beta·C added then. A product whose k fits one K block needs no
// float32 copy of C at all (the micro-kernel writes a tile that is rounded
// at once); otherwise c is float32 scratch of m×n (ldc) that carries the
// partial sums between K blocks.
func (e *engine[S, D, C]) serial(ws *workspace[D, C], m, n, k int, alpha C, a, b mat[S], beta C, c []C, ldc int, o *out16) {
	mr, nr, kg := e.mr, e.nr, e.kg
	ws.tile = grow(ws.tile, mr*nr)
	var tile32, acc32 []float32
	if o != nil {
		tile32 = any(ws.tile).([]float32)
		acc32, _ = any(c).([]float32)
	}
	bt := b.transposed() // op(B)ᵀ: its rows are op(B)'s columns
	for jc := 0; jc < n; jc += e.nc {
		nc := min(e.nc, n-jc)
		for pc := 0; pc < k; pc += e.kc {
			kc := min(e.kc, k-pc)
			kcp := roundUp(kc, kg)
			kq := kcp / kg
			ws.b = grow(ws.b, roundUp(nc, nr)*kcp)
			e.pack(ws.b, bt, jc, nc, pc, kc, nr, kg)
			bet := beta
			if pc > 0 {
				bet = 1
			} else if o != nil {
				bet = 0 // C's own term is added when rounding
			}
			last := pc+kc >= k
			tileOnly := o != nil && pc == 0 && last
			for ic := 0; ic < m; ic += e.mc {
				mc := min(e.mc, m-ic)
				ws.a = grow(ws.a, roundUp(mc, mr)*kcp)
				e.pack(ws.a, a, ic, mc, pc, kc, mr, kg)
				for jr := 0; jr < nc; jr += nr {
					bp := ws.b[jr*kcp:]
					nrr := min(nr, nc-jr)
					for ir := 0; ir < mc; ir += mr {
						ap := ws.a[ir*kcp:]
						mrr := min(mr, mc-ir)
						if tileOnly {
							e.kern(kq, ap, bp, ws.tile, nr, alpha, 0)
							o.finish(ic+ir, jc+jr, tile32, nr, mrr, nrr)
							continue
						}
						off := (ic+ir)*ldc + jc + jr
						cc := c[off:]
						if mrr == mr && nrr == nr {
							e.kern(kq, ap, bp, cc, ldc, alpha, bet)
						} else {
							e.kern(kq, ap, bp, ws.tile, nr, 1, 0)
							edgeUpdate(cc, ldc, ws.tile, nr, mrr, nrr, alpha, bet)
						}
						if o != nil && last {
							o.finish(ic+ir, jc+jr, acc32[off:], ldc, mrr, nrr)
						}
					}
				}
			}
		}
	}
}

// out16 is a 16-bit C (bfloat16 or half bits) and the function that
// rounds a finished float32 tile into it.
type out16 struct {
	c    []uint16
	ldc  int
	beta float32
	tile tileFunc
}

// tileFunc writes rows×cols (cols <= maxTileCols) of the float32 sums t
// (leading dimension ldt) plus beta·C into the 16-bit C, rounded to
// nearest even. It may overwrite t.
type tileFunc func(c []uint16, ldc int, t []float32, ldt, rows, cols int, beta float32)

// maxTileCols bounds the columns of one tile.
const maxTileCols = 32

func (o *out16) rowsFrom(i int) *out16 {
	p := *o
	p.c = p.c[i*p.ldc:]
	return &p
}

func (o *out16) colsFrom(j int) *out16 {
	p := *o
	p.c = p.c[j:]
	return &p
}

// finish rounds rows×cols of t into C at (i, j).
func (o *out16) finish(i, j int, t []float32, ldt, rows, cols int) {
	o.tile(o.c[i*o.ldc+j:], o.ldc, t, ldt, rows, cols, o.beta)
}

// edgeUpdate sets the rows×cols corner of C to alpha*T + beta*C.
func edgeUpdate[C float32 | float64](c []C, ldc int, t []C, ldt, rows, cols int, alpha, beta C) {
	for i := 0; i < rows; i++ {
		cr := c[i*ldc : i*ldc+cols]
		tr := t[i*ldt : i*ldt+cols]
		if beta == 0 {
			for j, v := range tr {
				cr[j] = alpha * v
			}
		} else {
			for j, v := range tr {
				cr[j] = alpha*v + beta*cr[j]
			}
		}
	}
}
