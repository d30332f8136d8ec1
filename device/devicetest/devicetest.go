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

// Tolerance is the relative tolerance of results of dtype d.
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

// pair is one tensor on both devices.
type pair struct {
	ref, dev device.View
}

// env allocates paired buffers and frees them at the end of a case.
type env struct {
	t        *testing.T
	ref, dev device.Device
	rng      *rand.Rand
	bufs     []pair
	// values is false in RunAccounting: dev computes nothing, so only
	// what the allocators saw is compared.
	values bool
}

func (e *env) free() {
	for _, p := range e.bufs {
		e.ref.Free(p.ref.Buf)
		e.dev.Free(p.dev.Buf)
	}
	e.bufs = nil
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
// dt) on both devices. vals may be nil for an output (zero-filled).
func (e *env) tensor(dt device.DType, shape []int, vals []float64) pair {
	e.t.Helper()
	n := count(shape)
	if vals == nil {
		vals = make([]float64, n)
	}
	if len(vals) != n {
		e.t.Fatalf("devicetest: %d values for shape %v", len(vals), shape)
	}
	size := int64(max(n*dt.Size(), 1))
	rb, err := e.ref.Alloc(size, memory.Temporary)
	if err != nil {
		e.t.Fatalf("devicetest: %s: %v", e.ref.Name(), err)
	}
	db, err := e.dev.Alloc(size, memory.Temporary)
	if err != nil {
		e.ref.Free(rb)
		e.t.Fatalf("devicetest: %s: %v", e.dev.Name(), err)
	}
	raw := encode(dt, vals)
	e.ref.Write(rb, 0, raw)
	e.dev.Write(db, 0, raw)
	st := contiguous(shape)
	p := pair{
		ref: device.View{Buf: rb, DType: dt, Shape: shape, Strides: st},
		dev: device.View{Buf: db, DType: dt, Shape: shape, Strides: st},
	}
	e.bufs = append(e.bufs, p)
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

// read returns both devices' elements of a contiguous pair.
func (e *env) read(p pair) (ref, got []float64) {
	n := count(p.ref.Shape)
	sz := p.ref.DType.Size()
	rb := make([]byte, n*sz)
	db := make([]byte, n*sz)
	e.ref.Read(rb, p.ref.Buf, int64(p.ref.Offset*sz))
	if !e.values {
		return decode(p.ref.DType, rb), decode(p.ref.DType, rb)
	}
	e.dev.Read(db, p.dev.Buf, int64(p.dev.Offset*sz))
	return decode(p.ref.DType, rb), decode(p.dev.DType, db)
}

// check compares a pair within tol (relative to max(|want|, rms(want))).
func (e *env) check(name string, p pair, tol float64) {
	e.t.Helper()
	if !e.values {
		return
	}
	want, got := e.read(p)
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
					e.t.Errorf("%s[%d] = %v on %s, %v on %s", name, i, g, e.dev.Name(), w, e.ref.Name())
				}
			}
			continue
		}
		if math.Abs(g-w) > tol*math.Max(math.Abs(w), rms)+1e-30 || math.IsNaN(g) {
			bad++
			if bad <= 5 {
				e.t.Errorf("%s[%d] = %v on %s, want %v (from %s; tolerance %g)", name, i, g, e.dev.Name(), w, e.ref.Name(), tol)
			}
		}
	}
	if bad > 5 {
		e.t.Errorf("%s: %d of %d elements differ", name, bad, len(want))
	}
}

// exact compares a pair bit for bit (as values: NaN equals NaN).
func (e *env) exact(name string, p pair) { e.t.Helper(); e.check(name, p, 0) }

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

// bf16 rounds to nearest even (inputs here are never NaN).
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// floats are the dtypes every float kernel is checked in.
var floats = []device.DType{device.F32, device.F16, device.BF16}

// Run checks dev against ref kernel by kernel, one subtest per kernel and
// dtype. Capabilities run through device's package-level functions, so a
// device without one (or one seen through device.Without) is checked on
// the composed fallback.
func Run(t *testing.T, ref, dev device.Device) { run(t, ref, dev, true) }

