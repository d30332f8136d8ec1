package devicetest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/x448/float16"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// RunQuant checks dev's quantized-weight kernels (device/quant.go)
// against ref's (the CPU device): Quantize writes the same bytes,
// Dequantize the same values, and QuantGemm the same products within the
// dtype's tolerance, through the package-level functions, so that a
// device without the fused product (or one seen through device.Without)
// is checked on the composed path. It is self-contained (its own
// operands), so it runs beside Run on every device Run runs on.
func RunQuant(t *testing.T, ref, dev device.Device) { runQuant(t, ref, dev, true) }

// RunQuantAccounting runs RunQuant's cases on ref and on dev, a device
// that computes nothing (the meta device), and compares what the
// allocators saw: the same bytes and the same peak in every case, so
// plans with quantized weights stay exact, the composed product's tiles
// included.
func RunQuantAccounting(t *testing.T, ref, dev device.Device) { runQuant(t, ref, dev, false) }

// qenv is one case's buffers on both devices.
type qenv struct {
	t        *testing.T
	ref, dev device.Device
	values   bool
	rng      *rand.Rand
	bufs     [][2]device.Buffer
}

// alloc allocates n elements of dt on both devices (Bytes(dt, n)) and
// writes raw (encoded values or quantized storage) into both.
func (e *qenv) alloc(dt device.DType, shape []int, raw []byte) [2]device.View {
	e.t.Helper()
	n := count(shape)
	var v [2]device.View
	for i, d := range []device.Device{e.ref, e.dev} {
		b, err := d.Alloc(max(device.Bytes(dt, n), 1), memory.Temporary)
		if err != nil {
			e.t.Fatalf("devicetest: %s: %v", d.Name(), err)
		}
		if raw != nil {
			d.Write(b, 0, raw)
		}
		v[i] = device.View{Buf: b, DType: dt, Shape: shape, Strides: contiguous(shape)}
	}
	e.bufs = append(e.bufs, [2]device.Buffer{v[0].Buf, v[1].Buf})
	return v
}

func (e *qenv) free() {
	for i := len(e.bufs) - 1; i >= 0; i-- {
		e.ref.Free(e.bufs[i][0])
		e.dev.Free(e.bufs[i][1])
	}
	e.bufs = nil
}

// weights returns n values of several scales (a row per decade), as
// trained weights have.
func (e *qenv) weights(n, cols int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(e.rng.NormFloat64() * math.Pow(10, float64(i/cols%4-3)))
	}
	return x
}

// storage returns the quantized storage bytes of x in dt, by device's
// host definitions.
func quantStorage(t *testing.T, dt device.DType, x []float32) []byte {
	t.Helper()
	h := &hostBuf{b: make([]byte, device.Bytes(dt, len(x)))}
	var err error
	if dt == device.NF4 {
		p, qerr := device.QuantizeNF4(x)
		if err = qerr; err == nil {
			err = device.WriteNF4(h, device.Buffer{}, device.NF4LayoutOf(len(x)), &p)
		}
	} else {
		p, qerr := device.QuantizeInt8(x)
		if err = qerr; err == nil {
			err = device.WriteInt8(h, device.Buffer{}, device.Int8LayoutOf(len(x)), &p)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return h.b
}

// hostBuf is just enough of a device for WriteNF4 and WriteInt8 to fill
// a byte slice.
type hostBuf struct {
	device.Device
	b []byte
}

func (h *hostBuf) Write(_ device.Buffer, off int64, src []byte) { copy(h.b[off:], src) }

// bytesOf reads a view's whole storage (Bytes of its elements) on one
// device.
func bytesOf(d device.Device, v device.View) []byte {
	n := device.Bytes(v.DType, count(v.Shape))
	b := make([]byte, n)
	d.Read(b, v.Buf, int64(v.Offset)*int64(max(v.DType.Size(), 1)))
	return b
}

func runQuant(t *testing.T, ref, dev device.Device, values bool) {
	for _, c := range quantCases {
		for _, dt := range []device.DType{device.NF4, device.Int8} {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				e := &qenv{t: t, ref: ref, dev: dev, values: values, rng: rand.New(rand.NewPCG(33, uint64(dt)))}
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
				rs, ds := ref.Memory().Stats(), dev.Memory().Stats()
				if !values {
					if rp, dp := rs.Requested.Peak-r0, ds.Requested.Peak-d0; rp != dp {
						t.Errorf("peak within the case: %d bytes on %s, %d on %s", rp, ref.Name(), dp, dev.Name())
					}
				}
			})
		}
	}
}

