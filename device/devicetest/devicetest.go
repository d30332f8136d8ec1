package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Tolerance is the relative tolerance of results of dtype d: a little more
// than one unit in the last place, since a result computed in F32 and
// rounded to d may round to the neighbour of the exact value's rounding.
func Tolerance(d device.DType) float64 {
	switch d {
	case device.BF16:
		return 1e-2
	case device.F16:
		return 1e-3
	case device.F64:
		return 1e-12
	}
	return 1e-5
}

// unit is the unit roundoff of the accumulator results of dtype d are
// summed in (F32, or F64 for F64).
func unit(d device.DType) float64 {
	if d == device.F64 {
		return 0x1p-53
	}
	return 0x1p-24
}

// operand is one tensor of a case, on every device of the run.
type operand struct {
	dt    device.DType
	shape []int
	// vals is what the tensor held when it was made, rounded to dt: the
	// reference's input.
	vals  []float64
	views []device.View // one per device, in env.devs's order
}

// env allocates a case's tensors on each device and frees them at the
// end of the case.
type env struct {
	t *testing.T
	// devs is the device under test (Run), or the reference and the
	// device under test (RunAccounting).
	devs []device.Device
	rng  *rand.Rand
	ops  []*operand
	// requested is the bytes the case's tensors took on each device.
	requested int64
	// values is false in RunAccounting: the device computes nothing, so
	// only what the allocators saw is compared.
	values bool
}

// dev is the device under test.
func (e *env) dev() device.Device { return e.devs[len(e.devs)-1] }

func (e *env) free() {
	for _, p := range e.ops {
		for i, d := range e.devs {
			d.Free(p.views[i].Buf)
		}
	}
	e.ops = nil
}

func contiguous(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

func count(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// tensor allocates a contiguous tensor of dtype dt holding vals (rounded to
// dt) on every device. vals may be nil for an output (zero-filled).
func (e *env) tensor(dt device.DType, shape []int, vals []float64) *operand {
	e.t.Helper()
	n := count(shape)
	if vals == nil {
		vals = make([]float64, n)
	}
	if len(vals) != n {
		e.t.Fatalf("devicetest: %d values for shape %v", len(vals), shape)
	}
	size := int64(max(n*dt.Size(), 1))
	raw := encode(dt, vals)
	p := &operand{dt: dt, shape: shape, vals: decode(dt, raw)}
	for _, d := range e.devs {
		b, err := d.Alloc(size, memory.Temporary)
		if err != nil {
			for i, db := range p.views {
				e.devs[i].Free(db.Buf)
			}
			e.t.Fatalf("devicetest: %s: %v", d.Name(), err)
		}
		d.Write(b, 0, raw)
		p.views = append(p.views, device.View{Buf: b, DType: dt, Shape: shape, Strides: contiguous(shape)})
	}
	e.ops = append(e.ops, p)
	e.requested += size
	return p
}

// random returns n values uniform on [lo, hi).
func (e *env) random(n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*e.rng.Float64()
	}
	return v
}

// each runs a kernel on every device; v gives an operand's view there.
func (e *env) each(f func(d device.Device, v func(*operand) device.View)) {
	for i, d := range e.devs {
		f(d, func(p *operand) device.View { return p.views[i] })
	}
}

// read returns the elements of p on the device under test.
func (e *env) read(p *operand) []float64 {
	sz := p.dt.Size()
	b := make([]byte, count(p.shape)*sz)
	v := p.views[len(p.views)-1]
	e.dev().Read(b, v.Buf, int64(v.Offset*sz))
	return decode(p.dt, b)
}

// check compares p on the device under test with want, the reference's
// exact values, rounded here to p's dtype: within tol relative to the
// larger of the element and the RMS of want.
func (e *env) check(name string, p *operand, want []float64, tol float64) {
	e.t.Helper()
	e.checkSum(name, p, want, nil, 0, tol)
}

// checkSum is check for results that are sums of many terms: mag[i] is
// element i's Σ|terms| and n the most terms an element has, and element i
// may also be n·u·mag[i] away (u the accumulator's unit roundoff), which
// bounds the rounding of any order of summation.
func (e *env) checkSum(name string, p *operand, want, mag []float64, n int, tol float64) {
	e.t.Helper()
	if !e.values {
		return
	}
	if len(want) != count(p.shape) {
		e.t.Fatalf("devicetest: %s: the reference has %d values for shape %v", name, len(want), p.shape)
	}
	want = roundAll(p.dt, want)
	got := e.read(p)
	var rms float64
	for _, w := range want {
		if !math.IsInf(w, 0) && !math.IsNaN(w) {
			rms += w * w
		}
	}
	rms = math.Sqrt(rms / float64(max(len(want), 1)))
	bad := 0
	for i := range want {
		w, g := want[i], got[i]
		if math.IsNaN(w) || math.IsInf(w, 0) {
			if !(math.IsNaN(w) && math.IsNaN(g)) && w != g {
				bad++
				if bad <= 5 {
					e.t.Errorf("%s[%d] = %v on %s, want %v", name, i, g, e.dev().Name(), w)
				}
			}
			continue
		}
		bound := tol * math.Max(math.Abs(w), rms)
		if mag != nil {
			bound += float64(n) * unit(p.dt) * mag[i]
		}
		if math.Abs(g-w) > bound+1e-30 || math.IsNaN(g) {
			bad++
			if bad <= 5 {
				e.t.Errorf("%s[%d] = %v on %s, want %v (tolerance %g)", name, i, g, e.dev().Name(), w, bound)
			}
		}
	}
	if bad > 5 {
		e.t.Errorf("%s: %d of %d elements differ", name, bad, len(want))
	}
}

// exact compares p with want bit for bit (as values: NaN equals NaN).
func (e *env) exact(name string, p *operand, want []float64) { e.t.Helper(); e.check(name, p, want, 0) }

func encode(dt device.DType, vals []float64) []byte {
	sz := dt.Size()
	b := make([]byte, len(vals)*sz)
	for i, v := range vals {
		o := b[i*sz:]
		switch dt {
		case device.F32:
			binary.LittleEndian.PutUint32(o, math.Float32bits(float32(v)))
		case device.F64:
			binary.LittleEndian.PutUint64(o, math.Float64bits(v))
		case device.F16:
			binary.LittleEndian.PutUint16(o, float16.Fromfloat32(float32(v)).Bits())
		case device.BF16:
			binary.LittleEndian.PutUint16(o, bf16(float32(v)))
		case device.I32:
			binary.LittleEndian.PutUint32(o, uint32(int32(v)))
		case device.I64:
			binary.LittleEndian.PutUint64(o, uint64(int64(v)))
		case device.U8:
			o[0] = uint8(v)
		}
	}
	return b
}

func decode(dt device.DType, b []byte) []float64 {
	sz := dt.Size()
	v := make([]float64, len(b)/sz)
	for i := range v {
		o := b[i*sz:]
		switch dt {
		case device.F32:
			v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(o)))
		case device.F64:
			v[i] = math.Float64frombits(binary.LittleEndian.Uint64(o))
		case device.F16:
			v[i] = float64(float16.Frombits(binary.LittleEndian.Uint16(o)).Float32())
		case device.BF16:
			v[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(o)) << 16))
		case device.I32:
			v[i] = float64(int32(binary.LittleEndian.Uint32(o)))
		case device.I64:
			v[i] = float64(int64(binary.LittleEndian.Uint64(o)))
		case device.U8:
			v[i] = float64(o[0])
		}
	}
	return v
}

