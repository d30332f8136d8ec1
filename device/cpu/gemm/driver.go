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
func (e *engine[S, D, C]) serial(ws *workspace[D, C], m, n, k int, alpha C, a, b mat[S], beta C, c []C, ldc int) {
	mr, nr, kg := e.mr, e.nr, e.kg
	ws.tile = grow(ws.tile, mr*nr)
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
			}
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
						cc := c[(ic+ir)*ldc+jc+jr:]
						if mrr == mr && nrr == nr {
							e.kern(kq, ap, bp, cc, ldc, alpha, bet)
							continue
						}
						e.kern(kq, ap, bp, ws.tile, nr, 1, 0)
						edgeUpdate(cc, ldc, ws.tile, nr, mrr, nrr, alpha, bet)
					}
				}
			}
		}
	}
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
