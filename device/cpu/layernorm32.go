package cpu

import (
	"math"
	"sync"

	"github.com/memfit/memfit/device"
)

// Layer norm for every dtype that computes in float32 (F32, BF16, F16):
// rows in float32 with vector code for the bulk of each row, so that a
// row costs a few passes at memory speed. Float64 uses the generic
// kernels in nnkernels.go.

func layerNorm32(d *Device, y, mean, rstd, x, gamma, beta device.View, eps float64) {
	n := lastDim(x)
	rows := x.Len() / max(n, 1)
	d.rowsParallel(rows, n, func(r0, r1 int) {
		sc := getScratch[float32]()
		defer putScratch(sc)
		gm := load(gamma, gamma.Offset, n, 1, rowScratch(sc.c[:], n))
		bt := load(beta, beta.Offset, n, 1, rowScratch(sc.d[:], n))
		var one [1]float32
		for r := r0; r < r1; r++ {
			xx := load(x, x.Offset+r*n, n, 1, rowScratch(sc.a[:], n))
			out := target(y, y.Offset+r*n, n, 1, rowScratch(sc.b[:], n))
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
	})
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
	dg := make([][]float64, parts)
	db := make([][]float64, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		dg[p], db[p] = make([]float64, n), make([]float64, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := getScratch[float32]()
			defer putScratch(sc)
			gm := load(gamma, gamma.Offset, n, 1, rowScratch(sc.c[:], n))
			bdg, bdb := make([]float32, n), make([]float32, n)
			var mr [2]float32
			start, end := rows*p/parts, rows*(p+1)/parts
			for r := start; r < end; r++ {
				xx := load(x, x.Offset+r*n, n, 1, rowScratch(sc.a[:], n))
				g := load(dy, dy.Offset+r*n, n, 1, rowScratch(sc.b[:], n))
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
				out := target(dx, dx.Offset+r*n, n, 1, rowScratch(sc.d[:], n))
				for i := lnGradDxVector(out, xx, g, gm, mu, rs, a, b); i < n; i++ {
					out[i] = rs * (g[i]*gm[i] - a - (xx[i]-mu)*rs*b)
				}
				store(dx, dx.Offset+r*n, 1, out)
				if (r-start+1)%lnBlockRows == 0 || r == end-1 {
					for i := range bdg {
						dg[p][i] += float64(bdg[i])
						db[p][i] += float64(bdb[i])
					}
					clear(bdg)
					clear(bdb)
				}
			}
		}()
	}
	wg.Wait()
	addParamGrad[float32](dgamma, dg, n)
	addParamGrad[float32](dbeta, db, n)
}

// addParamGrad adds the per-part sums, in part order, into dst (absent
// when the parameter needs no gradient).
func addParamGrad[T float](dst device.View, parts [][]float64, n int) {
	if dst.Buf.Block == nil && dst.Buf.Host == nil {
		return
	}
	sc := getScratch[T]()
	defer putScratch(sc)
	cur := load(dst, dst.Offset, n, 1, rowScratch(sc.a[:], n))
	out := rowScratch(sc.b[:], n)
	for i := range out {
		s := float64(cur[i])
		for _, p := range parts {
			s += p[i]
		}
		out[i] = T(s)
	}
	store(dst, dst.Offset, 1, out)
}
