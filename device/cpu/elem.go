package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/memfit/memfit/device"
)

// float is the arithmetic type a kernel computes in: F64 work runs in
// float64, everything else (F32, F16, BF16) in float32.
type float interface{ ~float32 | ~float64 }

// chunk is the number of elements a worker converts or gathers at a time;
// it bounds the scratch memory of every elementwise kernel.
const chunk = 2048

// parallelMin is the element count below which a kernel runs on one
// goroutine: under it, starting goroutines costs more than it saves.
const parallelMin = 1 << 15

// maxOps and maxDims bound a loop: the most operands of one kernel and the
// most dimensions left after merging (tensors of more than maxDims
// dimensions that no operand lets merge are refused).
const (
	maxOps  = 4
	maxDims = 16
)

// loop is a strided loop nest over one shape shared by several operands,
// with adjacent dimensions merged wherever every operand allows it. It is
// a value of fixed size, so that making one allocates nothing.
type loop struct {
	nops   int
	nouter int
	outer  [maxDims]int         // sizes of the outer dimensions
	ostr   [maxOps][maxDims]int // per operand, strides of the outer dimensions
	n      int                  // size of the innermost dimension
	istr   [maxOps]int          // per operand, stride of the innermost dimension
	base   [maxOps]int          // per operand, element offset
}

func newLoop(shape []int, views ...device.View) loop {
	if len(views) > maxOps {
		panic(fmt.Sprintf("cpu: a kernel of %d operands; at most %d", len(views), maxOps))
	}
	l := loop{nops: len(views), n: 1}
	for k, v := range views {
		l.base[k] = v.Offset
	}
	for _, d := range shape {
		if d == 0 {
			l.n = 0
			return l
		}
	}
	// Drop size-1 dimensions and merge dimension i into i+1 whenever every
	// operand is contiguous across them.
	var size [maxDims + 1]int
	var str [maxDims + 1][maxOps]int
	nd := 0
	for i, sz := range shape {
		if sz == 1 {
			continue
		}
		if nd > 0 {
			mergeable := true
			for k, v := range views {
				if str[nd-1][k] != v.Strides[i]*sz {
					mergeable = false
					break
				}
			}
			if mergeable {
				size[nd-1] *= sz
				for k, v := range views {
					str[nd-1][k] = v.Strides[i]
				}
				continue
			}
		}
		if nd == maxDims+1 {
			panic(fmt.Sprintf("cpu: a loop over shape %v: more than %d dimensions that do not merge", shape, maxDims+1))
		}
		size[nd] = sz
		for k, v := range views {
			str[nd][k] = v.Strides[i]
		}
		nd++
	}
	if nd == 0 {
		return l
	}
	l.n = size[nd-1]
	l.istr = str[nd-1]
	l.nouter = nd - 1
	for i := range l.nouter {
		l.outer[i] = size[i]
		for k := range views {
			l.ostr[k][i] = str[i][k]
		}
	}
	return l
}

func (l *loop) rows() int {
	r := 1
	for _, s := range l.outer[:l.nouter] {
		r *= s
	}
	return r
}

// rowOffsets writes the element offset of row r for every operand.
func (l *loop) rowOffsets(r int, offs []int) {
	copy(offs, l.base[:l.nops])
	for i := l.nouter - 1; i >= 0; i-- {
		c := r % l.outer[i]
		r /= l.outer[i]
		for k := range offs {
			offs[k] += c * l.ostr[k][i]
		}
	}
}

// run calls fn over pieces of the iteration space: fn gets each operand's
// offset for the piece's first element and the piece's length m; the
// operands advance by l.istr inside a piece. Pieces are at most chunk long
// and are spread over up to threads goroutines in a fixed partition, so
// results never depend on scheduling. The hot elementwise kernels use
// runRows instead, which allocates nothing.
func (l *loop) run(threads int, fn func(pos int, offs []int, m int)) {
	runRows(threads, l, closureK{fn, l.nops})
}

