package cpu

import (
	"math"
	"sync"

	"github.com/memfit/memfit/device"
)

// rowsParallel calls fn for every row in [0, rows), spread over goroutines
// when the work (rows·width elements) is large.
func (d *Device) rowsParallel(rows, width int, fn func(r0, r1 int)) {
	if rows == 0 {
		return
	}
	parallelRange(d.threads, rows*max(width, 1), func(s, e int) {
		w := max(width, 1)
		fn((s+w-1)/w, (e+w-1)/w)
	})
}

func lastDim(v device.View) int { return v.Shape[len(v.Shape)-1] }

// Softmax computes softmax or log-softmax over the last dimension.
func (d *Device) Softmax(dst, src device.View, log bool) {
	if wide(dst, src) {
		softmax[float64](d, dst, src, log)
		return
	}
	softmax[float32](d, dst, src, log)
}

func softmax[T float](d *Device, dst, src device.View, log bool) {
	n := lastDim(src)
	rows := src.Len() / max(n, 1)
	bf16 := !log && src.DType == device.BF16 && dst.DType == device.BF16
	runRowsJob(d, rows, n, softmaxRows[T]{dst: dst, src: src, n: n, log: log, bf16: bf16})
}

// softmaxRows is Softmax over rows of n elements.
type softmaxRows[T float] struct {
	dst, src  device.View
	n         int
	log, bf16 bool
}

func (k softmaxRows[T]) rows(r0, r1 int) {
	dst, src, n, log, bf16 := k.dst, k.src, k.n, k.log, k.bf16

	sc := getScratch[T]()
	defer putScratch(sc)
	if a32, ok := any(sc.a[:]).([]float32); ok && bf16 &&
		softmaxBF16Rows(u16s(dst)[dst.Offset+r0*n:dst.Offset+r1*n], u16s(src)[src.Offset+r0*n:], a32, n) {
		return
	}
	for r := r0; r < r1; r++ {
		x := loadRow(src, src.Offset+r*n, n, 1, sc, 0)
		y := targetRow(dst, dst.Offset+r*n, n, 1, sc, 1)
		if x32, ok := any(x).([]float32); ok && !log {
			// float32 rows: e^(x-m) once, with exp32, into y.
			y32 := any(y).([]float32)
			m32 := rowMax(x32)
			start := expShiftVector(y32, x32, m32)
			for i := start; i < len(x32); i++ {
				y32[i] = exp32(x32[i] - m32)
			}
			rowScale(y32, 1/rowSum(y32))
			store(dst, dst.Offset+r*n, 1, y)
			continue
		}
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		var s float64
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		if log {
			lse := m + math.Log(s)
			for i, v := range x {
				y[i] = T(float64(v) - lse)
			}
		} else {
			inv := 1 / s
			for i, v := range x {
				y[i] = T(math.Exp(float64(v)-m) * inv)
			}
		}
		store(dst, dst.Offset+r*n, 1, y)
	}
}

// SoftmaxBackward computes dx from the forward output y and dy.
func (d *Device) SoftmaxBackward(dx, y, dy device.View, log bool) {
	if wide(dx, y, dy) {
		softmaxBackward[float64](d, dx, y, dy, log)
		return
	}
	softmaxBackward[float32](d, dx, y, dy, log)
}

func softmaxBackward[T float](d *Device, dx, y, dy device.View, log bool) {
	n := lastDim(y)
	rows := y.Len() / max(n, 1)
	bf16 := !log && dx.DType == device.BF16 && y.DType == device.BF16 && dy.DType == device.BF16
	runRowsJob(d, rows, n, softmaxGradRows[T]{dx: dx, y: y, dy: dy, n: n, log: log, bf16: bf16})
}

// softmaxGradRows is SoftmaxBackward over rows of n elements.
type softmaxGradRows[T float] struct {
	dx, y, dy device.View
	n         int
	log, bf16 bool
}

