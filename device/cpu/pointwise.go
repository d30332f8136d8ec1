package cpu

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
)

// Fill sets every element of dst to v.
func (d *Device) Fill(dst device.View, v float64) {
	// Every dtype is filled as raw bits: v is converted once, not once per
	// element.
	l := newLoop(dst.Shape, dst)
	switch dst.DType {
	case device.BF16:
		runRows(d.threads, &l, fillK[uint16]{u16s(dst), BF16FromF64(v)})
	case device.F16:
		runRows(d.threads, &l, fillK[uint16]{u16s(dst), F16FromF64(v)})
	case device.F32:
		runRows(d.threads, &l, fillK[int32]{i32s(dst), int32(math.Float32bits(float32(v)))})
	case device.I32:
		runRows(d.threads, &l, fillK[int32]{i32s(dst), int32(v)})
	case device.F64:
		runRows(d.threads, &l, fillK[int64]{i64s(dst), int64(math.Float64bits(v))})
	case device.I64:
		runRows(d.threads, &l, fillK[int64]{i64s(dst), int64(v)})
	case device.U8:
		runRows(d.threads, &l, fillK[uint8]{u8s(dst), uint8(v)})
	default:
		panic(fmt.Sprintf("cpu: cannot fill dtype %v", dst.DType))
	}
}

// fillK writes the bits v into every element of a row.
type fillK[E uint8 | uint16 | int32 | int64] struct {
	y []E
	v E
}

func (k fillK[E]) row(_ int, offs, istr [maxOps]int, m int) {
	if istr[0] == 1 {
		fillBits(k.y[offs[0]:offs[0]+m], k.v)
		return
	}
	for i := 0; i < m; i++ {
		k.y[offs[0]+i*istr[0]] = k.v
	}
}

// fillBits sets every element of y to v at memory-copy speed: zero through
// the runtime's clear, anything else by doubling copies.
func fillBits[E uint8 | uint16 | int32 | int64](y []E, v E) {
	if len(y) == 0 {
		return
	}
	if v == 0 {
		clear(y)
		return
	}
	// A short run (a causal mask's row tail) by plain stores; a long one
	// seeded with 64 elements and doubled by copies.
	k := min(len(y), 64)
	for i := range y[:k] {
		y[i] = v
	}
	for ; k < len(y); k *= 2 {
		copy(y[k:], y[:k])
	}
}

// Copy copies src into dst, converting dtypes.
func (d *Device) Copy(dst, src device.View) {
	if dst.DType == src.DType {
		copySame(d, dst, src)
		return
	}
	if wide(dst, src) || !dst.DType.IsFloat() || !src.DType.IsFloat() {
		copyConvert[float64](d, dst, src)
		return
	}
	copyConvert[float32](d, dst, src)
}

func copyConvert[T float](d *Device, dst, src device.View) {
	l := newLoop(dst.Shape, dst, src)
	runRows(d.threads, &l, copyK[T]{dst, src})
}

type copyK[T float] struct{ dst, src device.View }

func (k copyK[T]) row(_ int, offs, istr [maxOps]int, m int) {
	sc := getScratch[T]()
	// Converted straight into dst where dst holds T contiguously (a widen
	// from bf16 into F32), through scratch otherwise.
	x := load(k.src, offs[1], m, istr[1], target(k.dst, offs[0], m, istr[0], sc.a[:]))
	store(k.dst, offs[0], istr[0], x)
	putScratch(sc)
}

func copySame(d *Device, dst, src device.View) {
	switch dst.DType.Size() {
	case 1:
		copyElems(d, u8s(dst), u8s(src), dst, src)
	case 2:
		copyElems(d, u16s(dst), u16s(src), dst, src)
	case 4:
		copyElems(d, i32s(dst), i32s(src), dst, src)
	case 8:
		copyElems(d, i64s(dst), i64s(src), dst, src)
	}
}

// copyElems copies strided elements of one width, as raw bits.
func copyElems[E uint8 | uint16 | int32 | int64](d *Device, y, x []E, dst, src device.View) {
	l := newLoop(dst.Shape, dst, src)
	runRows(d.threads, &l, copyElemsK[E]{y, x})
}

type copyElemsK[E uint8 | uint16 | int32 | int64] struct{ y, x []E }