// bf16 rounds to nearest even (an infinity stays one, a NaN stays a NaN).
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// floatTypes are the dtypes every float kernel is checked in.
var floatTypes = []device.DType{device.F32, device.F16, device.BF16}

// Run checks every kernel of dev against the reference (reference.go:
// float64 on the host, through gonum), one subtest per kernel and dtype.
// Capabilities run through device's package-level functions, so a device
// without one (or one seen through device.Without) is checked on the
// composed fallback. After each case's kernels dev must hold the case's
// tensors and nothing more (every temporary freed), and after the case
// what it held before.
func Run(t *testing.T, dev device.Device) { run(t, []device.Device{dev}, true) }

// RunAccounting runs every case on ref and on dev, a device that computes
// nothing (the meta device), and compares what their allocators saw: the
// same bytes allocated, under the same categories, and the same peak
// within each case — which is what makes a plan traced on the meta device
// exact, fallbacks' temporaries included.
func RunAccounting(t *testing.T, ref, dev device.Device) {
	run(t, []device.Device{ref, dev}, false)
}

func run(t *testing.T, devs []device.Device, values bool) {
	for _, c := range cases {
		for _, dt := range c.dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				e := &env{t: t, devs: devs, rng: rand.New(rand.NewPCG(1, uint64(dt))), values: values}
				start := make([]memory.Stats, len(devs))
				for i, d := range devs {
					d.Memory().ResetPeak()
					start[i] = d.Memory().Stats()
				}
				defer func() {
					e.free()
					for i, d := range devs {
						if a := d.Memory().Stats().Allocated.Current; a != start[i].Allocated.Current {
							t.Errorf("allocated after the case: %d bytes on %s, %d before", a, d.Name(), start[i].Allocated.Current)
						}
					}
				}()
				c.run(e, dt)
				var peaks []int64
				for i, d := range devs {
					st := d.Memory().Stats()
					if held := st.Requested.Current - start[i].Requested.Current; held != e.requested {
						t.Errorf("%s holds %d bytes after the case's kernels; its tensors are %d", d.Name(), held, e.requested)
					}
					if tmp := st.Category(memory.Temporary).Current - start[i].Category(memory.Temporary).Current; tmp != e.requested {
						t.Errorf("%s holds %d bytes of temporaries after the case's kernels; its tensors are %d", d.Name(), tmp, e.requested)
					}
					peaks = append(peaks, st.Requested.Peak-start[i].Requested.Current)
				}
				if !values && peaks[0] != peaks[1] {
					t.Errorf("peak within the case: %d bytes on %s, %d on %s", peaks[0], devs[0].Name(), peaks[1], devs[1].Name())
				}
			})
		}
	}
}

type kcase struct {
	name   string
	dtypes []device.DType
	run    func(e *env, dt device.DType)
}

