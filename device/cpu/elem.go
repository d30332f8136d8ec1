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

// loop is a strided loop nest over one shape shared by several operands,
// with adjacent dimensions merged wherever every operand allows it.
type loop struct {
	outer []int   // sizes of the outer dimensions
	ostr  [][]int // per operand, strides of the outer dimensions
	n     int     // size of the innermost dimension
	istr  []int   // per operand, stride of the innermost dimension
	base  []int   // per operand, element offset
}

func newLoop(shape []int, views ...device.View) *loop {
	// Drop size-1 dimensions and merge dimension i into i+1 whenever every
	// operand is contiguous across them.
	type dim struct {
		size int
		str  []int
	}
	var dims []dim
	for i, s := range shape {
		if s == 1 {
			continue
		}
		str := make([]int, len(views))
		for k, v := range views {
			str[k] = v.Strides[i]
		}
		if len(dims) > 0 {
			last := &dims[len(dims)-1]
			mergeable := true
			for k := range views {
				if last.str[k] != str[k]*s {
					mergeable = false
					break
				}
			}
			if mergeable {
				last.size *= s
				copy(last.str, str)
				continue
			}
		}
		dims = append(dims, dim{s, str})
	}
	l := &loop{n: 1, istr: make([]int, len(views)), base: make([]int, len(views)), ostr: make([][]int, len(views))}
	for k, v := range views {
		l.base[k] = v.Offset
	}
	for _, d := range shape {
		if d == 0 {
			l.n = 0
			return l
		}
	}
	if len(dims) == 0 {
		return l
	}
	in := dims[len(dims)-1]
	l.n = in.size
	copy(l.istr, in.str)
	for _, d := range dims[:len(dims)-1] {
		l.outer = append(l.outer, d.size)
	}
	for k := range views {
		l.ostr[k] = make([]int, len(l.outer))
		for i, d := range dims[:len(dims)-1] {
			l.ostr[k][i] = d.str[k]
		}
	}
	return l
}

func (l *loop) rows() int {
	r := 1
	for _, s := range l.outer {
		r *= s
	}
	return r
}

// rowOffsets writes the element offset of row r for every operand.
func (l *loop) rowOffsets(r int, offs []int) {
	copy(offs, l.base)
	for i := len(l.outer) - 1; i >= 0; i-- {
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
// results never depend on scheduling.
func (l *loop) run(threads int, fn func(pos int, offs []int, m int)) {
	total := l.rows() * l.n
	if total == 0 {
		return
	}
	work := func(start, end int) {
		offs := make([]int, len(l.base))
		for pos := start; pos < end; {
			r, c := pos/l.n, pos%l.n
			m := min(l.n-c, end-pos, chunk)
			l.rowOffsets(r, offs)
			for k := range offs {
				offs[k] += c * l.istr[k]
			}
			fn(pos, offs, m)
			pos += m
		}
	}
	parallelRange(threads, total, work)
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

// Typed access to buffers. The buffers are Go memory kept alive by the raw
// allocator's segment map, so reinterpreting their bytes is safe.

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
		for i := start; i < len(vals); i++ {
			s[off+i*str] = BF16FromF32(float32(vals[i]))
		}
	case device.F16:
		s := u16s(v)
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
	default:
		panic(fmt.Sprintf("cpu: cannot store dtype %v", v.DType))
	}
}

// scratch holds a worker's gather buffers; pooled so that steady-state
// kernels allocate nothing.
type scratch[T float] struct{ a, b, c, d [chunk]T }

var scratch32 = sync.Pool{New: func() any { return new(scratch[float32]) }}
var scratch64 = sync.Pool{New: func() any { return new(scratch[float64]) }}

func wide(views ...device.View) bool {
	for _, v := range views {
		if v.DType == device.F64 {
			return true
		}
	}
	return false
}

func f32bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}
