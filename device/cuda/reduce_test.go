//go:build cuda || cudaemu

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// hostTensor is a contiguous tensor on the device with its values (as
// stored) on the host.
type hostTensor struct {
	v    device.View
	vals []float64
}

func upload(t *testing.T, d *Device, dt device.DType, shape []int, vals []float64) hostTensor {
	t.Helper()
	n := 1
	for _, s := range shape {
		n *= s
	}
	if vals == nil {
		vals = make([]float64, n)
	}
	raw := make([]byte, n*dt.Size())
	for i, x := range vals {
		o := raw[i*dt.Size():]
		switch dt {
		case device.F32:
			binary.LittleEndian.PutUint32(o, math.Float32bits(float32(x)))
		case device.F64:
			binary.LittleEndian.PutUint64(o, math.Float64bits(x))
		case device.BF16:
			b := math.Float32bits(float32(x))
			b += 0x7fff + (b>>16)&1
			binary.LittleEndian.PutUint16(o, uint16(b>>16))
		default:
			t.Fatalf("upload of %v", dt)
		}
	}
	b, err := d.Alloc(int64(max(len(raw), 4)), memory.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	d.Write(b, 0, raw)
	strides := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = s
		s *= shape[i]
	}
	h := hostTensor{v: device.View{Buf: b, DType: dt, Shape: shape, Strides: strides}}
	h.vals = download(d, h.v)
	return h
}

func download(d *Device, v device.View) []float64 {
	n := v.Len()
	raw := make([]byte, n*v.DType.Size())
	d.Read(raw, v.Buf, int64(v.Offset*v.DType.Size()))
	out := make([]float64, n)
	for i := range out {
		o := raw[i*v.DType.Size():]
		switch v.DType {
		case device.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(o)))
		case device.F64:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(o))
		case device.BF16:
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(o)) << 16))
		}
	}
	return out
}

// near checks got against want: within tol of the larger of |want| and
// the RMS of want, plus n·u·mag (a sum of n terms of magnitudes summing to
// mag, accumulated in F32 — or F64 — in any order).
func near(t *testing.T, name string, dt device.DType, got, want, mag []float64, n int, tol float64) {
	t.Helper()
	u := 0x1p-24
	if dt == device.F64 {
		u = 0x1p-53
	}
	var rms float64
	for _, w := range want {
		rms += w * w
	}
	rms = math.Sqrt(rms / float64(max(len(want), 1)))
	bad := 0
	for i := range want {
		bound := tol*math.Max(math.Abs(want[i]), rms) + float64(n)*u*mag[i]
		if math.Abs(got[i]-want[i]) > bound || math.IsNaN(got[i]) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, want %v (bound %g)", name, i, got[i], want[i], bound)
			}
		}
	}
}

// TestReducePaths runs Reduce through each of its kernels (one thread,
// one block or a warp's lanes per output: reducePlan) on shapes larger
// than the conformance suite's, against sums in float64.
func TestReducePaths(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		in, out []int
		kernel  string
	}{
		{[]int{300, 70}, []int{1, 70}, "k_reduce_cols"},
		{[]int{70}, []int{70}, "k_reduce_thread"},
		{[]int{3, 100, 45}, []int{3, 1, 45}, "k_reduce_cols"},
		{[]int{100, 45}, []int{45}, "k_reduce_cols"},
		{[]int{130, 40}, []int{130, 1}, "k_reduce_thread"},
		{[]int{40, 130}, []int{40, 1}, "k_reduce_block"},
		{[]int{5, 3000}, []int{1, 1}, "k_reduce_block"},
		{[]int{200, 7}, []int{1, 7}, "k_reduce_block"},
	}
	for _, dt := range []device.DType{device.F32, device.BF16, device.F64} {
		for _, c := range cases {
			for _, op := range []device.ReduceOp{device.Sum, device.Max, device.Min} {
				t.Run(fmt.Sprintf("%v/%v->%v/%d", dt, c.in, c.out, op), func(t *testing.T) {
					n := 1
					for _, s := range c.in {
						n *= s
					}
					vals := make([]float64, n)
					for i := range vals {
						vals[i] = rng.Float64()*2 - 1
					}
					x := upload(t, d, dt, c.in, vals)
					y := upload(t, d, dt, c.out, nil)
					if k, _ := reducePlan(newRed(y.v, x.v)); k != c.kernel {
						t.Errorf("reducePlan: %s, want %s", k, c.kernel)
					}
					d.Reduce(op, y.v, x.v)
					// The reference: out index of each input element.
					want := make([]float64, y.v.Len())
					mag := make([]float64, len(want))
					for i := range want {
						want[i] = map[device.ReduceOp]float64{device.Sum: 0, device.Max: math.Inf(-1), device.Min: math.Inf(1)}[op]
					}
					lead := len(c.in) - len(c.out)
					terms := 0
					for i, xv := range x.vals {
						o, rem, stride := 0, i, 1
						idx := make([]int, len(c.in))
						for k := len(c.in) - 1; k >= 0; k-- {
							idx[k] = rem % c.in[k]
							rem /= c.in[k]
						}
						for k := len(c.out) - 1; k >= 0; k-- {
							if c.out[k] != 1 {
								o += idx[k+lead] * stride
							}
							stride *= c.out[k]
						}
						switch op {
						case device.Sum:
							want[o] += xv
						case device.Max:
							want[o] = math.Max(want[o], xv)
						case device.Min:
							want[o] = math.Min(want[o], xv)
						}
						mag[o] += math.Abs(xv)
					}
					terms = n / len(want)
					if op != device.Sum {
						terms = 0
					}
					got := download(d, y.v)
					tol := map[device.DType]float64{device.F32: 1e-6, device.BF16: 8e-3, device.F64: 1e-14}[dt]
					near(t, "reduce", dt, got, roundTo(dt, want), mag, terms, tol)
				})
			}
		}
	}
}