func (k softmaxGradRows[T]) rows(r0, r1 int) {
	dx, y, dy, n, log, bf16 := k.dx, k.y, k.dy, k.n, k.log, k.bf16

	if bf16 && softmaxGradBF16Rows(u16s(dx)[dx.Offset+r0*n:dx.Offset+r1*n], u16s(y)[y.Offset+r0*n:], u16s(dy)[dy.Offset+r0*n:], n) {
		return
	}
	sc := getScratch[T]()
	defer putScratch(sc)
	for r := r0; r < r1; r++ {
		yy := loadRow(y, y.Offset+r*n, n, 1, sc, 0)
		g := loadRow(dy, dy.Offset+r*n, n, 1, sc, 1)
		out := targetRow(dx, dx.Offset+r*n, n, 1, sc, 2)
		if log {
			// dx = dy - softmax·sum(dy)
			var s float64
			for _, v := range g {
				s += float64(v)
			}
			for i := range out {
				out[i] = T(float64(g[i]) - math.Exp(float64(yy[i]))*s)
			}
		} else {
			// dx = y·(dy - sum(dy·y))
			if o32, ok := any(out).([]float32); ok {
				y32, g32 := any(yy).([]float32), any(g).([]float32)
				s := rowDot(g32, y32)
				for i := softmaxGradVector(o32, y32, g32, s); i < len(o32); i++ {
					o32[i] = y32[i] * (g32[i] - s)
				}
				store(dx, dx.Offset+r*n, 1, out)
				continue
			}
			var s float64
			for i := range g {
				s += float64(g[i]) * float64(yy[i])
			}
			for i := range out {
				out[i] = T(float64(yy[i]) * (float64(g[i]) - s))
			}
		}
		store(dx, dx.Offset+r*n, 1, out)
	}
}

// LayerNorm normalises rows of x, writing each row of x to xc too (as
// Copy converts it) unless xc is the zero View.
func (d *Device) LayerNorm(y, xc, mean, rstd, x, gamma, beta device.View, eps float64) {
	if wide(y, x) {
		layerNorm[float64](d, y, xc, mean, rstd, x, gamma, beta, eps)
		return
	}
	layerNorm32(d, y, xc, mean, rstd, x, gamma, beta, eps)
}

func layerNorm[T float](d *Device, y, xc, mean, rstd, x, gamma, beta device.View, eps float64) {
	n := lastDim(x)
	rows := x.Len() / max(n, 1)
	d.rowsParallel(rows, n, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		gm := loadRow(gamma, gamma.Offset, n, 1, sc, 2)
		bt := loadRow(beta, beta.Offset, n, 1, sc, 3)
		var one [2]T
		for r := r0; r < r1; r++ {
			xx := loadRow(x, x.Offset+r*n, n, 1, sc, 0)
			if xc.DType != device.Invalid {
				store(xc, xc.Offset+r*n, 1, xx)
			}
			out := targetRow(y, y.Offset+r*n, n, 1, sc, 1)
			var mu float64
			for _, v := range xx {
				mu += float64(v)
			}
			mu /= float64(n)
			var vr float64
			for _, v := range xx {
				dv := float64(v) - mu
				vr += dv * dv
			}
			rs := 1 / math.Sqrt(vr/float64(n)+eps)
			for i, v := range xx {
				out[i] = T((float64(v)-mu)*rs)*gm[i] + bt[i]
			}
			store(y, y.Offset+r*n, 1, out)
			one[0], one[1] = T(mu), T(rs)
			store(mean, mean.Offset+r, 1, one[:1])
			store(rstd, rstd.Offset+r, 1, one[1:])
		}
	})
}

