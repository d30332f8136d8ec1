package devicetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// RunSegments checks fused attention with example boundaries
// (device.Attention.Starts: rows that pack several examples end to end)
// on dev against ref, in every float dtype, with and without dropout:
// the outputs, log-sum-exps and gradients agree within Tolerance, each
// example's rows agree with that example run alone through ref's kernel
// without boundaries (so that ref's own boundaries are checked too),
// starts that keep every row one example give exactly what no starts
// give, and each call takes exactly a.Workspace bytes of temporaries on
// both devices. The rows span two blocks of device.AttentionBlock, so the
// calls without boundaries are checked there too. A device without fused attention (or hiding it) skips:
// the tensor package composes attention there, and its own tests check
// that composition's boundaries.
func RunSegments(t *testing.T, ref, dev device.Device) { runSegments(t, ref, dev, true) }

// RunSegmentsAccounting runs RunSegments' calls on ref and on dev, a
// device that computes nothing (the meta device), and checks only what
// their allocators saw: the workspace of every call, boundaries included,
// is a.Workspace bytes on both.
func RunSegmentsAccounting(t *testing.T, ref, dev device.Device) { runSegments(t, ref, dev, false) }

// segLayout is one packed batch: the lengths of the examples in each row
// (a row's first example may continue one cut at the end of the row
// before: its positions do not start at 0, and it still starts the row).
var segLayout = [][]int{
	{37, 91, 22, 50}, // the second ends at the first block's last row; the third starts the second block
	{60, 140},        // the second crosses the block boundary
}

// segStarts returns the start of each row's example, row by row, for
// rows of t tokens split as lengths says.
func segStarts(lengths [][]int, t int) []int32 {
	var st []int32
	for _, row := range lengths {
		i := 0
		for _, n := range row {
			for range n {
				st = append(st, int32(i))
			}
			i += n
		}
		if i != t {
			panic(fmt.Sprintf("devicetest: segment lengths %v do not add up to %d", row, t))
		}
	}
	return st
}

// segSide is one device of the check and the buffers it allocated.
type segSide struct {
	t    *testing.T
	d    device.Device
	bufs []device.Buffer
}

func (s *segSide) alloc(n int, dt device.DType) device.Buffer {
	s.t.Helper()
	b, err := s.d.Alloc(int64(max(n*dt.Size(), 1)), memory.Temporary)
	if err != nil {
		s.t.Fatalf("devicetest: %s: %v", s.d.Name(), err)
	}
	s.bufs = append(s.bufs, b)
	return b
}

// tensor returns a contiguous tensor of dtype dt and shape holding vals
// (zeros when nil), converted by the device's own Copy from F64.
func (s *segSide) tensor(dt device.DType, shape []int, vals []float64) device.View {
	s.t.Helper()
	n := count(shape)
	v := device.View{Buf: s.alloc(n, dt), DType: dt, Shape: shape, Strides: contiguous(shape)}
	if vals == nil {
		s.d.Fill(v, 0)
		return v
	}
	raw := make([]byte, 8*n)
	for i, x := range vals {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(x))
	}
	f := device.View{Buf: s.alloc(n, device.F64), DType: device.F64, Shape: shape, Strides: contiguous(shape)}
	s.d.Write(f.Buf, 0, raw)
	s.d.Copy(v, f)
	return v
}

// values reads a contiguous view back as float64s (through Copy to F64).
func (s *segSide) values(v device.View) []float64 {
	n := count(v.Shape)
	f := device.View{Buf: s.alloc(n, device.F64), DType: device.F64, Shape: v.Shape, Strides: contiguous(v.Shape)}
	s.d.Copy(f, v)
	raw := make([]byte, 8*n)
	s.d.Read(raw, f.Buf, 0)
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out
}

func (s *segSide) free() {
	for _, b := range s.bufs {
		s.d.Free(b)
	}
	s.bufs = nil
}

// attnRun is one call's operands on one device: q, k and v are heads of
// a fused projection [B, T, 3, H, D], viewed strided as the models pass
// them.
type attnRun struct {
	qkv, out, lse, dout, dq, dk, dv device.View
}

// head views q (i = 0), k or v of qkv [B, T, 3·H·D] as [b, h, t, d], from
// token t0 of batch row b0.
func head(qkv device.View, i, b0, t0, b, h, t, d, tt int) device.View {
	v := qkv
	v.Offset += b0*tt*3*h*d + t0*3*h*d + i*h*d
	v.Shape = []int{b, h, t, d}
	v.Strides = []int{tt * 3 * h * d, d, 3 * h * d, 1}
	return v
}