func (k copyElemsK[E]) row(_ int, offs, istr [maxOps]int, m int) {
	sd, ss := istr[0], istr[1]
	if sd == 1 && ss == 1 {
		copy(k.y[offs[0]:offs[0]+m], k.x[offs[1]:offs[1]+m])
		return
	}
	for i := 0; i < m; i++ {
		k.y[offs[0]+i*sd] = k.x[offs[1]+i*ss]
	}
}

// Unary computes dst = op(src).
func (d *Device) Unary(op device.UnaryOp, dst, src device.View, arg float64) {
	if wide(dst, src) {
		unary[float64](d, op, dst, src, arg)
		return
	}
	unary[float32](d, op, dst, src, arg)
}

func unary[T float](d *Device, op device.UnaryOp, dst, src device.View, arg float64) {
	l := newLoop(dst.Shape, dst, src)
	k := unaryK[T]{op, dst, src, T(arg)}
	if op == device.Gelu && dst.DType == device.BF16 && src.DType == device.BF16 {
		runRows(d.threads, &l, geluBF16K{any(k).(unaryK[float32])})
		return
	}
	runRows(d.threads, &l, k)
}

// geluBF16K runs GELU on bfloat16 rows without widening them through
// scratch: the vector kernel converts in registers (the model's MLP
// activations under bf16 autocast). Strided rows and tails take the
// float32 path, which rounds the same way.
type geluBF16K struct{ unaryK[float32] }

func (k geluBF16K) row(w int, offs, istr [maxOps]int, m int) {
	if istr[0] == 1 && istr[1] == 1 {
		n := geluBF16Vector(u16s(k.dst)[offs[0]:offs[0]+m], u16s(k.src)[offs[1]:offs[1]+m])
		offs[0] += n
		offs[1] += n
		m -= n
	}
	if m > 0 {
		k.unaryK.row(w, offs, istr, m)
	}
}

type unaryK[T float] struct {
	op       device.UnaryOp
	dst, src device.View
	arg      T
}

func (k unaryK[T]) row(_ int, offs, istr [maxOps]int, m int) {
	sc := getScratch[T]()
	x := load(k.src, offs[1], m, istr[1], sc.a[:])
	y := target(k.dst, offs[0], m, istr[0], sc.b[:])
	unaryRow(k.op, y, x, k.arg)
	store(k.dst, offs[0], istr[0], y)
	putScratch(sc)
}

const geluC = 0.7978845608028654 // sqrt(2/pi)

func unaryRow[T float](op device.UnaryOp, y, x []T, arg T) {
	if x32, ok := any(x).([]float32); ok && unaryRow32(op, any(y).([]float32), x32) {
		return
	}
	x = x[:len(y)]
	switch op {
	case device.Neg:
		for i, v := range x {
			y[i] = -v
		}
	case device.Exp:
		for i, v := range x {
			y[i] = T(math.Exp(float64(v)))
		}
	case device.Log:
		for i, v := range x {
			y[i] = T(math.Log(float64(v)))
		}
	case device.Sqrt:
		for i, v := range x {
			y[i] = T(math.Sqrt(float64(v)))
		}
	case device.Tanh:
		for i, v := range x {
			y[i] = T(math.Tanh(float64(v)))
		}
	case device.Sigmoid:
		for i, v := range x {
			y[i] = T(1 / (1 + math.Exp(-float64(v))))
		}
	case device.Relu:
		start := 0
		if y32, ok := any(y).([]float32); ok {
			start = reluVector(y32, any(x).([]float32))
		}
		for i := start; i < len(y); i++ {
			if v := x[i]; v > 0 {
				y[i] = v
			} else {
				y[i] = 0
			}
		}
	case device.Gelu:
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + math.Tanh(geluC*(f+0.044715*f*f*f))))
		}
	case device.Abs:
		for i, v := range x {
			y[i] = T(math.Abs(float64(v)))
		}
	case device.Square:
		for i, v := range x {
			y[i] = v * v
		}
	case device.Recip:
		for i, v := range x {
			y[i] = 1 / v
		}
	case device.PowScalar:
		for i, v := range x {
			y[i] = T(math.Pow(float64(v), float64(arg)))
		}
	case device.AddScalar:
		for i, v := range x {
			y[i] = v + arg
		}
	case device.MulScalar:
		for i, v := range x {
			y[i] = v * arg
		}
	case device.GeluErf:
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	default:
		panic("cpu: unknown unary op " + op.String())
	}
}