type qcase struct {
	name string
	run  func(e *qenv, dt device.DType)
}

// encodeF32 encodes float32 values in a float dtype.
func encodeF32(dt device.DType, x []float32) []byte {
	v := make([]float64, len(x))
	for i, f := range x {
		v[i] = float64(f)
	}
	return encode(dt, v)
}

var quantCases = []qcase{
	{"Quantize", func(e *qenv, dt device.DType) {
		// Lengths with a partial block, a partial nested block and an
		// odd count, and one over several of the host path's chunks of
		// 2^16 elements (its goroutines); sources in every float dtype.
		for _, n := range []int{64 * 300, 64*9 + 37, 1, 3<<16 + 64*5 + 7} {
			for _, src := range []device.DType{device.F32, device.BF16, device.F16, device.F64} {
				if n > 1<<16 && src != device.F32 {
					continue
				}
				x := e.weights(n, 64)
				s := e.alloc(src, []int{n}, encodeF32(src, x))
				q := e.alloc(dt, []int{n}, nil)
				for i, d := range []device.Device{e.ref, e.dev} {
					if err := device.Quantize(d, q[i], s[i]); err != nil {
						e.t.Fatalf("%s: %v", d.Name(), err)
					}
				}
				if e.values {
					want := bytesOf(e.ref, q[0])
					got := bytesOf(e.dev, q[1])
					if i := firstDiff(got, want); i >= 0 {
						e.t.Errorf("%d %v elements: quantized byte %d is %#02x on %s, %#02x on %s", n, src, i, got[i], e.dev.Name(), want[i], e.ref.Name())
					}
					// And both are the host definition's.
					if i := firstDiff(want, quantStorage(e.t, dt, roundTo(src, x))); i >= 0 {
						e.t.Errorf("%d %v elements: %s's byte %d differs from the definition's", n, src, e.ref.Name(), i)
					}
				}
			}
		}
		// A non-finite element is an error naming it, on both; of
		// several, the first, whichever chunk is quantized first.
		for _, c := range []struct {
			n   int
			bad []int
		}{{200, []int{77}}, {3 << 16, []int{150000, 70001, 140000}}} {
			x := e.weights(c.n, 64)
			for _, i := range c.bad {
				x[i] = float32(math.NaN())
			}
			s := e.alloc(device.F32, []int{c.n}, encodeF32(device.F32, x))
			q := e.alloc(dt, []int{c.n}, nil)
			want := slices.Min(c.bad)
			for i, d := range []device.Device{e.ref, e.dev} {
				err := device.Quantize(d, q[i], s[i])
				nf, ok := err.(*device.NonFiniteError)
				if e.values && (!ok || nf.Index != want || !math.IsNaN(float64(nf.Value))) {
					e.t.Errorf("%s: quantizing NaNs at %v: %v, want element %d, NaN", d.Name(), c.bad, err, want)
				}
			}
		}
	}},
	{"Dequantize", func(e *qenv, dt device.DType) {
		rows, cols := 9, 200
		x := e.weights(rows*cols, cols)
		q := e.alloc(dt, []int{rows, cols}, quantStorage(e.t, dt, x))
		for _, out := range []device.DType{device.F32, device.BF16, device.F16, device.F64} {
			for _, r := range [][4]int{{0, rows, 0, cols}, {2, 7, 5, 133}, {8, 9, 199, 200}} {
				shape := []int{r[1] - r[0], r[3] - r[2]}
				y := e.alloc(out, shape, nil)
				for i, d := range []device.Device{e.ref, e.dev} {
					device.Dequantize(d, y[i], q[i], r[0], r[1], r[2], r[3])
				}
				if e.values {
					if i := firstDiff(bytesOf(e.dev, y[1]), bytesOf(e.ref, y[0])); i >= 0 {
						e.t.Errorf("dequantized %v rows %d:%d columns %d:%d: byte %d differs", out, r[0], r[1], r[2], r[3], i)
					}
				}
			}
		}
	}},
	{"QuantGemm", func(e *qenv, dt device.DType) {
		for _, s := range [][3]int{{5, 70, 130}, {33, 96, 64}} {
			for _, adt := range []device.DType{device.F32, device.BF16, device.F16} {
				for _, transB := range []bool{true, false} {
					for _, cdt := range []device.DType{adt, device.F32} {
						bias := transB && cdt == adt
						checkQuantGemm(e, dt, adt, cdt, s[0], s[1], s[2], transB, bias)
					}
				}
			}
		}
		// Products whose op(B) spans two of the composed path's tiles.
		for _, transB := range []bool{true, false} {
			checkQuantGemm(e, dt, device.BF16, device.BF16, 2, device.QuantTileElems/64+3, 64, transB, transB)
		}
	}},
}