func runSegments(t *testing.T, ref, dev device.Device, values bool) {
	const b, h, tt, d = 2, 3, 200, 8
	starts := segStarts(segLayout, tt)
	for _, dt := range []device.DType{device.F32, device.F64, device.BF16, device.F16} {
		t.Run("AttentionSegments/"+dt.String(), func(t *testing.T) {
			kr, kd := device.AttentionOf(ref), device.AttentionOf(dev)
			if kr == nil || kd == nil {
				t.Skipf("fused attention: %s has it: %v, %s: %v (the tensor package composes it otherwise)", ref.Name(), kr != nil, dev.Name(), kd != nil)
			}
			acc := device.F32
			if dt == device.F64 {
				acc = device.F64
			}
			rng := rand.New(rand.NewPCG(11, uint64(dt)))
			random := func(n int) []float64 {
				v := make([]float64, n)
				for i := range v {
					v[i] = 2*rng.Float64() - 1
				}
				return v
			}
			qkvVals, doutVals := random(b*tt*3*h*d), random(b*h*tt*d)
			sides := []*segSide{{t: t, d: ref}, {t: t, d: dev}}
			defer func() {
				for _, s := range sides {
					s.free()
				}
			}()
			shape := []int{b, h, tt, d}
			setup := func(s *segSide) attnRun {
				return attnRun{
					qkv: s.tensor(dt, []int{b * tt * 3 * h * d}, qkvVals), out: s.tensor(dt, shape, nil),
					lse: s.tensor(acc, shape[:3], nil), dout: s.tensor(dt, shape, doutVals),
					dq: s.tensor(dt, shape, nil), dk: s.tensor(dt, shape, nil), dv: s.tensor(dt, shape, nil),
				}
			}
			// call runs forward and backward of r on s's device with a and
			// heads q, k, v (tiled where the device's kernels are, as the
			// tensor package calls them), checking that each takes
			// a.Workspace bytes of temporaries and gives them back.
			call := func(s *segSide, r attnRun, a device.Attention, q, k, v device.View) {
				t.Helper()
				a.Tiled = device.AttentionTiled(s.d, dt, d)
				kern := device.AttentionOf(s.d)
				mem := s.d.Memory()
				for _, backward := range []bool{false, true} {
					mem.ResetPeak()
					base := mem.Stats().Requested.Current
					if backward {
						kern.CausalAttentionBackward(r.dq, r.dk, r.dv, r.dout, r.out, r.lse, q, k, v, a)
					} else {
						kern.CausalAttention(r.out, r.lse, q, k, v, a)
					}
					st := mem.Stats()
					if got, want := st.Requested.Peak-base, a.Workspace(q.Shape, k.Shape[1], dt, backward); got != want {
						t.Errorf("%s: backward %v with %d starts took %d bytes of workspace, want a.Workspace's %d", s.d.Name(), backward, len(a.Starts), got, want)
					}
					if st.Requested.Current != base {
						t.Errorf("%s: backward %v kept %d bytes after the call", s.d.Name(), backward, st.Requested.Current-base)
					}
				}
			}
			// whole calls r on every row and token.
			whole := func(s *segSide, r attnRun, a device.Attention) {
				call(s, r, a, head(r.qkv, 0, 0, 0, b, h, tt, d, tt), head(r.qkv, 1, 0, 0, b, h, tt, d, tt), head(r.qkv, 2, 0, 0, b, h, tt, d, tt))
			}
			results := func(s *segSide, r attnRun) [][]float64 {
				return [][]float64{s.values(r.out), s.values(r.lse), s.values(r.dq), s.values(r.dk), s.values(r.dv)}
			}
			names := []string{"attention", "log-sum-exp", "dq", "dk", "dv"}
			tol := Tolerance(dt)
			tols := []float64{tol, Tolerance(acc), 2 * tol, 2 * tol, 2 * tol}
			for _, p := range []float64{0, 0.25} {
				a := device.Attention{Scale: 0.35, Dropout: p, Seed: 5, Starts: starts}
				if got, want := a.StartsBytes(shape), int64((4*b*tt+7)/8*8); got != want {
					t.Errorf("the starts take %d bytes of workspace, want one int32 per row (%d, 8-byte aligned)", got, want)
				}
				packed := make([]attnRun, 2)
				for i, s := range sides {
					packed[i] = setup(s)
					whole(s, packed[i], a)
				}
				if !values {
					continue
				}
				want, got := results(sides[0], packed[0]), results(sides[1], packed[1])
				for j := range names {
					closeTo(t, fmt.Sprintf("%s with boundaries, dropout %v, on %s", names[j], p, dev.Name()), got[j], want[j], tols[j])
				}
				if p != 0 {
					continue // an example alone draws other dropout masks
				}
				// Each example alone, on ref without boundaries: its
				// heads read in place from the packed qkv, dout's rows
				// copied into a [1, H, n, D] tensor of their own.
				r0 := sides[0]
				for bb, row := range segLayout {
					t0 := 0
					for _, n := range row {
						var sub []float64
						for hh := range h {
							o := ((bb*h+hh)*tt + t0) * d
							sub = append(sub, doutVals[o:o+n*d]...)
						}
						one := []int{1, h, n, d}
						alone := attnRun{qkv: packed[0].qkv, out: r0.tensor(dt, one, nil), lse: r0.tensor(acc, one[:3], nil), dout: r0.tensor(dt, one, sub),
							dq: r0.tensor(dt, one, nil), dk: r0.tensor(dt, one, nil), dv: r0.tensor(dt, one, nil)}
						call(r0, alone, device.Attention{Scale: a.Scale}, head(alone.qkv, 0, bb, t0, 1, h, n, d, tt), head(alone.qkv, 1, bb, t0, 1, h, n, d, tt), head(alone.qkv, 2, bb, t0, 1, h, n, d, tt))
						ex := results(r0, alone)
						for j := range names {
							width := d
							if j == 1 {
								width = 1 // the log-sum-exps: one per row
							}
							for i, side := range [][][]float64{want, got} {
								var g []float64
								for hh := range h {
									o := ((bb*h+hh)*tt + t0) * width
									g = append(g, side[j][o:o+n*width]...)
								}
								closeTo(t, fmt.Sprintf("%s of example [%d, %d) of row %d on %s (packed) against it alone on %s", names[j], t0, t0+n, bb, sides[i].d.Name(), ref.Name()), g, ex[j], tols[j])
							}
						}
						t0 += n
					}
				}
			}
			if !values {
				return
			}
			// Without starts over the same two blocks of rows, which
			// Run's case (one block) does not reach.
			for _, p := range []float64{0, 0.25} {
				var plain [2][][]float64
				for i, s := range sides {
					r := setup(s)
					whole(s, r, device.Attention{Scale: 0.35, Dropout: p, Seed: 5})
					plain[i] = results(s, r)
				}
				for j := range names {
					closeTo(t, fmt.Sprintf("%s without boundaries, dropout %v, on %s", names[j], p, dev.Name()), plain[1][j], plain[0][j], tols[j])
				}
			}
			// Starts that keep each row one example: exactly no starts.
			var runs [2][][]float64
			for i, st := range [][]int32{nil, make([]int32, b*tt)} {
				r := setup(sides[1])
				whole(sides[1], r, device.Attention{Scale: 0.35, Dropout: 0.25, Seed: 5, Starts: st})
				runs[i] = results(sides[1], r)
			}
			for j := range runs[0] {
				for i, w := range runs[0][j] {
					if g := runs[1][j][i]; g != w && !(math.IsNaN(g) && math.IsNaN(w)) {
						t.Errorf("%s[%d] = %v with one example per row, %v without starts, on %s", names[j], i, g, w, dev.Name())
						break
					}
				}
			}
		})
	}
}

// closeTo compares got with want as Run's cases do: within tol of the
// larger of each value and want's RMS.
func closeTo(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var rms float64
	for _, w := range want {
		rms += w * w
	}
	rms = math.Sqrt(rms / float64(max(len(want), 1)))
	bad := 0
	for i, w := range want {
		if g := got[i]; math.Abs(g-w) > tol*math.Max(math.Abs(w), rms)+1e-30 || math.IsNaN(g) {
			bad++
			if bad <= 5 {
				t.Errorf("%s[%d] = %v, want %v (tolerance %g)", name, i, g, w, tol)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d elements differ", name, bad, len(want))
	}
}