// closureK adapts run's function to a rowKernel.
type closureK struct {
	fn   func(pos int, offs []int, m int)
	nops int
}

func (k closureK) row(pos int, offs, _ [maxOps]int, m int) { k.fn(pos, offs[:k.nops], m) }

// rowKernel is an elementwise kernel as a value: row processes the m
// elements at iteration position pos, operand k starting at offs[k] with
// stride istr[k]. Kernels are small structs passed by value, so that
// running one on the calling goroutine allocates nothing (a closure
// handed to the worker goroutines would have to live on the heap).
type rowKernel interface {
	row(pos int, offs, istr [maxOps]int, m int)
}

// runRows runs k over the loop like run: on the calling goroutine below
// parallelMin elements, without allocating; above it, split over up to
// threads goroutines (which costs a few small allocations, nothing next
// to the work).
func runRows[K rowKernel](threads int, l *loop, k K) {
	total := l.rows() * l.n
	if total == 0 {
		return
	}
	if threads <= 1 || total < parallelMin {
		rowsOf(l, 0, total, k)
		return
	}
	lc, kc := *l, k
	parallelRange(threads, total, func(start, end int) { rowsOf(&lc, start, end, kc) })
}

func rowsOf[K rowKernel](l *loop, start, end int, k K) {
	// Offsets of the current row, stepped like an odometer from row to row
	// (short strided rows, as attention heads, would otherwise spend more
	// time dividing out their indices than moving their elements).
	var offs, base [maxOps]int
	var idx [maxDims]int
	r, c := start/l.n, start%l.n
	for i := l.nouter - 1; i >= 0; i-- {
		idx[i] = r % l.outer[i]
		r /= l.outer[i]
	}
	for op := range l.nops {
		base[op] = l.base[op]
		for i := range l.nouter {
			base[op] += idx[i] * l.ostr[op][i]
		}
	}
	for pos := start; pos < end; {
		m := min(l.n-c, end-pos, chunk)
		for op := range l.nops {
			offs[op] = base[op] + c*l.istr[op]
		}
		k.row(pos, offs, l.istr, m)
		pos += m
		if c += m; c < l.n {
			continue
		}
		c = 0
		for i := l.nouter - 1; i >= 0; i-- {
			idx[i]++
			for op := range l.nops {
				base[op] += l.ostr[op][i]
			}
			if idx[i] < l.outer[i] {
				break
			}
			idx[i] = 0
			for op := range l.nops {
				base[op] -= l.outer[i] * l.ostr[op][i]
			}
		}
	}
}

// parallelRange splits [0, total) into equal contiguous parts, one per
// goroutine, when total is large enough to pay for them.
func parallelRange(threads, total int, work func(start, end int)) {
	if threads <= 1 || total < parallelMin {
		work(0, total)
		return
	}
	parts := min(threads, total/(parallelMin/2))
	if parts <= 1 {
		work(0, total)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		s, e := total*p/parts, total*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(s, e)
		}()
	}
	wg.Wait()
}

// Typed access to buffers. The buffers are segments the raw allocator
// holds (mapped, or Go memory it keeps reachable) for as long as a block
// of theirs is live, so reinterpreting their bytes is safe.

func f32s(v device.View) []float32 {
	b := v.Buf.Host
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func f64s(v device.View) []float64 {
	b := v.Buf.Host
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), len(b)/8)
}