// UnaryBackward computes dx = dy·op'(x).
func (d *Device) UnaryBackward(op device.UnaryOp, dx, x, y, dy device.View, arg float64) {
	if wide(dx, dy) {
		unaryBackward[float64](d, op, dx, x, y, dy, arg)
		return
	}
	unaryBackward[float32](d, op, dx, x, y, dy, arg)
}

func unaryBackward[T float](d *Device, op device.UnaryOp, dx, x, y, dy device.View, arg float64) {
	needX, needY := device.UnaryNeeds(op)
	in := dy // the operand UnaryNeeds asks for; dy stands in when none is needed
	if needX {
		in = x
	} else if needY {
		in = y
	}
	l := newLoop(dx.Shape, dx, dy, in)
	k := zipK[T, unaryGradFn[T]]{dx, dy, in, unaryGradFn[T]{op, T(arg)}}
	if op == device.Gelu && dx.DType == device.BF16 && dy.DType == device.BF16 && in.DType == device.BF16 {
		runRows(d.threads, &l, geluGradBF16K{any(k).(zipK[float32, unaryGradFn[float32]])})
		return
	}
	runRows(d.threads, &l, k)
}

// geluGradBF16K is geluBF16K for the gradient: a is dy, b is x.
type geluGradBF16K struct {
	zipK[float32, unaryGradFn[float32]]
}

func (k geluGradBF16K) row(w int, offs, istr [maxOps]int, m int) {
	if istr[0] == 1 && istr[1] == 1 && istr[2] == 1 {
		n := geluGradBF16Vector(u16s(k.dst)[offs[0]:offs[0]+m], u16s(k.b)[offs[2]:offs[2]+m], u16s(k.a)[offs[1]:offs[1]+m])
		for i := range offs[:3] {
			offs[i] += n
		}
		m -= n
	}
	if m > 0 {
		k.zipK.row(w, offs, istr, m)
	}
}

// zipK is the shape of most elementwise kernels: f combines two loaded
// operands, a and b, into dst.
type zipK[T float, F zipFn[T]] struct {
	dst, a, b device.View
	f         F
}

type zipFn[T float] interface{ apply(y, a, b []T) }

func (k zipK[T, F]) row(_ int, offs, istr [maxOps]int, m int) {
	sc := getScratch[T]()
	x := load(k.a, offs[1], m, istr[1], sc.a[:])
	z := load(k.b, offs[2], m, istr[2], sc.b[:])
	y := target(k.dst, offs[0], m, istr[0], sc.c[:])
	k.f.apply(y, x, z)
	store(k.dst, offs[0], istr[0], y)
	putScratch(sc)
}

// unaryGradFn: a is dy, b the input UnaryNeeds asks for.
type unaryGradFn[T float] struct {
	op  device.UnaryOp
	arg T
}

func (f unaryGradFn[T]) apply(y, dy, in []T) { unaryGradRow(f.op, y, in, dy, f.arg) }

