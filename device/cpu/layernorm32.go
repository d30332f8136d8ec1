package cpu

import (
	"math"

	"github.com/memfit/memfit/device"
)

// Layer norm for every dtype that computes in float32 (F32, BF16, F16):
// rows in float32 with vector code for the bulk of each row, so that a
// row costs a few passes at memory speed. Float64 uses the generic
// kernels in nnkernels.go.

func layerNorm32(d *Device, y, xc, mean, rstd, x, gamma, beta device.View, eps float64) {
	n := lastDim(x)
	rows := x.Len() / max(n, 1)
	runRowsJob(d, rows, n, layerNorm32Rows{y: y, xc: xc, mean: mean, rstd: rstd, x: x, gamma: gamma, beta: beta, n: n, eps: eps})
}

// layerNorm32Rows is LayerNorm over rows of n elements, in float32.
type layerNorm32Rows struct {
	y, xc, mean, rstd, x, gamma, beta device.View
	n                                 int
	eps                               float64
}

func (k layerNorm32Rows) rows(r0, r1 int) {
	y, xc, mean, rstd, x, gamma, beta, n, eps := k.y, k.xc, k.mean, k.rstd, k.x, k.gamma, k.beta, k.n, k.eps

	sc := getScratch[float32]()
	defer putScratch(sc)
	gm := loadRow(gamma, gamma.Offset, n, 1, sc, 2)
	bt := loadRow(beta, beta.Offset, n, 1, sc, 3)
	var one [1]float32
	for r := r0; r < r1; r++ {
		xx := loadRow(x, x.Offset+r*n, n, 1, sc, 0)
		if xc.DType != device.Invalid {
			// The row as Copy converts it: one rounding from float32.
			store(xc, xc.Offset+r*n, 1, xx)
		}
		out := targetRow(y, y.Offset+r*n, n, 1, sc, 1)
		mu := rowSum(xx) / float32(n)
		v, k := sumSqDevVector(xx, mu)
		for _, e := range xx[k:] {
			v += (e - mu) * (e - mu)
		}
		rs := float32(1 / math.Sqrt(float64(v)/float64(n)+eps))
		for i := lnApplyVector(out, xx, gm, bt, mu, rs); i < n; i++ {
			out[i] = (xx[i]-mu)*rs*gm[i] + bt[i]
		}
		store(y, y.Offset+r*n, 1, out)
		one[0] = mu
		store(mean, mean.Offset+r, 1, one[:])
		one[0] = rs
		store(rstd, rstd.Offset+r, 1, one[:])
	}
}

// lnBlockRows is how many rows' parameter gradients are summed in float32
// before being folded into the float64 totals.
const lnBlockRows = 64

func layerNormBackward32(d *Device, dx, dgamma, dbeta, dy, x, mean, rstd, gamma device.View) {
	n := lastDim(x)
	rows := x.Len() / max(n, 1)
	parts := 1
	if rows*n >= parallelMin {
		parts = min(d.threads, rows)
	}
	// Part p's float64 sums are [p·n, (p+1)·n) of one set's sum buffers.
	sums := getScratch[float32]()
	defer putScratch(sums)
	dgAll, dbAll := sums.sum(0, parts*n), sums.sum(1, parts*n)
	runParts(parts, layerNormGrad32Parts{dx: dx, dy: dy, x: x, mean: mean, rstd: rstd, gamma: gamma, n: n, rows: rows, dgAll: dgAll, dbAll: dbAll})
	addParamGrad[float32](dgamma, dgAll, n)
	addParamGrad[float32](dbeta, dbAll, n)
}

// layerNormGrad32Parts is LayerNormBackward's part p of a fixed partition
// of the rows: dx, and the parameter gradients' sums into part p's slots.
type layerNormGrad32Parts struct {
	dx, dy, x, mean, rstd, gamma device.View
	n, rows                      int
	dgAll, dbAll                 []float64
}

func (j layerNormGrad32Parts) part(p, parts int) {
	dx, dy, x, mean, rstd, gamma, n, rows, dgAll, dbAll := j.dx, j.dy, j.x, j.mean, j.rstd, j.gamma, j.n, j.rows, j.dgAll, j.dbAll
	sc := getScratch[float32]()
	defer putScratch(sc)
	gm := loadRow(gamma, gamma.Offset, n, 1, sc, 2)
	// The float32 block sums; the row buffers a, b, d may be in
	// use, so these take the set's accumulator.
	blk := sc.accum(2 * n)
	bdg, bdb := blk[:n], blk[n:]
	dg, db := dgAll[p*n:(p+1)*n], dbAll[p*n:(p+1)*n]
	var mr [2]float32
	start, end := rows*p/parts, rows*(p+1)/parts
	for r := start; r < end; r++ {
		xx := loadRow(x, x.Offset+r*n, n, 1, sc, 0)
		g := loadRow(dy, dy.Offset+r*n, n, 1, sc, 1)
		mu := load(mean, mean.Offset+r, 1, 1, mr[:1])[0]
		rs := load(rstd, rstd.Offset+r, 1, 1, mr[1:])[0]
		s1, s2, k := lnGradStatsVector(xx, g, gm, bdg, bdb, mu, rs)
		for i := k; i < n; i++ {
			xh := (xx[i] - mu) * rs
			gg := g[i] * gm[i]
			s1 += gg
			s2 += gg * xh
			bdg[i] += g[i] * xh
			bdb[i] += g[i]
		}
		a, b := s1/float32(n), s2/float32(n)
		out := targetRow(dx, dx.Offset+r*n, n, 1, sc, 3)
		for i := lnGradDxVector(out, xx, g, gm, mu, rs, a, b); i < n; i++ {
			out[i] = rs * (g[i]*gm[i] - a - (xx[i]-mu)*rs*b)
		}
		store(dx, dx.Offset+r*n, 1, out)
		if (r-start+1)%lnBlockRows == 0 || r == end-1 {
			for i := range bdg {
				dg[i] += float64(bdg[i])
				db[i] += float64(bdb[i])
			}
			clear(bdg)
			clear(bdb)
		}
	}
}

// addParamGrad adds the per-part sums (part p at [p·n, (p+1)·n) of
// parts), in part order, into dst (absent when the parameter needs no
// gradient).
func addParamGrad[T float](dst device.View, parts []float64, n int) {
	if dst.Buf.Block == nil && dst.Buf.Host == nil {
		return
	}
	sc := getScratch[T]()
	defer putScratch(sc)
	cur := loadRow(dst, dst.Offset, n, 1, sc, 0)
	out := sc.row(1, n)
	for i := range out {
		s := float64(cur[i])
		for p := i; p < len(parts); p += n {
			s += parts[p]
		}
		out[i] = T(s)
	}
	store(dst, dst.Offset, 1, out)
}