var cases = []kcase{
	{"Fill", append(floatTypes, device.F64, device.I32, device.I64), func(e *env, dt device.DType) {
		y := e.tensor(dt, []int{3, 5}, nil)
		e.each(func(d device.Device, v func(*operand) device.View) { d.Fill(v(y), 2.75) })
		want := make([]float64, 15)
		for i := range want {
			want[i] = 2.75
		}
		e.exact("fill", y, want)
	}},
	{"Copy", floatTypes, func(e *env, dt device.DType) {
		x := e.tensor(device.F32, []int{4, 6}, e.random(24, -3, 3))
		y := e.tensor(dt, []int{6, 4}, nil)
		back := e.tensor(device.F32, []int{6, 4}, nil)
		e.each(func(d device.Device, v func(*operand) device.View) {
			src := v(x)
			src.Shape, src.Strides = []int{6, 4}, []int{1, 6} // transposed read
			d.Copy(v(y), src)
			d.Copy(v(back), v(y))
		})
		xt := make([]float64, 24)
		for i := range 6 {
			for j := range 4 {
				xt[i*4+j] = x.vals[j*6+i]
			}
		}
		e.exact("copy", y, xt)
		e.exact("copy back", back, roundAll(dt, xt))
	}},
	{"Unary", floatTypes, func(e *env, dt device.DType) {
		for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ {
			lo := -2.0
			if op == device.Log || op == device.Sqrt || op == device.PowScalar || op == device.Recip {
				lo = 0.25
			}
			x := e.tensor(dt, []int{7, 9}, e.random(63, lo, 2))
			y := e.tensor(dt, []int{7, 9}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) { d.Unary(op, v(y), v(x), 1.5) })
			want := make([]float64, 63)
			for i, xv := range x.vals {
				want[i] = unaryRef(op, xv, 1.5)
			}
			e.check(op.String(), y, want, Tolerance(dt))
		}
	}},
	{"UnaryBackward", floatTypes, func(e *env, dt device.DType) {
		for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ {
			x := e.tensor(dt, []int{5, 8}, e.random(40, 0.25, 2))
			y := e.tensor(dt, []int{5, 8}, nil)
			dy := e.tensor(dt, []int{5, 8}, e.random(40, -1, 1))
			dx := e.tensor(dt, []int{5, 8}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				d.Unary(op, v(y), v(x), 1.5)
				d.UnaryBackward(op, v(dx), v(x), v(y), v(dy), 1.5)
			})
			want := make([]float64, 40)
			for i, xv := range x.vals {
				yv := round(dt, unaryRef(op, xv, 1.5)) // y as stored
				want[i] = unaryGradRef(op, xv, yv, dy.vals[i], 1.5)
			}
			e.check(op.String()+" backward", dx, want, 2*Tolerance(dt))
		}
	}},
	{"Binary", floatTypes, func(e *env, dt device.DType) {
		for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ {
			a := e.tensor(dt, []int{6, 10}, e.random(60, 0.5, 2))
			b := e.tensor(dt, []int{10}, e.random(10, 0.5, 2))
			y := e.tensor(dt, []int{6, 10}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				bb := v(b)
				bb.Shape, bb.Strides = []int{6, 10}, []int{0, 1} // broadcast a row
				d.Binary(op, v(y), v(a), bb)
			})
			want := make([]float64, 60)
			for i, av := range a.vals {
				want[i] = binaryRef(op, av, b.vals[i%10])
			}
			e.check(op.String(), y, want, Tolerance(dt))
		}
	}},
	{"Reduce", floatTypes, func(e *env, dt device.DType) {
		for _, op := range []device.ReduceOp{device.Sum, device.Max, device.Min} {
			for _, out := range [][]int{{1, 300}, {4, 1}, {1, 1}, {300}} {
				x := e.tensor(dt, []int{4, 300}, e.random(1200, -1, 1))
				y := e.tensor(dt, out, nil)
				e.each(func(d device.Device, v func(*operand) device.View) { d.Reduce(op, v(y), v(x)) })
				want, mag, n := reduceRef(op, x.vals, x.shape, out)
				e.checkSum(fmt.Sprintf("reduce %d into %v", op, out), y, want, mag, n, Tolerance(dt))
			}
		}
	}},
	{"Gemm", floatTypes, func(e *env, dt device.DType) {
		m, n, k, batch := 5, 7, 33, 3
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, cdt := range []device.DType{device.F32, dt} {
				a := e.tensor(dt, []int{batch, m * k}, e.random(batch*m*k, -1, 1))
				b := e.tensor(dt, []int{k * n}, e.random(k*n, -1, 1))
				c := e.tensor(cdt, []int{batch, m, n}, e.random(batch*m*n, -1, 1))
				lda, ldb := k, n
				if tr[0] {
					lda = m
				}
				if tr[1] {
					ldb = k
				}
				g := device.Gemm{TransA: tr[0], TransB: tr[1], M: m, N: n, K: k, Batch: batch,
					Alpha: 0.5, Beta: 0.25, LDA: lda, LDB: ldb, LDC: n,
					StrideA: m * k, StrideB: 0, StrideC: m * n}
				e.each(func(d device.Device, v func(*operand) device.View) {
					g.A, g.B, g.C = v(a), v(b), v(c)
					d.Gemm(g)
				})
				want, mag := gemmRef(g, a.vals, b.vals, c.vals, nil)
				e.checkSum(fmt.Sprintf("gemm trans %v into %v", tr, cdt), c, want, mag, k+1, Tolerance(cdt))
			}
		}
	}},
	{"GemmBias", floatTypes, func(e *env, dt device.DType) {
		// A linear layer's x·Wᵀ + b: a bias in F32 (a master weight under
		// autocast) or in the operands' dtype, into either C. A device
		// may round a 16-bit C twice (device.BiasFirst): twice the
		// tolerance.
		m, n, k, batch := 19, 37, 21, 2
		for _, bdt := range []device.DType{device.F32, dt} {
			for _, cdt := range []device.DType{device.F32, dt} {
				a := e.tensor(dt, []int{batch, m * k}, e.random(batch*m*k, -1, 1))
				w := e.tensor(dt, []int{n * k}, e.random(n*k, -1, 1))
				bias := e.tensor(bdt, []int{n}, e.random(n, -1, 1))
				c := e.tensor(cdt, []int{batch, m, n}, e.random(batch*m*n, -1, 1)) // beta 0: never read
				g := device.Gemm{TransB: true, M: m, N: n, K: k, Batch: batch,
					Alpha: 1, LDA: k, LDB: k, LDC: n, StrideA: m * k, StrideC: m * n}
				e.each(func(d device.Device, v func(*operand) device.View) {
					g.A, g.B, g.C, g.Bias = v(a), v(w), v(c), v(bias)
					d.Gemm(g)
				})
				want, mag := gemmRef(g, a.vals, w.vals, c.vals, bias.vals)
				e.checkSum(fmt.Sprintf("gemm with a %v bias into %v", bdt, cdt), c, want, mag, k+1, 2*Tolerance(cdt))
			}
		}
	}},
	{"GemmGroups", floatTypes, func(e *env, dt device.DType) {
		// Heads inside [B, T, H, D]: B groups of H products each.
		b, t, h, d := 2, 5, 3, 4
		x := e.tensor(dt, []int{b * t * h * d}, e.random(b*t*h*d, -1, 1))
		w := e.tensor(dt, []int{d * 6}, e.random(d*6, -1, 1))
		c := e.tensor(device.F32, []int{b, h, t, 6}, nil)
		g := device.Gemm{M: t, N: 6, K: d, Batch: h, Outer: b, Alpha: 1,
			LDA: h * d, LDB: 6, LDC: 6,
			StrideA: d, StrideB: 0, StrideC: t * 6,
			OuterStrideA: t * h * d, OuterStrideC: h * t * 6}
		e.each(func(dev device.Device, v func(*operand) device.View) {
			g.A, g.B, g.C = v(x), v(w), v(c)
			dev.Gemm(g)
		})
		want, mag := gemmRef(g, x.vals, w.vals, c.vals, nil)
		e.checkSum("gemm groups", c, want, mag, d, Tolerance(device.F32))
	}},
	{"GemmTriangles", floatTypes, func(e *env, dt device.DType) {
		// Causal attention's products: scores (LowerC), probabilities
		// times values (LowerA) and their transposes (UpperA).
		t, dh, batch := 37, 9, 2
		tri := func(upper bool) []float64 {
			v := e.random(batch*t*t, 0, 1)
			for i := range v {
				r, c := (i/t)%t, i%t
				if upper && c < r || !upper && c > r {
					v[i] = 0
				}
			}
			return v
		}
		for _, cdt := range []device.DType{device.F32, dt} {
			q := e.tensor(dt, []int{batch, t * dh}, e.random(batch*t*dh, -1, 1))
			k := e.tensor(dt, []int{batch, t * dh}, e.random(batch*t*dh, -1, 1))
			s := e.tensor(cdt, []int{batch, t, t}, e.random(batch*t*t, -1, 1))
			g := device.Gemm{TransB: true, M: t, N: t, K: dh, Batch: batch, Alpha: 0.5,
				LDA: dh, LDB: dh, LDC: t,
				StrideA: t * dh, StrideB: t * dh, StrideC: t * t, Triangle: device.LowerC}
			e.each(func(d device.Device, v func(*operand) device.View) {
				g.A, g.B, g.C = v(q), v(k), v(s)
				d.Gemm(g)
			})
			want, mag := gemmRef(g, q.vals, k.vals, s.vals, nil)
			e.checkSum(fmt.Sprintf("gemm LowerC into %v", cdt), s, want, mag, dh, Tolerance(cdt))
			for _, upper := range []bool{false, true} {
				p := e.tensor(dt, []int{batch, t * t}, tri(upper))
				y := e.tensor(cdt, []int{batch, t, dh}, nil)
				mode := device.LowerA
				if upper {
					mode = device.UpperA
				}
				gp := device.Gemm{M: t, N: dh, K: t, Batch: batch, Alpha: 1,
					LDA: t, LDB: dh, LDC: dh,
					StrideA: t * t, StrideB: t * dh, StrideC: t * dh, Triangle: mode}
				e.each(func(d device.Device, v func(*operand) device.View) {
					gp.A, gp.B, gp.C = v(p), v(k), v(y)
					d.Gemm(gp)
				})
				want, mag := gemmRef(gp, p.vals, k.vals, y.vals, nil)
				e.checkSum(fmt.Sprintf("gemm upper=%v into %v", upper, cdt), y, want, mag, t, Tolerance(cdt))
			}
		}
	}},
	{"Softmax", floatTypes, func(e *env, dt device.DType) {
		for _, lg := range []bool{false, true} {
			x := e.tensor(dt, []int{6, 300}, e.random(1800, -4, 4))
			y := e.tensor(dt, []int{6, 300}, nil)
			dy := e.tensor(dt, []int{6, 300}, e.random(1800, -1, 1))
			dx := e.tensor(dt, []int{6, 300}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				device.Softmax(d, v(y), v(x), lg)
				device.SoftmaxBackward(d, v(dx), v(y), v(dy), lg)
			})
			want := softmaxRef(x.vals, 300, lg)
			e.check(fmt.Sprintf("softmax log=%v", lg), y, want, Tolerance(dt))
			e.check(fmt.Sprintf("softmax backward log=%v", lg), dx, softmaxGradRef(roundAll(dt, want), dy.vals, 300, lg), 2*Tolerance(dt))
		}
	}},
	{"LayerNorm", floatTypes, func(e *env, dt device.DType) {
		rows, n := 5, 96
		x := e.tensor(dt, []int{rows, n}, e.random(rows*n, -2, 3))
		gamma := e.tensor(dt, []int{n}, e.random(n, 0.5, 1.5))
		beta := e.tensor(dt, []int{n}, e.random(n, -0.5, 0.5))
		y := e.tensor(dt, []int{rows, n}, nil)
		mean := e.tensor(device.F32, []int{rows}, nil)
		rstd := e.tensor(device.F32, []int{rows}, nil)
		dy := e.tensor(dt, []int{rows, n}, e.random(rows*n, -1, 1))
		dx := e.tensor(dt, []int{rows, n}, nil)
		dgamma := e.tensor(dt, []int{n}, e.random(n, -1, 1))
		dbeta := e.tensor(dt, []int{n}, e.random(n, -1, 1))
		// The same norm again, also writing x to a copy in another
		// 16-bit dtype (autocast's saved input): y2 must be y.
		cdt := device.BF16
		if dt == device.BF16 {
			cdt = device.F16
		}
		y2 := e.tensor(dt, []int{rows, n}, nil)
		xc := e.tensor(cdt, []int{rows, n}, nil)
		e.each(func(d device.Device, v func(*operand) device.View) {
			device.LayerNorm(d, v(y), device.View{}, v(mean), v(rstd), v(x), v(gamma), v(beta), 1e-5)
			device.LayerNorm(d, v(y2), v(xc), v(mean), v(rstd), v(x), v(gamma), v(beta), 1e-5)
			device.LayerNormBackward(d, v(dx), v(dgamma), v(dbeta), v(dy), v(x), v(mean), v(rstd), v(gamma))
		})
		if e.values {
			e.exact("y beside a copy of x", y2, e.read(y))
		}
		e.exact("copy of x", xc, x.vals)
		wy, wmean, wrstd := layerNormRef(x.vals, gamma.vals, beta.vals, n, 1e-5)
		// Backward reads mean and rstd as stored (F32).
		wdx, wdg, wdb, dgMag, dbMag := layerNormGradRef(dy.vals, x.vals, roundAll(device.F32, wmean), roundAll(device.F32, wrstd), gamma.vals, dgamma.vals, dbeta.vals, n)
		tol := Tolerance(dt)
		e.check("y", y, wy, tol)
		e.check("mean", mean, wmean, Tolerance(device.F32))
		e.check("rstd", rstd, wrstd, Tolerance(device.F32))
		e.check("dx", dx, wdx, 4*tol)
		e.checkSum("dgamma", dgamma, wdg, dgMag, rows+1, 2*tol)
		e.checkSum("dbeta", dbeta, wdb, dbMag, rows+1, tol)
	}},
	{"Embedding", floatTypes, func(e *env, dt device.DType) {
		vocab, dim := 11, 24
		for _, it := range []device.DType{device.I32, device.I64} {
			table := e.tensor(dt, []int{vocab, dim}, e.random(vocab*dim, -1, 1))
			idx := e.tensor(it, []int{9}, []float64{3, 0, 10, 3, 3, 7, 1, 0, 5})
			out := e.tensor(dt, []int{9, dim}, nil)
			grad := e.tensor(dt, []int{vocab, dim}, e.random(vocab*dim, -1, 1))
			e.each(func(d device.Device, v func(*operand) device.View) {
				d.Gather(v(out), v(table), v(idx))
				d.ScatterAdd(v(grad), v(idx), v(out))
			})
			rows := gatherRef(table.vals, idx.vals, dim)
			e.exact("gather", out, rows)
			e.check("scatter-add", grad, scatterAddRef(dt, grad.vals, idx.vals, rows, dim), Tolerance(dt))
		}
		// An index past the table panics with an IndexError naming it.
		table := e.tensor(dt, []int{vocab, dim}, nil)
		idx := e.tensor(device.I32, []int{4}, []float64{1, 2, 11, 12})
		out := e.tensor(dt, []int{4, dim}, nil)
		if !e.values {
			return
		}
		want := device.IndexError{Op: "embedding", Index: 11, Limit: vocab, At: 2}
		got := catchIndex(func() { e.dev().Gather(out.views[0], table.views[0], idx.views[0]) })
		if got == nil || *got != want {
			e.t.Errorf("gather of index 11 of 11 rows: %s panics with %v, want %v", e.dev().Name(), got, &want)
		}
	}},
	{"Conv", floatTypes, func(e *env, dt device.DType) {
		g := device.ConvGeom{N: 2, C: 3, H: 7, W: 6, KH: 3, KW: 2, StrideH: 2, StrideW: 1, PadH: 1, PadW: 1}
		xn := g.N * g.C * g.H * g.W
		x := e.tensor(dt, []int{xn}, e.random(xn, -1, 1))
		// Undilated (zero dilation reads as 1), then dilated unevenly with
		// padding that a dilated tap reaches past.
		for _, dil := range [][2]int{{0, 0}, {2, 3}} {
			g.DilationH, g.DilationW = dil[0], dil[1]
			dh, dw := g.Dilation()
			g.OH = (g.H+2*g.PadH-dh*(g.KH-1)-1)/g.StrideH + 1
			g.OW = (g.W+2*g.PadW-dw*(g.KW-1)-1)/g.StrideW + 1
			cn := g.N * g.C * g.KH * g.KW * g.OH * g.OW
			col := e.tensor(dt, []int{cn}, nil)
			dx := e.tensor(dt, []int{xn}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				d.Im2Col(v(col), v(x), g)
				d.Col2Im(v(dx), v(col), g)
			})
			wcol := im2colRef(x.vals, g)
			e.exact(fmt.Sprintf("im2col dilation %v", dil), col, wcol)
			want, mag, n := col2imRef(wcol, g)
			e.checkSum(fmt.Sprintf("col2im dilation %v", dil), dx, want, mag, n, Tolerance(dt))
		}
		for _, op := range []device.PoolOp{device.MaxPool, device.AvgPool} {
			pg := device.ConvGeom{N: 2, C: 3, H: 7, W: 6, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
			pg.OH, pg.OW = (pg.H-pg.KH)/pg.StrideH+1, (pg.W-pg.KW)/pg.StrideW+1
			on := pg.N * pg.C * pg.OH * pg.OW
			y := e.tensor(dt, []int{on}, nil)
			am := e.tensor(device.I32, []int{on}, nil)
			dy := e.tensor(dt, []int{on}, e.random(on, -1, 1))
			pdx := e.tensor(dt, []int{xn}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				d.Pool(op, v(y), v(am), v(x), pg)
				d.PoolBackward(op, v(pdx), v(am), v(dy), pg)
			})
			wy, wam := poolRef(op, x.vals, pg)
			e.check(fmt.Sprintf("pool %d", op), y, wy, Tolerance(dt))
			if op == device.MaxPool {
				e.exact("argmax", am, wam)
			}
			e.check(fmt.Sprintf("pool %d backward", op), pdx, poolGradRef(op, wam, dy.vals, pg), Tolerance(dt))
		}
	}},
	{"CrossEntropy", floatTypes, func(e *env, dt device.DType) {
		rows, c := 6, 37
		for _, s := range []float64{0, 0.1} {
			logits := e.tensor(dt, []int{rows, c}, e.random(rows*c, -3, 3))
			tg := e.tensor(device.I64, []int{rows}, []float64{0, 36, -100, 5, 17, 2})
			loss := e.tensor(dt, []int{rows}, nil)
			dloss := e.tensor(dt, []int{rows}, e.random(rows, 0.5, 1.5))
			dlogits := e.tensor(dt, []int{rows, c}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) {
				device.CrossEntropy(d, v(loss), v(logits), v(tg), -100, s)
				device.CrossEntropyBackward(d, v(dlogits), v(logits), v(tg), v(dloss), -100, s)
			})
			e.check(fmt.Sprintf("loss smoothing %v", s), loss, crossEntropyRef(logits.vals, tg.vals, c, -100, s), Tolerance(dt))
			e.check(fmt.Sprintf("dlogits smoothing %v", s), dlogits, crossEntropyGradRef(logits.vals, tg.vals, dloss.vals, c, -100, s), 2*Tolerance(dt))
		}
		if !e.values {
			return
		}
		// A target past the classes panics with an IndexError naming it.
		logits := e.tensor(dt, []int{rows, c}, nil)
		tg := e.tensor(device.I64, []int{rows}, []float64{0, 1, 2, 37, 4, 5})
		loss := e.tensor(dt, []int{rows}, nil)
		want := device.IndexError{Op: "cross entropy target", Index: 37, Limit: c, At: 3}
		got := catchIndex(func() { device.CrossEntropy(e.dev(), loss.views[0], logits.views[0], tg.views[0], -100, 0) })
		if got == nil || *got != want {
			e.t.Errorf("cross entropy of target 37 of 37 classes: %s panics with %v, want %v", e.dev().Name(), got, &want)
		}
	}},
	{"Dropout", append(floatTypes, device.F64), func(e *env, dt device.DType) {
		x := e.tensor(dt, []int{33, 65}, e.random(33*65, 0.5, 2))
		y := e.tensor(dt, []int{33, 65}, nil)
		e.each(func(d device.Device, v func(*operand) device.View) { d.Dropout(v(y), v(x), 0.3, 12345) })
		want := dropoutRef(x.vals, 0.3, 12345)
		if e.values {
			got := e.read(y)
			for i := range want {
				if (want[i] == 0) != (got[i] == 0) {
					e.t.Fatalf("dropout mask differs at %d: %v on %s, want %v", i, got[i], e.dev().Name(), want[i])
				}
			}
		}
		e.check("dropout", y, want, Tolerance(dt))
	}},
	{"Random", append(floatTypes, device.F64), func(e *env, dt device.DType) {
		for _, dist := range []device.Distribution{device.Uniform, device.Normal} {
			y := e.tensor(dt, []int{17, 31}, nil)
			e.each(func(d device.Device, v func(*operand) device.View) { d.Random(v(y), dist, -1, 2, 99) })
			e.check(fmt.Sprintf("random %d", dist), y, randomRef(17*31, dist, -1, 2, 99), Tolerance(dt))
		}
	}},
	{"Masks", floatTypes, func(e *env, dt device.DType) {
		x := e.tensor(dt, []int{2, 5, 5}, e.random(50, -1, 1))
		mv := e.random(25, 0, 2)
		for i := range mv {
			mv[i] = math.Floor(mv[i])
		}
		mask := e.tensor(dt, []int{5, 5}, mv)
		y := e.tensor(dt, []int{2, 5, 5}, nil)
		z := e.tensor(dt, []int{2, 5, 5}, nil)
		e.each(func(d device.Device, v func(*operand) device.View) {
			m := v(mask)
			m.Shape, m.Strides = []int{2, 5, 5}, []int{0, 5, 1}
			d.MaskedFill(v(y), v(x), m, -7)
			device.CausalFill(d, v(z), v(x), -9)
		})
		masked, causal := make([]float64, 50), make([]float64, 50)
		for i, xv := range x.vals {
			r, c := (i/5)%5, i%5
			masked[i], causal[i] = xv, xv
			if mask.vals[i%25] != 0 {
				masked[i] = -7
			}
			if c > r {
				causal[i] = -9
			}
		}
		e.exact("masked fill", y, masked)
		e.exact("causal fill", z, causal)
	}},
	{"AllFinite", floatTypes, func(e *env, dt device.DType) {
		ok := e.tensor(dt, []int{100}, e.random(100, -1, 1))
		vals := e.random(100, -1, 1)
		vals[77] = math.Inf(1)
		bad := e.tensor(dt, []int{100}, vals)
		vals[77] = math.NaN()
		nan := e.tensor(dt, []int{100}, vals)
		for _, c := range []struct {
			p    *operand
			want bool
		}{{ok, true}, {bad, false}, {nan, false}} {
			if !e.values {
				break
			}
			if got := e.dev().AllFinite(c.p.views[0]); got != c.want {
				e.t.Errorf("AllFinite = %v on %s, want %v", got, e.dev().Name(), c.want)
			}
		}
	}},
	{"Attention", append(floatTypes, device.F64), func(e *env, dt device.DType) {
		for _, d := range e.devs {
			if device.AttentionOf(d) == nil {
				e.t.Skipf("fused attention: %s lacks it (the tensor package composes it otherwise)", d.Name())
			}
		}
		// Heads viewed inside a fused projection [B, T, 3, H, D], as the
		// models pass them: q, k and v are strided [B, H, T, D] views.
		const b, h, t, d = 2, 3, 70, 8
		sh := attentionShape{b: b, h: h, t: t, d: d}
		acc := device.F32
		if dt == device.F64 {
			acc = device.F64
		}
		qkv := e.tensor(dt, []int{b * t * 3 * h * d}, e.random(b*t*3*h*d, -1, 1))
		view := func(v device.View, i int) device.View {
			v.Offset += i * h * d
			v.Shape = []int{b, h, t, d}
			v.Strides = []int{t * 3 * h * d, d, 3 * h * d, 1}
			return v
		}
		// The reference's q, k and v: contiguous [B, H, T, D].
		heads := func(i int) []float64 {
			out := make([]float64, 0, b*h*t*d)
			for bi := range b {
				for hi := range h {
					for ti := range t {
						o := ((bi*t+ti)*3+i)*h*d + hi*d
						out = append(out, qkv.vals[o:o+d]...)
					}
				}
			}
			return out
		}
		q, k, v := heads(0), heads(1), heads(2)
		out := e.tensor(dt, []int{b, h, t, d}, nil)
		lse := e.tensor(acc, []int{b, h, t}, nil)
		dout := e.tensor(dt, []int{b, h, t, d}, e.random(b*h*t*d, -1, 1))
		dq := e.tensor(dt, []int{b, h, t, d}, nil)
		dk := e.tensor(dt, []int{b, h, t, d}, nil)
		dv := e.tensor(dt, []int{b, h, t, d}, nil)
		for _, p := range []float64{0, 0.25} {
			a := device.Attention{Scale: 0.35, Dropout: p, Seed: 5}
			e.each(func(dev device.Device, s func(*operand) device.View) {
				ker := device.AttentionOf(dev)
				qv, kv, vv := view(s(qkv), 0), view(s(qkv), 1), view(s(qkv), 2)
				a := a
				a.Tiled = device.AttentionTiled(dev, dt, d) // as the tensor package calls them
				ker.CausalAttention(s(out), s(lse), qv, kv, vv, a)
				ker.CausalAttentionBackward(s(dq), s(dk), s(dv), s(dout), s(out), s(lse), qv, kv, vv, a)
			})
			if !e.values {
				continue
			}
			wout, wlse, wdq, wdk, wdv := attentionRef(dt, sh, q, k, v, dout.vals, a, nil)
			tol := Tolerance(dt)
			e.check(fmt.Sprintf("attention dropout %v", p), out, wout, tol)
			e.check(fmt.Sprintf("log-sum-exp dropout %v", p), lse, wlse, Tolerance(acc))
			e.check(fmt.Sprintf("dq dropout %v", p), dq, wdq, 2*tol)
			e.check(fmt.Sprintf("dk dropout %v", p), dk, wdk, 2*tol)
			e.check(fmt.Sprintf("dv dropout %v", p), dv, wdv, 2*tol)
		}
	}},
	{"Adam8bit", []device.DType{device.F32}, func(e *env, dt device.DType) {
		// Three blocks, the last partial; codes and scales from a first
		// step, so the second dequantises non-trivial state. The fused
		// kernel and the fallback (through device.Without) compute
		// Adam8bitBlock's F32 arithmetic: parameters, codes and scales
		// are its bits exactly.
		n := 2*device.Quant8Block + 300
		nb := device.Quant8Blocks(n)
		for _, dec := range []bool{false, true} {
			type state struct{ p, m, v, ms, vs *operand }
			mk := func(p0 []float64) state {
				return state{e.tensor(device.F32, []int{n}, p0), e.tensor(device.U8, []int{n}, nil), e.tensor(device.U8, []int{n}, nil),
					e.tensor(device.F32, []int{nb}, nil), e.tensor(device.F32, []int{nb}, nil)}
			}
			fused := mk(e.random(n, -1, 1))
			composed := mk(fused.p.vals)
			p, m, v, ms, vs := fused.p.vals, fused.m.vals, fused.v.vals, fused.ms.vals, fused.vs.vals
			for step := 1; step <= 2; step++ {
				g := e.tensor(dt, []int{n}, e.random(n, -1e-2, 1e-2))
				h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec,
					BiasCorrection1: 1 - math.Pow(0.9, float64(step)), BiasCorrection2: 1 - math.Pow(0.999, float64(step)), GradScale: 0.5}
				e.each(func(d device.Device, o func(*operand) device.View) {
					for _, run := range []struct {
						d device.Device
						s state
					}{{d, fused}, {device.Without(d, device.CapAdam8bitStep), composed}} {
						s := run.s
						device.Adam8bitStep(run.d, o(s.p), o(g), o(s.m), o(s.v), o(s.ms), o(s.vs), h)
					}
				})
				p, m, v, ms, vs = adam8bitRef(p, g.vals, m, v, ms, vs, h)
			}
			for _, s := range []state{fused, composed} {
				e.exact("adam8bit param", s.p, p)
				e.exact("adam8bit m codes", s.m, m)
				e.exact("adam8bit v codes", s.v, v)
				e.exact("adam8bit m scales", s.ms, ms)
				e.exact("adam8bit v scales", s.vs, vs)
			}
		}
	}},
	{"StochasticRound", []device.DType{device.F32}, func(e *env, dt device.DType) {
		// Values of every magnitude, an infinity and a NaN, at an offset:
		// the fused kernel and the host fallback (through device.Without)
		// give StochasticBF16's bits.
		n := 5000
		vals := e.random(n, -3, 3)
		for i := range vals {
			vals[i] *= math.Pow(10, float64(i%9-4))
		}
		vals[7], vals[8] = math.Inf(-1), math.NaN()
		src := e.tensor(device.F32, []int{n}, vals)
		fused := e.tensor(device.BF16, []int{n}, nil)
		composed := e.tensor(device.BF16, []int{n}, nil)
		e.each(func(d device.Device, s func(*operand) device.View) {
			device.StochasticRoundBF16(d, s(fused), s(src), 0x5eed, 12345)
			device.StochasticRoundBF16(device.Without(d, device.CapStochasticRound), s(composed), s(src), 0x5eed, 12345)
		})
		want := stochasticRoundRef(src.vals, 0x5eed, 12345)
		e.exact("stochastic bf16", fused, want)
		e.exact("stochastic bf16 composed", composed, want)
	}},
	{"Optimizers", floatTypes, func(e *env, dt device.DType) {
		n := 300
		for _, dec := range []bool{false, true} {
			p := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			g := e.tensor(dt, []int{n}, e.random(n, -1, 1))
			m := e.tensor(device.F32, []int{n}, e.random(n, -0.1, 0.1))
			v := e.tensor(device.F32, []int{n}, e.random(n, 0, 0.01))
			h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec,
				BiasCorrection1: 1 - 0.9*0.9, BiasCorrection2: 1 - 0.999*0.999, GradScale: 0.5}
			e.each(func(d device.Device, s func(*operand) device.View) { device.AdamStep(d, s(p), s(g), s(m), s(v), h) })
			wp, wm, wv := adamRef(p.vals, g.vals, m.vals, v.vals, h)
			e.check("adam param", p, wp, 1e-5)
			e.check("adam m", m, wm, 1e-5)
			e.check("adam v", v, wv, 1e-5)
		}
		for _, first := range []bool{true, false} {
			p := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			g := e.tensor(dt, []int{n}, e.random(n, -1, 1))
			buf := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			h := device.SGDHyper{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, Nesterov: !first, FirstStep: first, GradScale: 2}
			e.each(func(d device.Device, s func(*operand) device.View) { device.SGDStep(d, s(p), s(g), s(buf), h) })
			wp, wb := sgdRef(p.vals, g.vals, buf.vals, h)
			e.check("sgd param", p, wp, 1e-5)
			e.check("sgd momentum", buf, wb, 1e-5)
		}
	}},
	{"AdamGroup", floatTypes, func(e *env, dt device.DType) {
		// Tensors of several sizes (one element, one past a power of two)
		// in one device.AdamSteps: each must be AdamStep's bits on that
		// tensor alone, and the reference's values within F32 rounding.
		sizes := []int{1, 5, 300, 257, 2049}
		for _, dec := range []bool{false, true} {
			h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec,
				BiasCorrection1: 1 - 0.9*0.9, BiasCorrection2: 1 - 0.999*0.999, GradScale: 0.5}
			type set struct{ p, g, m, v *operand }
			var group, alone []set
			for _, n := range sizes {
				s := set{e.tensor(device.F32, []int{n}, e.random(n, -1, 1)), e.tensor(dt, []int{n}, e.random(n, -1, 1)),
					e.tensor(device.F32, []int{n}, e.random(n, -0.1, 0.1)), e.tensor(device.F32, []int{n}, e.random(n, 0, 0.01))}
				group = append(group, s)
				alone = append(alone, set{e.tensor(device.F32, []int{n}, s.p.vals), s.g,
					e.tensor(device.F32, []int{n}, s.m.vals), e.tensor(device.F32, []int{n}, s.v.vals)})
			}
			e.each(func(d device.Device, o func(*operand) device.View) {
				var ps, gs, ms, vs []device.View
				for _, s := range group {
					ps, gs, ms, vs = append(ps, o(s.p)), append(gs, o(s.g)), append(ms, o(s.m)), append(vs, o(s.v))
				}
				device.AdamSteps(d, ps, gs, ms, vs, h)
				for _, s := range alone {
					device.AdamStep(d, o(s.p), o(s.g), o(s.m), o(s.v), h)
				}
			})
			if !e.values {
				continue
			}
			for i, s := range group {
				wp, wm, wv := adamRef(s.p.vals, s.g.vals, s.m.vals, s.v.vals, h)
				name := fmt.Sprintf("adam group %d", sizes[i])
				e.check(name+" param", s.p, wp, 1e-5)
				e.check(name+" m", s.m, wm, 1e-5)
				e.check(name+" v", s.v, wv, 1e-5)
				for _, c := range []struct {
					name   string
					got, w *operand
				}{{"param", s.p, alone[i].p}, {"m", s.m, alone[i].m}, {"v", s.v, alone[i].v}} {
					e.exact(name+" "+c.name+" as AdamStep's", c.got, e.read(c.w))
				}
			}
		}
	}},
}

func catchIndex(f func()) (ie *device.IndexError) {
	defer func() {
		if r := recover(); r != nil {
			err, ok := r.(error)
			if !ok || !errors.As(err, &ie) {
				panic(r)
			}
		}
	}()
	f()
	return nil
}