// unaryGradRow computes out = g·f' where v is x or y as UnaryNeeds says.
func unaryGradRow[T float](op device.UnaryOp, out, v, g []T, arg T) {
	if v32, ok := any(v).([]float32); ok && op == device.Gelu {
		geluGrad32(any(out).([]float32), v32, any(g).([]float32))
		return
	}
	v, g = v[:len(out)], g[:len(out)]
	switch op {
	case device.Neg:
		for i := range out {
			out[i] = -g[i]
		}
	case device.Exp:
		for i := range out {
			out[i] = g[i] * v[i]
		}
	case device.Log:
		for i := range out {
			out[i] = g[i] / v[i]
		}
	case device.Sqrt:
		for i := range out {
			out[i] = g[i] * 0.5 / v[i]
		}
	case device.Tanh:
		for i := range out {
			out[i] = g[i] * (1 - v[i]*v[i])
		}
	case device.Sigmoid:
		for i := range out {
			out[i] = g[i] * v[i] * (1 - v[i])
		}
	case device.Relu:
		start := 0
		if o32, ok := any(out).([]float32); ok {
			start = reluGradVector(o32, any(v).([]float32), any(g).([]float32))
		}
		for i := start; i < len(out); i++ {
			if v[i] > 0 {
				out[i] = g[i]
			} else {
				out[i] = 0
			}
		}
	case device.Gelu:
		for i := range out {
			f := float64(v[i])
			u := geluC * (f + 0.044715*f*f*f)
			t := math.Tanh(u)
			du := geluC * (1 + 3*0.044715*f*f)
			out[i] = g[i] * T(0.5*(1+t)+0.5*f*(1-t*t)*du)
		}
	case device.GeluErf:
		// Φ(x) + x·φ(x), with φ the standard normal density.
		for i := range out {
			f := float64(v[i])
			cdf := 0.5 * (1 + math.Erf(f/math.Sqrt2))
			pdf := math.Exp(-0.5*f*f) / math.Sqrt(2*math.Pi)
			out[i] = g[i] * T(cdf+f*pdf)
		}
	case device.Abs:
		for i := range out {
			switch {
			case v[i] > 0:
				out[i] = g[i]
			case v[i] < 0:
				out[i] = -g[i]
			default:
				out[i] = 0
			}
		}
	case device.Square:
		for i := range out {
			out[i] = 2 * v[i] * g[i]
		}
	case device.Recip:
		for i := range out {
			out[i] = -g[i] * v[i] * v[i]
		}
	case device.PowScalar:
		for i := range out {
			out[i] = g[i] * arg * T(math.Pow(float64(v[i]), float64(arg-1)))
		}
	case device.AddScalar:
		copy(out, g)
	case device.MulScalar:
		for i := range out {
			out[i] = g[i] * arg
		}
	default:
		panic("cpu: unknown unary op " + op.String())
	}
}

// Binary computes dst = a op b.
func (d *Device) Binary(op device.BinaryOp, dst, a, b device.View) {
	if wide(dst, a, b) {
		binary[float64](d, op, dst, a, b)
		return
	}
	binary[float32](d, op, dst, a, b)
}

func binary[T float](d *Device, op device.BinaryOp, dst, a, b device.View) {
	l := newLoop(dst.Shape, dst, a, b)
	if dst.DType == device.BF16 && a.DType == device.BF16 && b.DType == device.BF16 && op <= device.Mul &&
		l.istr[0] == 1 && l.istr[1] == 1 && l.istr[2] == 1 {
		// Dense bf16 rows (gradients summed into slices of a bf16
		// buffer) go straight through vector code: no scratch per row.
		runRows(d.threads, &l, bf16BinaryK{op, u16s(dst), u16s(a), u16s(b)})
		return
	}
	runRows(d.threads, &l, zipK[T, binaryFn[T]]{dst, a, b, binaryFn[T]{op}})
}

// bf16BinaryK is Add, Sub or Mul on bf16 operands with unit inner strides.
type bf16BinaryK struct {
	op      device.BinaryOp
	y, a, b []uint16
}

func (k bf16BinaryK) row(_ int, offs, _ [maxOps]int, m int) {
	y, a, b := k.y[offs[0]:offs[0]+m], k.a[offs[1]:offs[1]+m], k.b[offs[2]:offs[2]+m]
	for i := binaryBF16Vector(k.op, y, a, b); i < m; i++ {
		x, z := F32FromBF16(a[i]), F32FromBF16(b[i])
		var v float32
		switch k.op {
		case device.Add:
			v = x + z
		case device.Sub:
			v = x - z
		default:
			v = x * z
		}
		y[i] = BF16FromF32(v)
	}
}

type binaryFn[T float] struct{ op device.BinaryOp }

func (f binaryFn[T]) apply(y, a, b []T) { binaryRow(f.op, y, a, b) }

