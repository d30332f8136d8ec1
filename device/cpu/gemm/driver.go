package gemm

import (
	"runtime"
	"sync"
)

// mat describes op(X) over row-major storage: element (i, p) of op(X) is
// data[i*ld+p], or data[p*ld+i] when trans is set.
type mat[S any] struct {
	data  []S
	ld    int
	trans bool
}

// rowsFrom returns op(X) without its first i rows (an empty X, a
// quantized B's stand-in, stays empty).
func (x mat[S]) rowsFrom(i int) mat[S] {
	if x.data == nil {
		return x
	}
	if x.trans {
		x.data = x.data[i:]
	} else {
		x.data = x.data[i*x.ld:]
	}
	return x
}

// colsFrom returns op(X) without its first j columns.
func (x mat[S]) colsFrom(j int) mat[S] {
	if x.data == nil {
		return x
	}
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

	// A k of at most kcOne (0: none) runs as one K block, with A blocks
	// of mcOne rows (mcOne % mr == 0) to keep them in L2. C (or a 16-bit
	// C's float32 partial sums) then goes through memory once instead of
	// once per K block: 10-17% faster on the GPT's k = 1152 and 1536
	// products. A larger k keeps kc, which suits the weight gradients' long
	// k better.
	kcOne, mcOne int

	// pack copies the rows i0..i0+rows-1 and columns p0..p0+kc-1 of op(X)
	// into micro-panels of mr rows: within a panel, k-group q holds
	// mr*kg values, row i's group at i*kg. Rows and k past the end are zero.
	pack func(dst []D, x mat[S], i0, rows, p0, kc, mr, kg int)

	// kern computes the mr×nr tile C = alpha*Ap*Bp + beta*C over kq
	// k-groups of packed A and B (beta == 0 overwrites C). c has at least
	// (mr-1)*ldc+nr elements.
	kern func(kq int, a, b []D, c []C, ldc int, alpha, beta C)

	// kernTo16, where there is one, is kern writing a whole tile straight
	// into a bfloat16 C, rounded as out16's tile function rounds: the
	// products whose k is one K block need no float32 tile in between.
	kernTo16 func(kq int, a, b []D, c []uint16, ldc int, alpha, beta C)
}

// workspace holds one goroutine's packing buffers, and the staging a
// quantized B is decoded into (quant.go).
type workspace[D any, C float32 | float64] struct {
	a, b  []D
	tile  []C
	stage []byte
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// wsPool keeps idle workspaces, at most maxWorkspaces of them. Unlike a
// sync.Pool it is not emptied by the garbage collector, which would turn
// megabytes of packing buffers into garbage (and new buffers) after every
// collection. A workspace grows to its engine's block sizes at most
// (a: mc×kc, b: nc×kc elements of D, stage: nr×kc source values;
// ARCHITECTURE.md gives the figures).
type wsPool[D any, C float32 | float64] struct {
	mu   sync.Mutex
	free []*workspace[D, C]
}

// maxWorkspaces bounds each pool: one workspace per goroutine a product
// may run on (GOMAXPROCS at start-up); more at once are dropped when given
// back.
var maxWorkspaces = runtime.GOMAXPROCS(0)

var (
	poolF32 wsPool[float32, float32]
	poolF64 wsPool[float64, float64]
	poolU16 wsPool[uint16, float32]
)

func (p *wsPool[D, C]) get() *workspace[D, C] {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		w := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return w
	}
	return new(workspace[D, C])
}