// LayerNormBackward writes dx and adds the parameter gradients into dgamma
// and dbeta. Parameter gradients are summed per fixed block of rows and the
// blocks combined in order, so the result does not depend on scheduling.
func (d *Device) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma device.View) {
	if wide(dx, x) {
		layerNormBackward[float64](d, dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
		return
	}
	layerNormBackward32(d, dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
}

func layerNormBackward[T float](d *Device, dx, dgamma, dbeta, dy, x, mean, rstd, gamma device.View) {
	n := lastDim(x)
	rows := x.Len() / max(n, 1)
	parts := 1
	if rows*n >= parallelMin {
		parts = min(d.threads, rows)
	}
	sums := getScratch[T]()
	defer putScratch(sums)
	dgAll, dbAll := sums.sum(0, parts*n), sums.sum(1, parts*n)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := getScratch[T]()
			defer putScratch(sc)
			gm := loadRow(gamma, gamma.Offset, n, 1, sc, 2)
			var mr [2]T
			xhat := sc.sum(0, n)
			dg, db := dgAll[p*n:(p+1)*n], dbAll[p*n:(p+1)*n]
			for r := rows * p / parts; r < rows*(p+1)/parts; r++ {
				xx := loadRow(x, x.Offset+r*n, n, 1, sc, 0)
				g := loadRow(dy, dy.Offset+r*n, n, 1, sc, 1)
				mu := float64(load(mean, mean.Offset+r, 1, 1, mr[:1])[0])
				rs := float64(load(rstd, rstd.Offset+r, 1, 1, mr[1:])[0])
				var s1, s2 float64
				for i := range xx {
					xhat[i] = (float64(xx[i]) - mu) * rs
					gg := float64(g[i]) * float64(gm[i])
					s1 += gg
					s2 += gg * xhat[i]
					dg[i] += float64(g[i]) * xhat[i]
					db[i] += float64(g[i])
				}
				s1 /= float64(n)
				s2 /= float64(n)
				out := targetRow(dx, dx.Offset+r*n, n, 1, sc, 3)
				for i := range out {
					out[i] = T(rs * (float64(g[i])*float64(gm[i]) - s1 - xhat[i]*s2))
				}
				store(dx, dx.Offset+r*n, 1, out)
			}
		}()
	}
	wg.Wait()
	addParamGrad[T](dgamma, dgAll, n)
	addParamGrad[T](dbeta, dbAll, n)
}

// index reads element i of an integer view.
func index(v device.View, i int) int64 {
	if v.DType == device.I64 {
		return i64s(v)[v.Offset+i]
	}
	return int64(i32s(v)[v.Offset+i])
}

// Gather copies the rows of table selected by idx into dst.
func (d *Device) Gather(dst, table, idx device.View) {
	vocab, dim := table.Shape[0], table.Shape[1]
	n := idx.Len()
	for i := 0; i < n; i++ {
		if t := index(idx, i); t < 0 || t >= int64(vocab) {
			panic(&device.IndexError{Op: "embedding", Index: t, Limit: vocab, At: i})
		}
	}
	d.rowsParallel(n, dim, func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			t := int(index(idx, r))
			src := table
			src.Offset = table.Offset + t*dim
			src.Shape, src.Strides = []int{dim}, []int{1}
			dd := dst
			dd.Offset = dst.Offset + r*dim
			dd.Shape, dd.Strides = []int{dim}, []int{1}
			copyRow(dd, src)
		}
	})
}

func copyRow(dst, src device.View) {
	if dst.DType == src.DType && dst.DType.Size() == 4 {
		copy(i32s(dst)[dst.Offset:dst.Offset+dst.Shape[0]], i32s(src)[src.Offset:src.Offset+src.Shape[0]])
		return
	}
	sc := getScratch[float64]()
	defer putScratch(sc)
	n := dst.Shape[0]
	x := loadRow(src, src.Offset, n, 1, sc, 0)
	store(dst, dst.Offset, 1, x)
}

// ScatterAdd adds the rows of src into the rows of dst selected by idx. Runs
// on one goroutine: repeated indices would race and the order of addition
// must not vary.
func (d *Device) ScatterAdd(dst, idx, src device.View) {
	if wide(dst, src) {
		scatterAdd[float64](dst, idx, src)
		return
	}
	scatterAdd[float32](dst, idx, src)
}

func scatterAdd[T float](dst, idx, src device.View) {
	vocab, dim := dst.Shape[0], dst.Shape[1]
	sc := getScratch[T]()
	defer putScratch(sc)
	for i := 0; i < idx.Len(); i++ {
		t := index(idx, i)
		if t < 0 || t >= int64(vocab) {
			panic(&device.IndexError{Op: "embedding backward", Index: t, Limit: vocab, At: i})
		}
		x := loadRow(src, src.Offset+i*dim, dim, 1, sc, 0)
		y := loadRow(dst, dst.Offset+int(t)*dim, dim, 1, sc, 1)
		out := sc.row(2, dim)
		for j := range out {
			out[j] = y[j] + x[j]
		}
		store(dst, dst.Offset+int(t)*dim, 1, out)
	}
}