func binaryRow[T float](op device.BinaryOp, y, a, b []T) {
	a, b = a[:len(y)], b[:len(y)]
	if y32, ok := any(y).([]float32); ok {
		if k := binaryVector(op, y32, any(a).([]float32), any(b).([]float32)); k > 0 {
			y, a, b = y[k:], a[k:], b[k:]
		}
	}
	switch op {
	case device.Add:
		for i := range y {
			y[i] = a[i] + b[i]
		}
	case device.Sub:
		for i := range y {
			y[i] = a[i] - b[i]
		}
	case device.Mul:
		for i := range y {
			y[i] = a[i] * b[i]
		}
	case device.Div:
		for i := range y {
			y[i] = a[i] / b[i]
		}
	case device.Maximum:
		for i := range y {
			y[i] = max(a[i], b[i])
		}
	case device.Minimum:
		for i := range y {
			y[i] = min(a[i], b[i])
		}
	case device.Equal:
		for i := range y {
			if a[i] == b[i] {
				y[i] = 1
			} else {
				y[i] = 0
			}
		}
	default:
		panic("cpu: unknown binary op " + op.String())
	}
}

// MaskedFill writes value where mask is non-zero and src elsewhere.
func (d *Device) MaskedFill(dst, src, mask device.View, value float64) {
	if wide(dst, src) {
		maskedFill[float64](d, dst, src, mask, value)
		return
	}
	maskedFill[float32](d, dst, src, mask, value)
}

func maskedFill[T float](d *Device, dst, src, mask device.View, value float64) {
	l := newLoop(dst.Shape, dst, src, mask)
	runRows(d.threads, &l, zipK[T, maskFn[T]]{dst, src, mask, maskFn[T]{T(value)}})
}

// maskFn writes value where the mask is non-zero, x elsewhere.
type maskFn[T float] struct{ value T }

func (f maskFn[T]) apply(y, x, mask []T) {
	for i := range y {
		if mask[i] != 0 {
			y[i] = f.value
		} else {
			y[i] = x[i]
		}
	}
}

// CausalFill writes value above the diagonal of the last two dimensions.
func (d *Device) CausalFill(dst, src device.View, value float64) {
	if dst.DType == src.DType {
		// Kept elements are copied as bits and value converted once.
		switch dst.DType {
		case device.BF16:
			causalFillBits(d, u16s(dst), u16s(src), dst, src, BF16FromF32(float32(value)))
			return
		case device.F16:
			causalFillBits(d, u16s(dst), u16s(src), dst, src, F16FromF32(float32(value)))
			return
		case device.F32:
			causalFillBits(d, i32s(dst), i32s(src), dst, src, int32(math.Float32bits(float32(value))))
			return
		}
	}
	if wide(dst, src) {
		causalFill[float64](d, dst, src, value)
		return
	}
	causalFill[float32](d, dst, src, value)
}

// causalFillBits is CausalFill for one dtype on both sides: each row copies
// its kept prefix (nothing when dst is src, the usual in-place masking) and
// fills the rest.
func causalFillBits[E uint16 | int32 | int64](d *Device, y, x []E, dst, src device.View, v E) {
	r := len(dst.Shape)
	rows, cols := dst.Shape[r-2], dst.Shape[r-1]
	ds, ss := dst.Strides[r-1], src.Strides[r-1]
	mats := dst.Len() / max(rows*cols, 1)
	d.rowsParallel(mats*rows, cols, func(r0, r1 int) {
		// The row tails are filled by copies from a run of v made once:
		// copy moves them with vector stores, which element stores of a
		// generic type do not.
		var run [256]E
		for j := range run {
			run[j] = v
		}
		for q := r0; q < r1; q++ {
			m, i := q/rows, q%rows
			doff := matOffset(dst, m) + i*dst.Strides[r-2]
			soff := matOffset(src, m) + i*src.Strides[r-2]
			keep := min(i+1, cols)
			if ds == 1 && ss == 1 {
				if doff != soff || &y[0] != &x[0] {
					copy(y[doff:doff+keep], x[soff:soff+keep])
				}
				for tail := y[doff+keep : doff+cols]; len(tail) > 0; {
					tail = tail[copy(tail, run[:]):]
				}
				continue
			}
			for j := 0; j < keep; j++ {
				y[doff+j*ds] = x[soff+j*ss]
			}
			for j := keep; j < cols; j++ {
				y[doff+j*ds] = v
			}
		}
	})
}