// RunAccounting runs every case on ref and on dev, a device that computes
// nothing (the meta device), and compares what their allocators saw: the
// same bytes allocated, under the same categories, and the same peak
// within each case — which is what makes a plan traced on the meta device
// exact, fallbacks' temporaries included.
func RunAccounting(t *testing.T, ref, dev device.Device) { run(t, ref, dev, false) }

func run(t *testing.T, ref, dev device.Device, values bool) {
	for _, c := range cases {
		for _, dt := range c.dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				e := &env{t: t, ref: ref, dev: dev, rng: rand.New(rand.NewPCG(1, uint64(dt))), values: values}
				ref.Memory().ResetPeak()
				dev.Memory().ResetPeak()
				r0, d0 := ref.Memory().Allocated(), dev.Memory().Allocated()
				defer func() {
					e.free()
					if r, d := ref.Memory().Allocated(), dev.Memory().Allocated(); r != r0 || d != d0 {
						t.Errorf("allocated after the case: %s %d (was %d), %s %d (was %d)", ref.Name(), r, r0, dev.Name(), d, d0)
					}
				}()
				c.run(e, dt)
				// Both allocators saw the same requests: the same bytes are
				// allocated, and under the same category.
				rs, ds := ref.Memory().Stats(), dev.Memory().Stats()
				if ra, da := rs.Allocated.Current-r0, ds.Allocated.Current-d0; ra != da {
					t.Errorf("allocated by the case: %d bytes on %s, %d on %s", ra, ref.Name(), da, dev.Name())
				}
				if rc, dc := rs.Category(memory.Temporary).Current, ds.Category(memory.Temporary).Current; rc != dc {
					t.Errorf("temporaries: %d bytes on %s, %d on %s", rc, ref.Name(), dc, dev.Name())
				}
				if !values {
					if rp, dp := rs.Requested.Peak-r0, ds.Requested.Peak-d0; rp != dp {
						t.Errorf("peak within the case: %d bytes on %s, %d on %s", rp, ref.Name(), dp, dev.Name())
					}
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

// both runs a kernel on the two devices.
func both(e *env, f func(d device.Device, side func(pair) device.View)) {
	f(e.ref, func(p pair) device.View { return p.ref })
	f(e.dev, func(p pair) device.View { return p.dev })
}

var cases = []kcase{
	{"Fill", append(floats, device.F64, device.I32, device.I64), func(e *env, dt device.DType) {
		y := e.tensor(dt, []int{3, 5}, nil)
		both(e, func(d device.Device, v func(pair) device.View) { d.Fill(v(y), 2.75) })
		e.exact("fill", y)
	}},
	{"Copy", floats, func(e *env, dt device.DType) {
		x := e.tensor(device.F32, []int{4, 6}, e.random(24, -3, 3))
		y := e.tensor(dt, []int{6, 4}, nil)
		back := e.tensor(device.F32, []int{6, 4}, nil)
		both(e, func(d device.Device, v func(pair) device.View) {
			src := v(x)
			src.Shape, src.Strides = []int{6, 4}, []int{1, 6} // transposed read
			d.Copy(v(y), src)
			d.Copy(v(back), v(y))
		})
		e.exact("copy", y)
		e.exact("copy back", back)
	}},
	{"Unary", floats, func(e *env, dt device.DType) {
		for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ {
			lo := -2.0
			if op == device.Log || op == device.Sqrt || op == device.PowScalar || op == device.Recip {
				lo = 0.25
			}
			x := e.tensor(dt, []int{7, 9}, e.random(63, lo, 2))
			y := e.tensor(dt, []int{7, 9}, nil)
			both(e, func(d device.Device, v func(pair) device.View) { d.Unary(op, v(y), v(x), 1.5) })
			e.check(op.String(), y, Tolerance(dt))
		}
	}},
	{"UnaryBackward", floats, func(e *env, dt device.DType) {
		for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ {
			x := e.tensor(dt, []int{5, 8}, e.random(40, 0.25, 2))
			y := e.tensor(dt, []int{5, 8}, nil)
			dy := e.tensor(dt, []int{5, 8}, e.random(40, -1, 1))
			dx := e.tensor(dt, []int{5, 8}, nil)
			both(e, func(d device.Device, v func(pair) device.View) {
				d.Unary(op, v(y), v(x), 1.5)
				d.UnaryBackward(op, v(dx), v(x), v(y), v(dy), 1.5)
			})
			e.check(op.String()+" backward", dx, 2*Tolerance(dt))
		}
	}},
	{"Binary", floats, func(e *env, dt device.DType) {
		for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ {
			a := e.tensor(dt, []int{6, 10}, e.random(60, 0.5, 2))
			b := e.tensor(dt, []int{10}, e.random(10, 0.5, 2))
			y := e.tensor(dt, []int{6, 10}, nil)
			both(e, func(d device.Device, v func(pair) device.View) {
				bb := v(b)
				bb.Shape, bb.Strides = []int{6, 10}, []int{0, 1} // broadcast a row
				d.Binary(op, v(y), v(a), bb)
			})
			e.check(op.String(), y, Tolerance(dt))
		}
	}},
	{"Reduce", floats, func(e *env, dt device.DType) {
		for _, op := range []device.ReduceOp{device.Sum, device.Max, device.Min} {
			for _, out := range [][]int{{1, 300}, {4, 1}, {1, 1}, {300}} {
				x := e.tensor(dt, []int{4, 300}, e.random(1200, -1, 1))
				y := e.tensor(dt, out, nil)
				both(e, func(d device.Device, v func(pair) device.View) { d.Reduce(op, v(y), v(x)) })
				e.check(fmt.Sprintf("reduce %d into %v", op, out), y, Tolerance(dt))
			}
		}
	}},
	{"Gemm", floats, func(e *env, dt device.DType) {
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
				both(e, func(d device.Device, v func(pair) device.View) {
					d.Gemm(device.Gemm{TransA: tr[0], TransB: tr[1], M: m, N: n, K: k, Batch: batch,
						Alpha: 0.5, Beta: 0.25, A: v(a), B: v(b), C: v(c), LDA: lda, LDB: ldb, LDC: n,
						StrideA: m * k, StrideB: 0, StrideC: m * n})
				})
				e.check(fmt.Sprintf("gemm trans %v into %v", tr, cdt), c, math.Max(Tolerance(dt), Tolerance(cdt)))
			}
		}
	}},
	{"GemmBias", floats, func(e *env, dt device.DType) {
		// A linear layer's x·Wᵀ + b: a bias in F32 (a master weight under
		// autocast) or in the operands' dtype, into either C.
		m, n, k, batch := 19, 37, 21, 2
		for _, bdt := range []device.DType{device.F32, dt} {
			for _, cdt := range []device.DType{device.F32, dt} {
				a := e.tensor(dt, []int{batch, m * k}, e.random(batch*m*k, -1, 1))
				w := e.tensor(dt, []int{n * k}, e.random(n*k, -1, 1))
				bias := e.tensor(bdt, []int{n}, e.random(n, -1, 1))
				c := e.tensor(cdt, []int{batch, m, n}, e.random(batch*m*n, -1, 1)) // beta 0: never read
				both(e, func(d device.Device, v func(pair) device.View) {
					d.Gemm(device.Gemm{TransB: true, M: m, N: n, K: k, Batch: batch,
						Alpha: 1, A: v(a), B: v(w), C: v(c), LDA: k, LDB: k, LDC: n,
						StrideA: m * k, StrideC: m * n, Bias: v(bias)})
				})
				e.check(fmt.Sprintf("gemm with a %v bias into %v", bdt, cdt), c, 2*math.Max(Tolerance(dt), Tolerance(cdt)))
			}
		}
	}},
	{"GemmGroups", floats, func(e *env, dt device.DType) {
		// Heads inside [B, T, H, D]: B groups of H products each.
		b, t, h, d := 2, 5, 3, 4
		x := e.tensor(dt, []int{b * t * h * d}, e.random(b*t*h*d, -1, 1))
		w := e.tensor(dt, []int{d * 6}, e.random(d*6, -1, 1))
		c := e.tensor(device.F32, []int{b, h, t, 6}, nil)
		both(e, func(dev device.Device, v func(pair) device.View) {
			dev.Gemm(device.Gemm{M: t, N: 6, K: d, Batch: h, Outer: b, Alpha: 1,
				A: v(x), B: v(w), C: v(c), LDA: h * d, LDB: 6, LDC: 6,
				StrideA: d, StrideB: 0, StrideC: t * 6,
				OuterStrideA: t * h * d, OuterStrideC: h * t * 6})
		})
		e.check("gemm groups", c, Tolerance(dt))
	}},
	{"GemmTriangles", floats, func(e *env, dt device.DType) {
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
			both(e, func(d device.Device, v func(pair) device.View) {
				d.Gemm(device.Gemm{TransB: true, M: t, N: t, K: dh, Batch: batch, Alpha: 0.5,
					A: v(q), B: v(k), C: v(s), LDA: dh, LDB: dh, LDC: t,
					StrideA: t * dh, StrideB: t * dh, StrideC: t * t, Triangle: device.LowerC})
			})
			e.check(fmt.Sprintf("gemm LowerC into %v", cdt), s, math.Max(Tolerance(dt), Tolerance(cdt)))
			for _, upper := range []bool{false, true} {
				p := e.tensor(dt, []int{batch, t * t}, tri(upper))
				y := e.tensor(cdt, []int{batch, t, dh}, nil)
				mode := device.LowerA
				if upper {
					mode = device.UpperA
				}
				both(e, func(d device.Device, v func(pair) device.View) {
					d.Gemm(device.Gemm{M: t, N: dh, K: t, Batch: batch, Alpha: 1,
						A: v(p), B: v(k), C: v(y), LDA: t, LDB: dh, LDC: dh,
						StrideA: t * t, StrideB: t * dh, StrideC: t * dh, Triangle: mode})
				})
				e.check(fmt.Sprintf("gemm upper=%v into %v", upper, cdt), y, math.Max(Tolerance(dt), Tolerance(cdt)))
			}
		}
	}},
	{"Softmax", floats, func(e *env, dt device.DType) {
		for _, lg := range []bool{false, true} {
			x := e.tensor(dt, []int{6, 300}, e.random(1800, -4, 4))
			y := e.tensor(dt, []int{6, 300}, nil)
			dy := e.tensor(dt, []int{6, 300}, e.random(1800, -1, 1))
			dx := e.tensor(dt, []int{6, 300}, nil)
			both(e, func(d device.Device, v func(pair) device.View) {
				device.Softmax(d, v(y), v(x), lg)
				device.SoftmaxBackward(d, v(dx), v(y), v(dy), lg)
			})
			e.check(fmt.Sprintf("softmax log=%v", lg), y, Tolerance(dt))
			e.check(fmt.Sprintf("softmax backward log=%v", lg), dx, 2*Tolerance(dt))
		}
	}},
	{"LayerNorm", floats, func(e *env, dt device.DType) {
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
		both(e, func(d device.Device, v func(pair) device.View) {
			device.LayerNorm(d, v(y), v(mean), v(rstd), v(x), v(gamma), v(beta), 1e-5)
			device.LayerNormBackward(d, v(dx), v(dgamma), v(dbeta), v(dy), v(x), v(mean), v(rstd), v(gamma))
		})
		tol := Tolerance(dt)
		e.check("y", y, tol)
		e.check("mean", mean, tol)
		e.check("rstd", rstd, tol)
		e.check("dx", dx, 4*tol)
		e.check("dgamma", dgamma, 4*tol)
		e.check("dbeta", dbeta, 4*tol)
	}},
	{"Embedding", floats, func(e *env, dt device.DType) {
		vocab, dim := 11, 24
		for _, it := range []device.DType{device.I32, device.I64} {
			table := e.tensor(dt, []int{vocab, dim}, e.random(vocab*dim, -1, 1))
			idx := e.tensor(it, []int{9}, []float64{3, 0, 10, 3, 3, 7, 1, 0, 5})
			out := e.tensor(dt, []int{9, dim}, nil)
			grad := e.tensor(dt, []int{vocab, dim}, e.random(vocab*dim, -1, 1))
			both(e, func(d device.Device, v func(pair) device.View) {
				d.Gather(v(out), v(table), v(idx))
				d.ScatterAdd(v(grad), v(idx), v(out))
			})
			e.exact("gather", out)
			e.check("scatter-add", grad, Tolerance(dt))
		}
		// An index past the table panics with the same IndexError.
		table := e.tensor(dt, []int{vocab, dim}, nil)
		idx := e.tensor(device.I32, []int{4}, []float64{1, 2, 11, 12})
		out := e.tensor(dt, []int{4, dim}, nil)
		if !e.values {
			return
		}
		want := catchIndex(func() { e.ref.Gather(out.ref, table.ref, idx.ref) })
		got := catchIndex(func() { e.dev.Gather(out.dev, table.dev, idx.dev) })
		if want == nil || got == nil || *want != *got {
			e.t.Errorf("gather of index 11 of 11 rows: %s panics with %v, %s with %v", e.dev.Name(), got, e.ref.Name(), want)
		}
	}},
	{"Conv", floats, func(e *env, dt device.DType) {
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
			both(e, func(d device.Device, v func(pair) device.View) {
				d.Im2Col(v(col), v(x), g)
				d.Col2Im(v(dx), v(col), g)
			})
			e.exact(fmt.Sprintf("im2col dilation %v", dil), col)
			e.check(fmt.Sprintf("col2im dilation %v", dil), dx, Tolerance(dt))
		}
		for _, op := range []device.PoolOp{device.MaxPool, device.AvgPool} {
			pg := device.ConvGeom{N: 2, C: 3, H: 7, W: 6, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
			pg.OH, pg.OW = (pg.H-pg.KH)/pg.StrideH+1, (pg.W-pg.KW)/pg.StrideW+1
			on := pg.N * pg.C * pg.OH * pg.OW
			y := e.tensor(dt, []int{on}, nil)
			am := e.tensor(device.I32, []int{on}, nil)
			dy := e.tensor(dt, []int{on}, e.random(on, -1, 1))
			pdx := e.tensor(dt, []int{xn}, nil)
			both(e, func(d device.Device, v func(pair) device.View) {
				d.Pool(op, v(y), v(am), v(x), pg)
				d.PoolBackward(op, v(pdx), v(am), v(dy), pg)
			})
			e.check(fmt.Sprintf("pool %d", op), y, Tolerance(dt))
			if op == device.MaxPool {
				e.exact("argmax", am)
			}
			e.check(fmt.Sprintf("pool %d backward", op), pdx, Tolerance(dt))
		}
	}},
	{"CrossEntropy", floats, func(e *env, dt device.DType) {
		rows, c := 6, 37
		for _, s := range []float64{0, 0.1} {
			logits := e.tensor(dt, []int{rows, c}, e.random(rows*c, -3, 3))
			tg := e.tensor(device.I64, []int{rows}, []float64{0, 36, -100, 5, 17, 2})
			loss := e.tensor(dt, []int{rows}, nil)
			dloss := e.tensor(dt, []int{rows}, e.random(rows, 0.5, 1.5))
			dlogits := e.tensor(dt, []int{rows, c}, nil)
			both(e, func(d device.Device, v func(pair) device.View) {
				device.CrossEntropy(d, v(loss), v(logits), v(tg), -100, s)
				device.CrossEntropyBackward(d, v(dlogits), v(logits), v(tg), v(dloss), -100, s)
			})
			e.check(fmt.Sprintf("loss smoothing %v", s), loss, Tolerance(dt))
			e.check(fmt.Sprintf("dlogits smoothing %v", s), dlogits, 2*Tolerance(dt))
		}
		if !e.values {
			return
		}
		// A target past the classes panics with the same IndexError.
		logits := e.tensor(dt, []int{rows, c}, nil)
		tg := e.tensor(device.I64, []int{rows}, []float64{0, 1, 2, 37, 4, 5})
		loss := e.tensor(dt, []int{rows}, nil)
		want := catchIndex(func() { device.CrossEntropy(e.ref, loss.ref, logits.ref, tg.ref, -100, 0) })
		got := catchIndex(func() { device.CrossEntropy(e.dev, loss.dev, logits.dev, tg.dev, -100, 0) })
		if want == nil || got == nil || *want != *got {
			e.t.Errorf("cross entropy of target 37 of 37 classes: %s panics with %v, %s with %v", e.dev.Name(), got, e.ref.Name(), want)
		}
	}},
	{"Dropout", append(floats, device.F64), func(e *env, dt device.DType) {
		x := e.tensor(dt, []int{33, 65}, e.random(33*65, 0.5, 2))
		y := e.tensor(dt, []int{33, 65}, nil)
		both(e, func(d device.Device, v func(pair) device.View) { d.Dropout(v(y), v(x), 0.3, 12345) })
		want, got := e.read(y)
		for i := range want {
			if (want[i] == 0) != (got[i] == 0) {
				e.t.Fatalf("dropout mask differs at %d: %v on %s, %v on %s", i, got[i], e.dev.Name(), want[i], e.ref.Name())
			}
		}
		e.check("dropout", y, Tolerance(dt))
	}},
	{"Random", append(floats, device.F64), func(e *env, dt device.DType) {
		for _, dist := range []device.Distribution{device.Uniform, device.Normal} {
			y := e.tensor(dt, []int{17, 31}, nil)
			both(e, func(d device.Device, v func(pair) device.View) { d.Random(v(y), dist, -1, 2, 99) })
			e.check(fmt.Sprintf("random %d", dist), y, Tolerance(dt))
		}
	}},
	{"Masks", floats, func(e *env, dt device.DType) {
		x := e.tensor(dt, []int{2, 5, 5}, e.random(50, -1, 1))
		mv := e.random(25, 0, 2)
		for i := range mv {
			mv[i] = math.Floor(mv[i])
		}
		mask := e.tensor(dt, []int{5, 5}, mv)
		y := e.tensor(dt, []int{2, 5, 5}, nil)
		z := e.tensor(dt, []int{2, 5, 5}, nil)
		both(e, func(d device.Device, v func(pair) device.View) {
			m := v(mask)
			m.Shape, m.Strides = []int{2, 5, 5}, []int{0, 5, 1}
			d.MaskedFill(v(y), v(x), m, -7)
			device.CausalFill(d, v(z), v(x), -9)
		})
		e.exact("masked fill", y)
		e.exact("causal fill", z)
	}},
	{"AllFinite", floats, func(e *env, dt device.DType) {
		ok := e.tensor(dt, []int{100}, e.random(100, -1, 1))
		vals := e.random(100, -1, 1)
		vals[77] = math.Inf(1)
		bad := e.tensor(dt, []int{100}, vals)
		vals[77] = math.NaN()
		nan := e.tensor(dt, []int{100}, vals)
		for _, c := range []struct {
			p    pair
			want bool
		}{{ok, true}, {bad, false}, {nan, false}} {
			if !e.values {
				break
			}
			if r, g := e.ref.AllFinite(c.p.ref), e.dev.AllFinite(c.p.dev); r != c.want || g != c.want {
				e.t.Errorf("AllFinite = %v on %s, %v on %s, want %v", g, e.dev.Name(), r, e.ref.Name(), c.want)
			}
		}
	}},
	{"Attention", append(floats, device.F64), func(e *env, dt device.DType) {
		kr, kd := device.AttentionOf(e.ref), device.AttentionOf(e.dev)
		if kr == nil || kd == nil {
			e.t.Skipf("fused attention: %s has it: %v, %s: %v (the tensor package composes it otherwise)", e.ref.Name(), kr != nil, e.dev.Name(), kd != nil)
		}
		// Heads viewed inside a fused projection [B, T, 3, H, D], as the
		// models pass them: q, k and v are strided [B, H, T, D] views.
		const b, h, t, d = 2, 3, 70, 8
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
		out := e.tensor(dt, []int{b, h, t, d}, nil)
		lse := e.tensor(acc, []int{b, h, t}, nil)
		dout := e.tensor(dt, []int{b, h, t, d}, e.random(b*h*t*d, -1, 1))
		dq := e.tensor(dt, []int{b, h, t, d}, nil)
		dk := e.tensor(dt, []int{b, h, t, d}, nil)
		dv := e.tensor(dt, []int{b, h, t, d}, nil)
		for _, p := range []float64{0, 0.25} {
			a := device.Attention{Scale: 0.35, Dropout: p, Seed: 5}
			both(e, func(d device.Device, v func(pair) device.View) {
				k := device.AttentionOf(d)
				q, kk, vv := view(v(qkv), 0), view(v(qkv), 1), view(v(qkv), 2)
				k.CausalAttention(v(out), v(lse), q, kk, vv, a)
				k.CausalAttentionBackward(v(dq), v(dk), v(dv), v(dout), v(out), v(lse), q, kk, vv, a)
			})
			tol := Tolerance(dt)
			e.check(fmt.Sprintf("attention dropout %v", p), out, tol)
			e.check(fmt.Sprintf("log-sum-exp dropout %v", p), lse, Tolerance(acc))
			e.check(fmt.Sprintf("dq dropout %v", p), dq, 2*tol)
			e.check(fmt.Sprintf("dk dropout %v", p), dk, 2*tol)
			e.check(fmt.Sprintf("dv dropout %v", p), dv, 2*tol)
		}
	}},
	{"Adam8bit", []device.DType{device.F32}, func(e *env, dt device.DType) {
		// Three blocks, the last partial; codes and scales from a first
		// step, so the second dequantises non-trivial state. The fused
		// kernel and the fallback compute Adam8bitBlock's F32 arithmetic:
		// parameters, codes and scales agree exactly.
		n := 2*device.Quant8Block + 300
		nb := device.Quant8Blocks(n)
		for _, dec := range []bool{false, true} {
			p := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			m := e.tensor(device.U8, []int{n}, nil)
			v := e.tensor(device.U8, []int{n}, nil)
			ms := e.tensor(device.F32, []int{nb}, nil)
			vs := e.tensor(device.F32, []int{nb}, nil)
			for step := 1; step <= 2; step++ {
				g := e.tensor(dt, []int{n}, e.random(n, -1e-2, 1e-2))
				h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec,
					BiasCorrection1: 1 - math.Pow(0.9, float64(step)), BiasCorrection2: 1 - math.Pow(0.999, float64(step)), GradScale: 0.5}
				both(e, func(d device.Device, s func(pair) device.View) {
					device.Adam8bitStep(d, s(p), s(g), s(m), s(v), s(ms), s(vs), h)
				})
			}
			e.exact("adam8bit param", p)
			e.exact("adam8bit m codes", m)
			e.exact("adam8bit v codes", v)
			e.exact("adam8bit m scales", ms)
			e.exact("adam8bit v scales", vs)
		}
	}},
	{"StochasticRound", []device.DType{device.F32}, func(e *env, dt device.DType) {
		// Values of every magnitude, an infinity and a NaN, at an offset:
		// the fused kernel and the host fallback give the same bits.
		n := 5000
		vals := e.random(n, -3, 3)
		for i := range vals {
			vals[i] *= math.Pow(10, float64(i%9-4))
		}
		vals[7], vals[8] = math.Inf(-1), math.NaN()
		src := e.tensor(device.F32, []int{n}, vals)
		dst := e.tensor(device.BF16, []int{n}, nil)
		both(e, func(d device.Device, s func(pair) device.View) {
			device.StochasticRoundBF16(d, s(dst), s(src), 0x5eed, 12345)
		})
		e.exact("stochastic bf16", dst)
	}},
	{"Optimizers", floats, func(e *env, dt device.DType) {
		n := 300
		for _, dec := range []bool{false, true} {
			p := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			g := e.tensor(dt, []int{n}, e.random(n, -1, 1))
			m := e.tensor(device.F32, []int{n}, e.random(n, -0.1, 0.1))
			v := e.tensor(device.F32, []int{n}, e.random(n, 0, 0.01))
			h := device.AdamHyper{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: dec,
				BiasCorrection1: 1 - 0.9*0.9, BiasCorrection2: 1 - 0.999*0.999, GradScale: 0.5}
			both(e, func(d device.Device, s func(pair) device.View) { device.AdamStep(d, s(p), s(g), s(m), s(v), h) })
			e.check("adam param", p, 1e-5)
			e.check("adam m", m, 1e-5)
			e.check("adam v", v, 1e-5)
		}
		for _, first := range []bool{true, false} {
			p := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			g := e.tensor(dt, []int{n}, e.random(n, -1, 1))
			buf := e.tensor(device.F32, []int{n}, e.random(n, -1, 1))
			h := device.SGDHyper{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, Nesterov: !first, FirstStep: first, GradScale: 2}
			both(e, func(d device.Device, s func(pair) device.View) { device.SGDStep(d, s(p), s(g), s(buf), h) })
			e.check("sgd param", p, 1e-5)
			e.check("sgd momentum", buf, 1e-5)
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
