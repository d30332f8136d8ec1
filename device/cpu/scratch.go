package cpu

import (
	"runtime"
	"sync"

	"github.com/memfit/memfit/device"
)

// scratch is one worker's row buffers. Kernels take a set for the length
// of their part of a call and give it back; sets are kept in a bounded
// pool, so in steady state no kernel allocates on the Go heap, whatever
// its row width (issue 26: a fresh buffer per row wider than chunk made a
// GPT-2-sized step 9.6 GB of Go garbage).
//
// a..d serve rows of up to chunk elements. A wider row (a 50304-token
// vocabulary) uses wide[i], grown on first need to that width and kept
// with the set, as are sums (per-part float64 sums: layer-norm parameter
// gradients, long reductions) and acc (float accumulators: col2im and
// pooling planes, column reductions).
type scratch[T float] struct {
	a, b, c, d [chunk]T
	wide       [4][]T
	sums       [2][]float64
	acc        []T
}

// row returns n elements of buffer i (0..3 for a..d).
func (s *scratch[T]) row(i, n int) []T {
	if n <= chunk {
		switch i {
		case 0:
			return s.a[:n]
		case 1:
			return s.b[:n]
		case 2:
			return s.c[:n]
		default:
			return s.d[:n]
		}
	}
	s.wide[i] = growTo(s.wide[i], n)
	return s.wide[i]
}

// sum returns n zeroed float64s of sum buffer i.
func (s *scratch[T]) sum(i, n int) []float64 {
	s.sums[i] = growTo(s.sums[i], n)
	clear(s.sums[i])
	return s.sums[i]
}

// accum returns n zeroed elements of the accumulator.
func (s *scratch[T]) accum(n int) []T {
	s.acc = growTo(s.acc, n)
	clear(s.acc)
	return s.acc
}

// growTo returns n elements of buf, reallocating only when it is too
// short: a set grows to the widest row it has served, then stays.
func growTo[E any](buf []E, n int) []E {
	if cap(buf) < n {
		return make([]E, n)
	}
	return buf[:n]
}

// inPlace reports whether a contiguous row of v is read and written as
// []T directly, needing no scratch.
func inPlace[T float](v device.View, str int) bool {
	var zero T
	_, wide := any(zero).(float64)
	return str == 1 && ((v.DType == device.F32 && !wide) || (v.DType == device.F64 && wide))
}

// loadRow is load with scratch buffer i of sc, touched only when v's row
// must be converted or gathered (an F32 row of a 50304-wide vocabulary
// grows no buffer).
func loadRow[T float](v device.View, off, n, str int, sc *scratch[T], i int) []T {
	if inPlace[T](v, str) {
		return load[T](v, off, n, str, nil)
	}
	return load(v, off, n, str, sc.row(i, n))
}

// targetRow is target with scratch buffer i of sc, as loadRow.
func targetRow[T float](v device.View, off, n, str int, sc *scratch[T], i int) []T {
	if inPlace[T](v, str) {
		return load[T](v, off, n, str, nil)
	}
	return sc.row(i, n)
}

// scratchPool keeps idle scratch sets. Unlike a sync.Pool it is not
// emptied by the garbage collector (which would make a wide set garbage,
// and a new one, after every collection), and it keeps at most max sets:
// one per goroutine a kernel runs on, twice over for the reductions that
// take a second set inside a worker. Sets beyond that (many kernels
// called at once from many goroutines) are dropped when given back.
type scratchPool[T float] struct {
	mu   sync.Mutex
	free []*scratch[T]
	max  int
}

// maxScratchSets bounds each pool: 2·GOMAXPROCS + 2 at start-up.
var maxScratchSets = 2*runtime.GOMAXPROCS(0) + 2

var (
	scratch32 = scratchPool[float32]{max: maxScratchSets, free: make([]*scratch[float32], 0, maxScratchSets)}
	scratch64 = scratchPool[float64]{max: maxScratchSets, free: make([]*scratch[float64], 0, maxScratchSets)}
)

func (p *scratchPool[T]) get() *scratch[T] {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		s := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return s
	}
	p.mu.Unlock()
	return new(scratch[T])
}

func (p *scratchPool[T]) put(s *scratch[T]) {
	p.mu.Lock()
	if len(p.free) < p.max {
		p.free = append(p.free, s)
	}
	p.mu.Unlock()
}

func getScratch[T float]() *scratch[T] {
	var z T
	if _, ok := any(z).(float64); ok {
		return any(scratch64.get()).(*scratch[T])
	}
	return any(scratch32.get()).(*scratch[T])
}

func putScratch[T float](s *scratch[T]) {
	if s64, ok := any(s).(*scratch[float64]); ok {
		scratch64.put(s64)
		return
	}
	scratch32.put(any(s).(*scratch[float32]))
}
