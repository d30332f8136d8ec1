package cpu

import (
	"math"
	"sync"

	"github.com/memfit/memfit/device"
)

// Reduce reduces src over the dimensions where dst has size 1 (dst may
// omit leading dimensions, which are then reduced too).
func (d *Device) Reduce(op device.ReduceOp, dst, src device.View) {
	if wide(dst, src) {
		reduce[float64](d, op, dst, src)
		return
	}
	reduce[float32](d, op, dst, src)
}

func identity(op device.ReduceOp) float64 {
	switch op {
	case device.Max:
		return math.Inf(-1)
	case device.Min:
		return math.Inf(1)
	}
	return 0
}

func combine(op device.ReduceOp, a, b float64) float64 {
	switch op {
	case device.Max:
		return max(a, b)
	case device.Min:
		return min(a, b)
	}
	return a + b
}

func reduce[T float](d *Device, op device.ReduceOp, dst, src device.View) {
	// dst seen through src's shape: zero strides on the reduced dimensions.
	bd := dst
	bd.Shape = src.Shape
	bd.Strides = make([]int, len(src.Shape))
	lead := len(src.Shape) - len(dst.Shape) // missing leading dims of dst are reduced
	for i := range src.Shape {
		if j := i - lead; j >= 0 && dst.Shape[j] == src.Shape[i] {
			bd.Strides[i] = dst.Strides[j]
		}
	}
	d.Fill(dst, identity(op))
	l := newLoop(src.Shape, src, bd)
	if l.n == 0 {
		return
	}
	rows := l.rows()
	innerReduced := l.istr[1] == 0

	// reduceRow folds a whole row into a float64 (inner dimension reduced).
	// Both take the caller's scratch set (reduceRow uses a, addTo b and c),
	// so a worker holds one set, not three.
	reduceRow := func(sc *scratch[T], off int) float64 {
		acc := identity(op)
		for c := 0; c < l.n; c += chunk {
			m := min(chunk, l.n-c)
			x := load(src, off+c*l.istr[0], m, l.istr[0], sc.a[:])
			for _, v := range x {
				acc = combine(op, acc, float64(v))
			}
		}
		return acc
	}
	addTo := func(sc *scratch[T], off int, v float64) {
		y := load(dst, off, 1, 1, sc.b[:])
		sc.c[0] = T(combine(op, float64(y[0]), v))
		store(dst, off, 1, sc.c[:1])
	}
	doRows := func(r0, r1 int) {
		var offs [2]int
		sc := getScratch[T]()
		defer putScratch(sc)
		for r := r0; r < r1; r++ {
			l.rowOffsets(r, offs[:])
			if innerReduced {
				addTo(sc, offs[1], reduceRow(sc, offs[0]))
				continue
			}
			for c := 0; c < l.n; c += chunk {
				m := min(chunk, l.n-c)
				x := load(src, offs[0]+c*l.istr[0], m, l.istr[0], sc.a[:])
				y := load(dst, offs[1]+c*l.istr[1], m, l.istr[1], sc.b[:])
				out := sc.c[:m]
				for i := range out {
					out[i] = T(combine(op, float64(y[i]), float64(x[i])))
				}
				store(dst, offs[1]+c*l.istr[1], l.istr[1], out)
			}
		}
	}

	distinct := true // every row lands on its own dst elements
	for _, s := range l.ostr[1][:l.nouter] {
		if s == 0 {
			distinct = false
		}
	}
	columns := !innerReduced && !distinct
	for _, s := range l.ostr[1][:l.nouter] {
		columns = columns && s == 0
	}
	switch {
	case columns:
		reduceColumns[T](d, op, &l, src, dst)
	case distinct && rows > 1:
		parallelRange(d.threads, rows*l.n, func(s, e int) {
			// Convert the element range into whole rows (ranges are
			// proportional, so every row is taken exactly once).
			doRows((s+l.n-1)/l.n, (e+l.n-1)/l.n)
		})
	case rows == 1 && innerReduced && l.n >= parallelMin && d.threads > 1:
		// One long reduction: fixed partial results combined in order.
		parts := d.threads
		sums := getScratch[T]()
		defer putScratch(sums)
		partial := sums.sum(0, parts)
		var wg sync.WaitGroup
		for p := 0; p < parts; p++ {
			s, e := l.n*p/parts, l.n*(p+1)/parts
			wg.Add(1)
			go func() {
				defer wg.Done()
				sub := l
				sub.n = e - s
				sub.base = [maxOps]int{l.base[0] + s*l.istr[0], l.base[1]}
				partial[p] = reduceRowOf[T](&sub, src, op)
			}()
		}
		wg.Wait()
		acc := identity(op)
		for _, v := range partial {
			acc = combine(op, acc, v)
		}
		addTo(sums, l.base[1], acc)
	default:
		doRows(0, rows)
	}
}