// TestLayerNormBackwardParams checks k_layernorm_bwd_param's column sums
// over many rows (every warp of its blocks busy, a partial last block)
// against float64.
func TestLayerNormBackwardParams(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []device.DType{device.F32, device.F64} {
		for _, shape := range [][2]int{{300, 70}, {9, 33}, {1000, 5}} {
			rows, n := shape[0], shape[1]
			t.Run(fmt.Sprintf("%v/%dx%d", dt, rows, n), func(t *testing.T) {
				r := func(k int, lo, hi float64) []float64 {
					v := make([]float64, k)
					for i := range v {
						v[i] = lo + (hi-lo)*rng.Float64()
					}
					return v
				}
				x := upload(t, d, dt, []int{rows, n}, r(rows*n, -2, 2))
				dy := upload(t, d, dt, []int{rows, n}, r(rows*n, -1, 1))
				mean := upload(t, d, dt, []int{rows}, r(rows, -0.5, 0.5))
				rstd := upload(t, d, dt, []int{rows}, r(rows, 0.5, 2))
				dg := upload(t, d, dt, []int{n}, r(n, -1, 1))
				db := upload(t, d, dt, []int{n}, r(n, -1, 1))
				wg, wb := append([]float64(nil), dg.vals...), append([]float64(nil), db.vals...)
				mg, mb := make([]float64, n), make([]float64, n)
				for i := range n {
					mg[i], mb[i] = math.Abs(wg[i]), math.Abs(wb[i])
					for row := range rows {
						g := dy.vals[row*n+i]
						xh := (x.vals[row*n+i] - mean.vals[row]) * rstd.vals[row]
						wg[i] += g * xh
						wb[i] += g
						mg[i] += math.Abs(g * xh)
						mb[i] += math.Abs(g)
					}
				}
				d.launch("k_layernorm_bwd_param"+computeSuffix(x.v), colsGrid(int64(n)),
					new(args).i64(int64(rows)).i64(int64(n)).op(dg.v).op(db.v).op(dy.v).op(x.v).op(mean.v).op(rstd.v))
				tol := map[device.DType]float64{device.F32: 1e-6, device.F64: 1e-14}[dt]
				near(t, "dgamma", dt, download(d, dg.v), roundTo(dt, wg), mg, 2*rows+1, tol)
				near(t, "dbeta", dt, download(d, db.v), roundTo(dt, wb), mb, rows+1, tol)
			})
		}
	}
}

func roundTo(dt device.DType, v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		switch dt {
		case device.F32:
			out[i] = float64(float32(x))
		case device.BF16:
			b := math.Float32bits(float32(x))
			b += 0x7fff + (b>>16)&1
			out[i] = float64(math.Float32frombits(b &^ 0xffff))
		default:
			out[i] = x
		}
	}
	return out
}