// checkQuantGemm runs C = 0.75·A·op(B) (+ bias, or + 0.5·C) on both
// devices and compares C.
func checkQuantGemm(e *qenv, dt, adt, cdt device.DType, m, n, k int, transB, bias bool) {
	e.t.Helper()
	rows, cols := k, n
	if transB {
		rows, cols = n, k
	}
	x := e.weights(rows*cols, cols)
	b := e.alloc(dt, []int{rows, cols}, quantStorage(e.t, dt, x))
	av := make([]float32, m*k)
	for i := range av {
		av[i] = float32(e.rng.NormFloat64())
	}
	a := e.alloc(adt, []int{m, k}, encodeF32(adt, av))
	c0 := make([]float32, m*n)
	for i := range c0 {
		c0[i] = float32(i%7) - 3
	}
	c := e.alloc(cdt, []int{m, n}, encodeF32(cdt, c0))
	var bv [2]device.View
	if bias {
		bs := make([]float32, n)
		for i := range bs {
			bs[i] = float32(i%5) * 0.25
		}
		bv = e.alloc(device.F32, []int{n}, encodeF32(device.F32, bs))
	}
	for i, d := range []device.Device{e.ref, e.dev} {
		g := device.Gemm{TransB: transB, M: m, N: n, K: k, Batch: 1, Alpha: 0.75, Beta: 0.5,
			A: a[i], B: b[i], C: c[i], LDA: k, LDB: cols, LDC: n}
		if bias {
			g.Beta, g.Bias = 0, bv[i]
		}
		device.QuantGemm(d, g)
	}
	if !e.values {
		return
	}
	want := decode(cdt, bytesOf(e.ref, c[0]))
	got := decode(cdt, bytesOf(e.dev, c[1]))
	tol := Tolerance(cdt)
	if cdt == device.F32 && adt != device.F32 {
		tol = Tolerance(adt) // products of 16-bit operands, summed in F32 in another order
	}
	var rms float64
	for _, w := range want {
		rms += w * w
	}
	rms = math.Sqrt(rms / float64(len(want)))
	bad := 0
	for i := range want {
		if d := math.Abs(got[i] - want[i]); d > tol*math.Max(math.Abs(want[i]), rms) || math.IsNaN(got[i]) {
			if bad < 3 {
				e.t.Errorf("%v×%v→%v %dx%dx%d transB=%v bias=%v: C[%d] = %v on %s, %v on %s",
					adt, dt, cdt, m, n, k, transB, bias, i, got[i], e.dev.Name(), want[i], e.ref.Name())
			}
			bad++
		}
	}
	if bad > 3 {
		e.t.Errorf("%d of %d elements differ", bad, len(want))
	}
}

// roundTo returns x as dt holds it, widened back to float32 (F64 holds
// float32 values exactly).
func roundTo(dt device.DType, x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		switch dt {
		case device.BF16:
			out[i] = math.Float32frombits(uint32(bf16(v)) << 16)
		case device.F16:
			out[i] = float16.Fromfloat32(v).Float32()
		default:
			out[i] = v
		}
	}
	return out
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