func (p *wsPool[D, C]) put(w *workspace[D, C]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxWorkspaces {
		if p.free == nil {
			p.free = make([]*workspace[D, C], 0, maxWorkspaces)
		}
		p.free = append(p.free, w)
	}
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
func (e *engine[S, D, C]) serial(ws *workspace[D, C], m, n, k int, alpha C, a, b mat[S], beta C, c []C, ldc int, o *out16, tri region) {
	mr, nr, kg := e.mr, e.nr, e.kg
	ws.tile = grow(ws.tile, mr*nr)
	var tile32, acc32 []float32
	if o != nil {
		tile32 = any(ws.tile).([]float32)
		acc32, _ = any(c).([]float32)
	}
	bt := b.transposed() // op(B)ᵀ: its rows are op(B)'s columns
	mcBlk, kcBlk := e.blocks(k)
	for jc := 0; jc < n; jc += e.nc {
		nc := min(e.nc, n-jc)
		for pc := 0; pc < k; pc += kcBlk {
			kc := min(kcBlk, k-pc)
			kcp := roundUp(kc, kg)
			kq := kcp / kg
			ws.b = grow(ws.b, roundUp(nc, nr)*kcp)
			if tri.qb.q != nil {
				e.packQuant(ws, tri.qb, tri.col0+jc, nc, pc, kc, kcp)
			} else {
				e.pack(ws.b, bt, jc, nc, pc, kc, nr, kg)
			}
			bet := beta
			if pc > 0 {
				bet = 1
			} else if o != nil {
				bet = 0 // C's own term is added when rounding
			}
			last := pc+kc >= k
			tileOnly := o != nil && pc == 0 && last
			for ic := 0; ic < m; ic += mcBlk {
				mc := min(mcBlk, m-ic)
				ws.a = grow(ws.a, roundUp(mc, mr)*kcp)
				if tri.kind == LowerA || tri.kind == UpperA {
					// Each panel only as far as its rows reach into the
					// triangle: the k-groups outside it are never read
					// (half of the operand, for a square one).
					for ir := 0; ir < mc; ir += mr {
						rows := min(mr, mc-ir)
						q0, q1, _ := tri.span(ic+ir, 0, rows, 1, pc, kg, kq)
						if q1 > q0 {
							e.pack(ws.a[ir*kcp+q0*mr*kg:], a, ic+ir, rows, pc+q0*kg, min(kc-q0*kg, (q1-q0)*kg), mr, kg)
						}
					}
				} else {
					e.pack(ws.a, a, ic, mc, pc, kc, mr, kg)
				}
				for jr := 0; jr < nc; jr += nr {
					bp := ws.b[jr*kcp:]
					nrr := min(nr, nc-jr)
					for ir := 0; ir < mc; ir += mr {
						ap := ws.a[ir*kcp:]
						mrr := min(mr, mc-ir)
						// The k-groups this tile needs, and whether its
						// elements above the diagonal must be cleared.
						q0, q1, upper := tri.span(ic+ir, jc+jr, mrr, nrr, pc, kg, kq)
						if tileOnly {
							if e.kernTo16 != nil && o.bf16 && q1 > q0 && !upper && mrr == mr && nrr == nr && tri.bias == nil {
								e.kernTo16(q1-q0, ap[q0*mr*kg:], bp[q0*nr*kg:], o.c[(ic+ir)*o.ldc+jc+jr:], o.ldc, alpha, C(o.beta))
								continue
							}
							tb := C(0)
							if tri.bias != nil {
								// The tile starts from the bias, added in
								// float32 before the one rounding.
								biasRows(ws.tile, nr, mrr, nrr, tri.bias, tri.col0+jc+jr)
								tb = 1
							}
							if q1 > q0 {
								e.kern(q1-q0, ap[q0*mr*kg:], bp[q0*nr*kg:], ws.tile, nr, alpha, tb)
							} else if tb == 0 {
								clear(ws.tile)
							}
							if upper {
								clearUpper(tile32, nr, mrr, nrr, tri.row0+ic+ir, tri.col0+jc+jr)
							}
							o.finish(ic+ir, jc+jr, tile32, nr, mrr, nrr)
							continue
						}
						off := (ic+ir)*ldc + jc + jr
						cc := c[off:]
						cb := bet // C's own weight in this tile
						if tri.bias != nil && pc == 0 {
							// C starts from the bias instead of beta·C
							// (beta is 0).
							biasRows(cc, ldc, mrr, nrr, tri.bias, tri.col0+jc+jr)
							cb = 1
						}
						switch {
						case q1 <= q0:
							scaleTile(cc, ldc, mrr, nrr, cb) // nothing to add: C = cb·C
						case mrr == mr && nrr == nr:
							e.kern(q1-q0, ap[q0*mr*kg:], bp[q0*nr*kg:], cc, ldc, alpha, cb)
						default:
							e.kern(q1-q0, ap[q0*mr*kg:], bp[q0*nr*kg:], ws.tile, nr, 1, 0)
							edgeUpdate(cc, ldc, ws.tile, nr, mrr, nrr, alpha, cb)
						}
						if upper && last {
							clearUpper(cc, ldc, mrr, nrr, tri.row0+ic+ir, tri.col0+jc+jr)
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

// blocks returns the A block rows and the K block length for a product
// of inner dimension k.
func (e *engine[S, D, C]) blocks(k int) (mc, kc int) {
	if k <= e.kcOne {
		return e.mcOne, e.kcOne
	}
	return e.mc, e.kc
}

// region is what a goroutine's part of a product needs to know of the
// whole: the position of its rows and columns within C, the product's
// Triangle, its Bias (indexed by C's column, col0 + j), and a quantized
// B (read from its column col0 + j).
type region struct {
	kind       Triangle
	row0, col0 int
	bias       []float32
	qb         quantB
}

// biasRows sets the rows×cols tile t (leading dimension ldt) to the bias
// of C's columns from j, in every row.
func biasRows[C float32 | float64](t []C, ldt, rows, cols int, bias []float32, j int) {
	b := bias[j : j+cols]
	if t32, ok := any(t).([]float32); ok && rows > 0 && cols <= 32 && fillRows(t32[:(rows-1)*ldt+cols], ldt, rows, b) {
		return
	}
	for i := range rows {
		r := t[i*ldt : i*ldt+cols]
		for x, v := range b {
			r[x] = C(v)
		}
	}
}

// span returns the k-groups [q0, q1) of the K block starting at pc that
// the rows×cols tile at (i, j) needs, and whether the tile has elements
// above the diagonal that LowerC must clear. A tile entirely above the
// diagonal needs none.
func (t region) span(i, j, rows, cols, pc, kg, kq int) (q0, q1 int, upper bool) {
	q1 = kq
	gi, gj := t.row0+i, t.col0+j
	switch t.kind {
	case LowerC:
		if gj > gi+rows-1 {
			return 0, 0, false // C = 0 there: beta is 0
		}
		upper = gj+cols-1 > gi
	case LowerA: // A's row r needs k <= r
		q1 = min(kq, max(0, (gi+rows-pc+kg-1)/kg))
	case UpperA: // A's row r needs k >= r
		q0 = min(kq, max(0, (gi-pc)/kg))
	}
	return q0, q1, upper
}

// scaleTile sets a rows×cols tile to beta times itself (zero for beta 0,
// whatever it held).
func scaleTile[C float32 | float64](t []C, ld, rows, cols int, beta C) {
	for r := 0; r < rows; r++ {
		row := t[r*ld : r*ld+cols]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// clearUpper zeroes the elements of a rows×cols tile (leading dimension
// ld) at global position (gi, gj) that lie above the diagonal.
func clearUpper[C float32 | float64](t []C, ld, rows, cols, gi, gj int) {
	for r := 0; r < rows; r++ {
		if from := gi + r + 1 - gj; from < cols {
			clear(t[r*ld+max(from, 0) : r*ld+cols])
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
	bf16 bool // C is bfloat16 (else half precision)
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
