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
// one block or a warp's lanes per output: reducePlan; the column sums in
// one pass or split over the rows) on shapes larger than the conformance
// suite's, against sums in float64.
func TestReducePaths(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		in, out []int
		kernel  string
	}{
		{[]int{300, 70}, []int{1, 70}, "k_reduce_cols"},       // two slices
		{[]int{4096, 384}, []int{384}, "k_reduce_cols"},       // a GPT's bias: 11 slices
		{[]int{4099, 45}, []int{1, 45}, "k_reduce_cols"},      // a ragged last slice
		{[]int{3, 400, 45}, []int{3, 1, 45}, "k_reduce_cols"}, // two kept dimensions, split
		{[]int{200, 1000}, []int{1000}, "k_reduce_cols"},      // one slice: too few rows
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
					if k, _ := reducePlan(newRed(y.v, x.v), accBytes(computeSuffix(y.v, x.v))); k != c.kernel {
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
// over many rows (every warp of its blocks busy, a partial last block;
// split over the rows or not, a ragged last slice) against float64, with
// dgamma or dbeta left out.
func TestLayerNormBackwardParams(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []device.DType{device.F32, device.BF16, device.F64} {
		for _, c := range []struct {
			rows, n     int
			gamma, beta bool
		}{
			{300, 70, true, true}, {9, 33, true, true}, {1000, 5, true, true},
			{4096, 384, true, true}, {4099, 45, true, true}, {1000, 100, true, false}, {1000, 100, false, true},
		} {
			rows, n := c.rows, c.n
			t.Run(fmt.Sprintf("%v/%dx%d/%v,%v", dt, rows, n, c.gamma, c.beta), func(t *testing.T) {
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
				gv, bv := dg.v, db.v
				if !c.gamma {
					gv, wg = device.View{}, dg.vals
				}
				if !c.beta {
					bv, wb = device.View{}, db.vals
				}
				d.layerNormParams(rows, n, computeSuffix(x.v), gv, bv, dy.v, x.v, mean.v, rstd.v)
				tol := map[device.DType]float64{device.F32: 1e-6, device.BF16: 8e-3, device.F64: 1e-14}[dt]
				near(t, "dgamma", dt, download(d, dg.v), roundTo(dt, wg), mg, 2*rows+1, tol)
				near(t, "dbeta", dt, download(d, db.v), roundTo(dt, wb), mb, rows+1, tol)
			})
		}
	}
}

// TestReduceColsOrder checks a column sum bit for bit against the order
// of additions kernels.cu's comments give (each group's four rows in
// flight, the groups, then the slices, each in turn), and that two runs
// agree bit for bit: split over the rows, the result is as deterministic
// as in one pass. Layer norm's sums must repeat too.
func TestReduceColsOrder(t *testing.T) {
	d := newTestDevice(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, shape := range [][2]int{{4096, 384}, {4099, 45}, {300, 70}, {200, 1000}} {
		rows, n := shape[0], shape[1]
		t.Run(fmt.Sprintf("%dx%d", rows, n), func(t *testing.T) {
			vals := make([]float64, rows*n)
			for i := range vals {
				vals[i] = float64(float32(rng.NormFloat64() * math.Exp(4*rng.Float64())))
			}
			x := upload(t, d, device.F32, []int{rows, n}, vals)
			y := upload(t, d, device.F32, []int{n}, nil)
			_, p := reducePlan(newRed(y.v, x.v), 4)
			want := colsOrder(x.vals, rows, n, p)
			var runs [2][]float64
			for k := range runs {
				d.Fill(y.v, math.NaN())
				d.Reduce(device.Sum, y.v, x.v)
				runs[k] = download(d, y.v)
			}
			for i := range n {
				if math.Float32bits(float32(runs[0][i])) != math.Float32bits(want[i]) {
					t.Fatalf("%d slices: sum %d = %v, want %v (the kernels' order)", p.slices, i, runs[0][i], want[i])
				}
				if math.Float32bits(float32(runs[1][i])) != math.Float32bits(float32(runs[0][i])) {
					t.Fatalf("sum %d = %v, then %v", i, runs[0][i], runs[1][i])
				}
			}

			dy := upload(t, d, device.F32, []int{rows, n}, vals)
			mean := upload(t, d, device.F32, []int{rows}, vals[:rows])
			rstd := upload(t, d, device.F32, []int{rows}, vals[rows:2*rows])
			var ln [2][]float64
			for k := range ln {
				dg := upload(t, d, device.F32, []int{n}, nil)
				db := upload(t, d, device.F32, []int{n}, nil)
				d.layerNormParams(rows, n, sfx32, dg.v, db.v, dy.v, x.v, mean.v, rstd.v)
				ln[k] = append(download(d, dg.v), download(d, db.v)...)
			}
			for i := range ln[0] {
				if math.Float32bits(float32(ln[0][i])) != math.Float32bits(float32(ln[1][i])) {
					t.Fatalf("layer norm sum %d = %v, then %v", i, ln[0][i], ln[1][i])
				}
			}
		})
	}
}

// colsOrder sums the columns of rows×n values in float32 in
// k_reduce_cols's order under plan p.
func colsOrder(x []float64, rows, n int, p colsPlan) []float32 {
	const nw = colsGroups
	out := make([]float32, n)
	for o := range n {
		at := func(j int64) float32 { return float32(x[j*int64(n)+int64(o)]) }
		var total float32
		for s := range p.slices {
			lo, hi := s*p.chunk, min((s+1)*p.chunk, int64(rows))
			var slice float32
			for w := range int64(nw) {
				var a [4]float32
				j := lo + w
				for ; j+3*nw < hi; j += 4 * nw {
					for k := range a {
						a[k] += at(j + int64(k)*nw)
					}
				}
				for ; j < hi; j += nw {
					a[0] += at(j)
				}
				g := (a[0] + a[1]) + (a[2] + a[3])
				if w == 0 {
					slice = g
				} else {
					slice += g
				}
			}
			if s == 0 {
				total = slice
			} else {
				total += slice
			}
		}
		out[o] = total
	}
	return out
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