// Im2Col lays each receptive field of x out as a column of col
// ([N, C·KH·KW, OH·OW]); positions in the padding read as zero.
func (d *Device) Im2Col(col, x device.View, g device.ConvGeom) {
	if wide(col, x) {
		im2col[float64](d, col, x, g)
		return
	}
	im2col[float32](d, col, x, g)
}

func im2col[T float](d *Device, col, x device.View, g device.ConvGeom) {
	plane := g.H * g.W
	dh, dw := g.Dilation()
	outLen := g.OH * g.OW
	d.rowsParallel(g.N*g.C, plane*g.KH*g.KW, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		for nc := r0; nc < r1; nc++ {
			n, c := nc/g.C, nc%g.C
			img := loadRow(x, x.Offset+nc*plane, plane, 1, sc, 0)
			for kh := 0; kh < g.KH; kh++ {
				for kw := 0; kw < g.KW; kw++ {
					row := (c*g.KH+kh)*g.KW + kw
					at := col.Offset + (n*g.C*g.KH*g.KW+row)*outLen
					out := targetRow(col, at, outLen, 1, sc, 1)
					// Output columns whose input column lies inside the
					// image: lo <= ow < hi.
					lo := max(0, (g.PadW-kw*dw+g.StrideW-1)/g.StrideW)
					hi := min(g.OW, (g.W+g.PadW-kw*dw+g.StrideW-1)/g.StrideW)
					for oh := 0; oh < g.OH; oh++ {
						dst := out[oh*g.OW : (oh+1)*g.OW]
						ih := oh*g.StrideH - g.PadH + kh*dh
						if ih < 0 || ih >= g.H || lo >= hi {
							clear(dst)
							continue
						}
						clear(dst[:lo])
						clear(dst[hi:])
						src := img[ih*g.W:]
						base := lo*g.StrideW - g.PadW + kw*dw
						if g.StrideW == 1 {
							copy(dst[lo:hi], src[base:base+hi-lo])
							continue
						}
						for ow := lo; ow < hi; ow++ {
							dst[ow] = src[base+(ow-lo)*g.StrideW]
						}
					}
					store(col, at, 1, out)
				}
			}
		}
	})
}

// Col2Im sums columns back into image positions (the adjoint of Im2Col).
func (d *Device) Col2Im(dx, col device.View, g device.ConvGeom) {
	if wide(dx, col) {
		col2im[float64](d, dx, col, g)
		return
	}
	col2im[float32](d, dx, col, g)
}

func col2im[T float](d *Device, dx, col device.View, g device.ConvGeom) {
	plane := g.H * g.W
	dh, dw := g.Dilation()
	d.rowsParallel(g.N*g.C, plane*g.KH*g.KW, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		outLen := g.OH * g.OW
		acc := sc.accum(plane)
		for nc := r0; nc < r1; nc++ {
			n, c := nc/g.C, nc%g.C
			clear(acc)
			for kh := 0; kh < g.KH; kh++ {
				for kw := 0; kw < g.KW; kw++ {
					row := (c*g.KH+kh)*g.KW + kw
					src := loadRow(col, col.Offset+(n*g.C*g.KH*g.KW+row)*outLen, outLen, 1, sc, 0)
					for oh := 0; oh < g.OH; oh++ {
						ih := oh*g.StrideH - g.PadH + kh*dh
						if ih < 0 || ih >= g.H {
							continue
						}
						for ow := 0; ow < g.OW; ow++ {
							iw := ow*g.StrideW - g.PadW + kw*dw
							if iw >= 0 && iw < g.W {
								acc[ih*g.W+iw] += src[oh*g.OW+ow]
							}
						}
					}
				}
			}
			store(dx, dx.Offset+nc*plane, 1, acc)
		}
	})
}

// Pool applies max or average pooling over KH×KW windows.
func (d *Device) Pool(op device.PoolOp, y, argmax, x device.View, g device.ConvGeom) {
	if wide(y, x) {
		pool[float64](d, op, y, argmax, x, g)
		return
	}
	pool[float32](d, op, y, argmax, x, g)
}