func reduceRowOf[T float](l *loop, src device.View, op device.ReduceOp) float64 {
	sc := getScratch[T]()
	defer putScratch(sc)
	acc := identity(op)
	for c := 0; c < l.n; c += chunk {
		m := min(chunk, l.n-c)
		x := load(src, l.base[0]+c*l.istr[0], m, l.istr[0], sc.a[:])
		for _, v := range x {
			acc = combine(op, acc, float64(v))
		}
	}
	return acc
}

// reduceColumns reduces every row of l onto the same dst row: only leading
// dimensions are reduced, as in a bias gradient summed over the batch.
// Each column is folded over the rows in order, starting from dst's value
// (the identity Reduce writes first), in an accumulator in T (float32 for
// every 16-bit dtype, so a bf16 sum is rounded once, not at every add);
// goroutines take fixed ranges of columns. So the result is the same
// whatever the thread count, and a reduction cut into consecutive runs of
// rows, each continuing from the sum of the runs before it, gives the
// same bits as one over all the rows: how package tile sums a parameter's
// gradient over tiles of tokens exactly as over the whole sequence.
func reduceColumns[T float](d *Device, op device.ReduceOp, l *loop, src, dst device.View) {
	rows, n := l.rows(), l.n
	parts := 1
	if d.threads > 1 && rows*n >= parallelMin {
		parts = max(1, min(d.threads, n/columnGrain))
	}
	fold := func(p int) {
		// Part p's columns, cut at multiples of columnGrain so that the
		// vector adds of foldInto run on whole registers.
		c0, c1 := n*p/parts/columnGrain*columnGrain, n*(p+1)/parts/columnGrain*columnGrain
		if p == parts-1 {
			c1 = n
		}
		sc := getScratch[T]()
		defer putScratch(sc)
		var offs [maxOps]int
		for c := c0; c < c1; c += chunk {
			m := min(chunk, c1-c)
			acc := sc.c[:m]
			copy(acc, load(dst, l.base[1]+c*l.istr[1], m, l.istr[1], sc.b[:]))
			if l.nouter == 1 {
				// The rows are one run of equal strides (the common
				// [rows, n] case): no per-row division.
				off, step := l.base[0]+c*l.istr[0], l.ostr[0][0]
				for range rows {
					foldInto(op, acc, load(src, off, m, l.istr[0], sc.a[:]))
					off += step
				}
			} else {
				for r := 0; r < rows; r++ {
					l.rowOffsets(r, offs[:l.nops])
					foldInto(op, acc, load(src, offs[0]+c*l.istr[0], m, l.istr[0], sc.a[:]))
				}
			}
			store(dst, l.base[1]+c*l.istr[1], l.istr[1], acc)
		}
	}
	if parts == 1 {
		fold(0)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fold(p)
		}()
	}
	fold(0)
	wg.Wait()
}

// columnGrain is the least number of columns a goroutine of reduceColumns
// takes: one AVX-512 register of float32.
const columnGrain = 16

// foldInto combines x into acc element by element.
func foldInto[T float](op device.ReduceOp, acc, x []T) {
	x = x[:len(acc)]
	switch op {
	case device.Max:
		for i, v := range x {
			acc[i] = max(acc[i], v)
		}
	case device.Min:
		for i, v := range x {
			acc[i] = min(acc[i], v)
		}
	default:
		if a32, ok := any(acc).([]float32); ok {
			k := binaryVector(device.Add, a32, a32, any(x).([]float32))
			acc, x = acc[k:], x[k:]
		}
		for i, v := range x {
			acc[i] += v
		}
	}
}