func u16s(v device.View) []uint16 {
	b := v.Buf.Host
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

func i32s(v device.View) []int32 {
	b := v.Buf.Host
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func i64s(v device.View) []int64 {
	b := v.Buf.Host
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// load returns m elements of v starting at off with stride str, as T. When v
// already holds T contiguously it returns the buffer itself (no copy);
// otherwise it gathers and converts into scratch.
func load[T float](v device.View, off, m, str int, scratch []T) []T {
	var zero T
	_, wide := any(zero).(float64)
	if str == 1 {
		if v.DType == device.F32 && !wide {
			s := f32s(v)[off : off+m]
			return *(*[]T)(unsafe.Pointer(&s))
		}
		if v.DType == device.F64 && wide {
			s := f64s(v)[off : off+m]
			return *(*[]T)(unsafe.Pointer(&s))
		}
	}
	out := scratch[:m]
	switch v.DType {
	case device.F32:
		s := f32s(v)
		for i := range out {
			out[i] = T(s[off+i*str])
		}
	case device.F64:
		s := f64s(v)
		for i := range out {
			out[i] = T(s[off+i*str])
		}
	case device.BF16:
		s := u16s(v)
		start := 0
		if o32, ok := any(out).([]float32); ok && str == 1 {
			start = f32FromBF16Vector(o32, s[off:off+m])
		}
		for i := start; i < len(out); i++ {
			out[i] = T(F32FromBF16(s[off+i*str]))
		}
	case device.F16:
		s := u16s(v)
		for i := range out {
			out[i] = T(F32FromF16(s[off+i*str]))
		}
	case device.I32:
		s := i32s(v)
		for i := range out {
			out[i] = T(s[off+i*str])
		}
	case device.I64:
		s := i64s(v)
		for i := range out {
			out[i] = T(s[off+i*str])
		}
	case device.U8:
		s := u8s(v)
		for i := range out {
			out[i] = T(s[off+i*str])
		}
	default:
		panic(fmt.Sprintf("cpu: cannot load dtype %v", v.DType))
	}
	return out
}

// target returns where a kernel should write m results for v: the buffer
// itself when v holds T contiguously, else scratch, to be passed to store.
func target[T float](v device.View, off, m, str int, scratch []T) []T {
	var zero T
	_, wide := any(zero).(float64)
	if str == 1 && ((v.DType == device.F32 && !wide) || (v.DType == device.F64 && wide)) {
		return load[T](v, off, m, str, nil)
	}
	return scratch[:m]
}

// store writes vals into v at off with stride str, converting as needed. It
// is a no-op when vals is already v's memory (see target).
func store[T float](v device.View, off, str int, vals []T) {
	m := len(vals)
	if m == 0 {
		return
	}
	var zero T
	_, wide := any(zero).(float64)
	if str == 1 && ((v.DType == device.F32 && !wide) || (v.DType == device.F64 && wide)) {
		dst := load[T](v, off, m, 1, nil)
		if &dst[0] == &vals[0] {
			return
		}
		copy(dst, vals)
		return
	}
	switch v.DType {
	case device.F32:
		s := f32s(v)
		for i, x := range vals {
			s[off+i*str] = float32(x)
		}
	case device.F64:
		s := f64s(v)
		for i, x := range vals {
			s[off+i*str] = float64(x)
		}
	case device.BF16:
		s := u16s(v)
		start := 0
		if v32, ok := any(vals).([]float32); ok && str == 1 {
			start = bf16FromF32Vector(s[off:off+m], v32)
		}
		if v64, ok := any(vals).([]float64); ok {
			for i, x := range v64 {
				s[off+i*str] = BF16FromF64(x) // once, not through float32
			}
			return
		}
		for i := start; i < len(vals); i++ {
			s[off+i*str] = BF16FromF32(float32(vals[i]))
		}
	case device.F16:
		s := u16s(v)
		if v64, ok := any(vals).([]float64); ok {
			for i, x := range v64 {
				s[off+i*str] = F16FromF64(x)
			}
			return
		}
		for i, x := range vals {
			s[off+i*str] = F16FromF32(float32(x))
		}
	case device.I32:
		s := i32s(v)
		for i, x := range vals {
			s[off+i*str] = int32(x)
		}
	case device.I64:
		s := i64s(v)
		for i, x := range vals {
			s[off+i*str] = int64(x)
		}
	case device.U8:
		s := u8s(v)
		for i, x := range vals {
			s[off+i*str] = uint8(x)
		}
	default:
		panic(fmt.Sprintf("cpu: cannot store dtype %v", v.DType))
	}
}

func wide(views ...device.View) bool {
	for _, v := range views {
		if v.DType == device.F64 {
			return true
		}
	}
	return false
}