func pool[T float](d *Device, op device.PoolOp, y, argmax, x device.View, g device.ConvGeom) {
	plane, outLen := g.H*g.W, g.OH*g.OW
	var am []int32
	if op == device.MaxPool {
		am = i32s(argmax)
	}
	d.rowsParallel(g.N*g.C, plane, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		for nc := r0; nc < r1; nc++ {
			img := loadRow(x, x.Offset+nc*plane, plane, 1, sc, 0)
			out := sc.row(1, outLen)
			for oh := 0; oh < g.OH; oh++ {
				h0 := oh*g.StrideH - g.PadH
				kh0, kh1 := max(0, -h0), min(g.KH, g.H-h0)
				for ow := 0; ow < g.OW; ow++ {
					w0 := ow*g.StrideW - g.PadW
					kw0, kw1 := max(0, -w0), min(g.KW, g.W-w0)
					o := oh*g.OW + ow
					if op == device.MaxPool {
						bestAt := (h0+kh0)*g.W + w0 + kw0
						best := img[bestAt]
						for kh := kh0; kh < kh1; kh++ {
							rowAt := (h0+kh)*g.W + w0
							for kw := kw0; kw < kw1; kw++ {
								if v := img[rowAt+kw]; v > best {
									best, bestAt = v, rowAt+kw
								}
							}
						}
						out[o] = best
						am[argmax.Offset+nc*outLen+o] = int32(bestAt)
						continue
					}
					var sum T
					for kh := kh0; kh < kh1; kh++ {
						rowAt := (h0+kh)*g.W + w0
						for kw := kw0; kw < kw1; kw++ {
							sum += img[rowAt+kw]
						}
					}
					out[o] = sum / T(g.KH*g.KW)
				}
			}
			store(y, y.Offset+nc*outLen, 1, out)
		}
	})
}

// PoolBackward routes dy back to the inputs each window read.
func (d *Device) PoolBackward(op device.PoolOp, dx, argmax, dy device.View, g device.ConvGeom) {
	if wide(dx, dy) {
		poolBackward[float64](d, op, dx, argmax, dy, g)
		return
	}
	poolBackward[float32](d, op, dx, argmax, dy, g)
}

func poolBackward[T float](d *Device, op device.PoolOp, dx, argmax, dy device.View, g device.ConvGeom) {
	plane, outLen := g.H*g.W, g.OH*g.OW
	var am []int32
	if op == device.MaxPool {
		am = i32s(argmax)
	}
	d.rowsParallel(g.N*g.C, plane, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		acc := sc.accum(plane)
		for nc := r0; nc < r1; nc++ {
			clear(acc)
			gy := loadRow(dy, dy.Offset+nc*outLen, outLen, 1, sc, 0)
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					o := oh*g.OW + ow
					if op == device.MaxPool {
						acc[am[argmax.Offset+nc*outLen+o]] += gy[o]
						continue
					}
					share := gy[o] / T(g.KH*g.KW)
					for kh := 0; kh < g.KH; kh++ {
						ih := oh*g.StrideH - g.PadH + kh
						if ih < 0 || ih >= g.H {
							continue
						}
						for kw := 0; kw < g.KW; kw++ {
							iw := ow*g.StrideW - g.PadW + kw
							if iw >= 0 && iw < g.W {
								acc[ih*g.W+iw] += share
							}
						}
					}
				}
			}
			store(dx, dx.Offset+nc*plane, 1, acc)
		}
	})
}

// CrossEntropy writes the per-row loss of logits against integer targets,
// with label smoothing s: loss = -(1-s)·logp[t] - s/C·Σ logp.
func (d *Device) CrossEntropy(loss, logits, targets device.View, ignore int, smoothing float64) {
	if wide(loss, logits) {
		crossEntropy[float64](d, loss, logits, targets, ignore, smoothing, device.View{}, false)
		return
	}
	crossEntropy[float32](d, loss, logits, targets, ignore, smoothing, device.View{}, false)
}

