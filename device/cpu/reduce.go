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
	reduceRow := func(off int) float64 {
		sc := getScratch[T]()
		acc := identity(op)
		for c := 0; c < l.n; c += chunk {
			m := min(chunk, l.n-c)
			x := load(src, off+c*l.istr[0], m, l.istr[0], sc.a[:])
			for _, v := range x {
				acc = combine(op, acc, float64(v))
			}
		}
		putScratch(sc)
		return acc
	}
	addTo := func(off int, v float64) {
		sc := getScratch[T]()
		y := load(dst, off, 1, 1, sc.b[:])
		sc.c[0] = T(combine(op, float64(y[0]), v))
		store(dst, off, 1, sc.c[:1])
		putScratch(sc)
	}
	doRows := func(r0, r1 int) {
		offs := make([]int, 2)
		sc := getScratch[T]()
		defer putScratch(sc)
		for r := r0; r < r1; r++ {
			l.rowOffsets(r, offs)
			if innerReduced {
				addTo(offs[1], reduceRow(offs[0]))
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
	switch {
	case distinct && rows > 1:
		parallelRange(d.threads, rows*l.n, func(s, e int) {
			// Convert the element range into whole rows (ranges are
			// proportional, so every row is taken exactly once).
			doRows((s+l.n-1)/l.n, (e+l.n-1)/l.n)
		})
	case rows == 1 && innerReduced && l.n >= parallelMin && d.threads > 1:
		// One long reduction: fixed partial results combined in order.
		parts := d.threads
		partial := make([]float64, parts)
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
		addTo(l.base[1], acc)
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