func causalFill[T float](d *Device, dst, src device.View, value float64) {
	r := len(dst.Shape)
	rows, cols := dst.Shape[r-2], dst.Shape[r-1]
	// Whole rows at a time: row i keeps columns 0..i and fills the rest.
	// Both views are walked as [matrices, rows, cols] with their strides.
	mats := dst.Len() / max(rows*cols, 1)
	d.rowsParallel(mats*rows, cols, func(r0, r1 int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		for q := r0; q < r1; q++ {
			m, i := q/rows, q%rows
			doff, soff := matOffset(dst, m), matOffset(src, m)
			doff += i * dst.Strides[r-2]
			soff += i * src.Strides[r-2]
			x := loadRow(src, soff, cols, src.Strides[r-1], sc, 0)
			y := targetRow(dst, doff, cols, dst.Strides[r-1], sc, 1)
			keep := min(i+1, cols)
			copy(y[:keep], x[:keep])
			for j := keep; j < cols; j++ {
				y[j] = T(value)
			}
			store(dst, doff, dst.Strides[r-1], y)
		}
	})
}

// matOffset is the element offset of matrix m of a view whose last two
// dimensions are the matrices and whose leading ones are walked row-major.
func matOffset(v device.View, m int) int {
	off := v.Offset
	for k := len(v.Shape) - 3; k >= 0; k-- {
		off += (m % v.Shape[k]) * v.Strides[k]
		m /= v.Shape[k]
	}
	return off
}

// AllFinite reports whether src holds no inf or NaN.
func (d *Device) AllFinite(src device.View) bool {
	l := newLoop(src.Shape, src)
	bad := false
	// Sequential on purpose: the answer is a single bit and the scan is
	// memory-bound.
	l.run(1, func(_ int, offs []int, m int) {
		if bad {
			return
		}
		sc := getScratch[float64]()
		x := load(src, offs[0], m, l.istr[0], sc.a[:])
		for _, v := range x {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				bad = true
				break
			}
		}
		putScratch(sc)
	})
	return !bad
}

// splitmix64 is a counter-based generator: element i of a seeded draw is a
// pure function of (seed, i), so any element can be regenerated alone and
// the result does not depend on how work is split over goroutines.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uniform01 is a float64 in [0, 1) for element i of stream seed.
func uniform01(seed uint64, i uint64) float64 {
	return float64(splitmix64(seed^splitmix64(i))>>11) / (1 << 53)
}

// Random fills dst from dist.
func (d *Device) Random(dst device.View, dist device.Distribution, a, b float64, seed uint64) {
	l := newLoop(dst.Shape, dst)
	l.run(d.threads, func(pos int, offs []int, m int) {
		sc := getScratch[float64]()
		y := sc.a[:m]
		switch dist {
		case device.Uniform:
			for i := range y {
				y[i] = a + (b-a)*uniform01(seed, uint64(pos+i))
			}
		case device.Normal:
			for i := range y {
				// Box-Muller on two independent draws of the same element.
				idx := uint64(pos + i)
				u1 := uniform01(seed, 2*idx)
				u2 := uniform01(seed, 2*idx+1)
				y[i] = a + b*math.Sqrt(-2*math.Log(1-u1))*math.Cos(2*math.Pi*u2)
			}
		}
		store(dst, offs[0], l.istr[0], y)
		putScratch(sc)
	})
}

// Dropout writes dst = src·keep/(1-p), keep drawn per element from seed.
func (d *Device) Dropout(dst, src device.View, p float64, seed uint64) {
	if wide(dst, src) {
		dropout[float64](d, dst, src, p, seed)
		return
	}
	dropout[float32](d, dst, src, p, seed)
}

func dropout[T float](d *Device, dst, src device.View, p float64, seed uint64) {
	l := newLoop(dst.Shape, dst, src)
	runRows(d.threads, &l, dropoutK[T]{dst, src, p, T(1 / (1 - p)), seed})
}

type dropoutK[T float] struct {
	dst, src device.View
	p        float64
	scale    T
	seed     uint64
}

func (k dropoutK[T]) row(pos int, offs, istr [maxOps]int, m int) {
	sc := getScratch[T]()
	x := load(k.src, offs[1], m, istr[1], sc.a[:])
	y := target(k.dst, offs[0], m, istr[0], sc.b[:])
	for i := range y {
		if uniform01(k.seed, uint64(pos+i)) < k.p {
			y[i] = 0
		} else {
			y[i] = x[i] * k.scale
		}
	}
	store(k.dst, offs[0], istr[0], y)
	putScratch(sc)
}