// CrossEntropyBackward writes dlogits = dloss·(softmax - (1-s)·onehot - s/C).
func (d *Device) CrossEntropyBackward(dlogits, logits, targets, dloss device.View, ignore int, smoothing float64) {
	if wide(dlogits, logits) {
		crossEntropy[float64](d, dlogits, logits, targets, ignore, smoothing, dloss, true)
		return
	}
	crossEntropy[float32](d, dlogits, logits, targets, ignore, smoothing, dloss, true)
}

func crossEntropy[T float](d *Device, out, logits, targets device.View, ignore int, s float64, dloss device.View, backward bool) {
	c := lastDim(logits)
	rows := logits.Len() / max(c, 1)
	for r := 0; r < rows; r++ {
		if t := index(targets, r); t != int64(ignore) && (t < 0 || t >= int64(c)) {
			panic(&device.IndexError{Op: "cross entropy target", Index: t, Limit: c, At: r})
		}
	}
	runRowsJob(d, rows, c, crossEntropyRows[T]{out: out, logits: logits, targets: targets, dloss: dloss, c: c, ignore: ignore, s: s, backward: backward})
}

// crossEntropyRows is CrossEntropy (or its backward) over rows of c logits.
type crossEntropyRows[T float] struct {
	out, logits, targets, dloss device.View
	c, ignore                   int
	s                           float64
	backward                    bool
}

func (k crossEntropyRows[T]) rows(r0, r1 int) {
	out, logits, targets, dloss, c, ignore, s, backward := k.out, k.logits, k.targets, k.dloss, k.c, k.ignore, k.s, k.backward

	sc := getScratch[T]()
	defer putScratch(sc)
	var oneBuf [1]T
	one := oneBuf[:]
	for r := r0; r < r1; r++ {
		t := int(index(targets, r))
		x := loadRow(logits, logits.Offset+r*c, c, 1, sc, 0)
		if x32, ok := any(x).([]float32); ok {
			g32 := any(sc.row(1, c)).([]float32)
			one32 := any(one).([]float32)
			var up float32
			if backward && t != ignore {
				up = float32(load(dloss, dloss.Offset+r, 1, 1, sc.c[:1])[0])
			}
			crossEntropyRow32(x32, g32, one32, t, ignore, float32(s), backward, up)
			if backward {
				store(out, out.Offset+r*c, 1, any(g32).([]T))
			} else {
				store(out, out.Offset+r, 1, one)
			}
			continue
		}
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		var se, sx float64
		for _, v := range x {
			se += math.Exp(float64(v) - m)
			sx += float64(v)
		}
		lse := m + math.Log(se)
		if !backward {
			if t == ignore {
				one[0] = 0
			} else {
				// Σ logp = Σx - C·lse
				one[0] = T(-(1-s)*(float64(x[t])-lse) - s/float64(c)*(sx-float64(c)*lse))
			}
			store(out, out.Offset+r, 1, one)
			continue
		}
		g := sc.row(1, c)
		if t == ignore {
			clear(g)
		} else {
			up := float64(load(dloss, dloss.Offset+r, 1, 1, sc.c[:1])[0])
			for i, v := range x {
				p := math.Exp(float64(v) - lse)
				q := s / float64(c)
				if i == t {
					q += 1 - s
				}
				g[i] = T(up * (p - q))
			}
		}
		store(out, out.Offset+r*c, 1, g)
	}
}

// crossEntropyRow32 is one row of CrossEntropy (backward false: the loss
// into one[0]) or of its backward (g, scaled by the upstream gradient up)
// in float32 with vector code; g doubles as the row's exponentials.
func crossEntropyRow32(x, g, one []float32, t, ignore int, s float32, backward bool, u float32) {
	if t == ignore {
		one[0] = 0
		clear(g)
		return
	}
	c := float32(len(x))
	m := rowMax(x)
	for i := expShiftVector(g, x, m); i < len(x); i++ {
		g[i] = exp32(x[i] - m)
	}
	se := rowSum(g)
	lse := m + float32(math.Log(float64(se)))
	if !backward {
		// Σ logp = Σx - C·lse
		one[0] = -(1-s)*(x[t]-lse) - s/c*(rowSum(x)-c*lse)
		return
	}
	rowScale(g, u/se)
	if s != 0 {
		q := u * s / c
		for i := range g {
			g[i] -= q
		}
	}
	g[t] -= u * (1 - s)
}
