//go:build cuda || cudaemu

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/memory"
)

// TestAttentionTiles runs fused attention on the GPU and on the CPU device
// for shapes the conformance suite does not reach: heads of 64 (the
// largest of the first tiles), 96 (the second tiles), 160 (the slot
// kernels), sequences that end inside a tile, with and without dropout and
// example boundaries.
func TestAttentionTiles(t *testing.T) {
	d := newTestDevice(t)
	ref := cpu.New()
	cases := []struct{ b, h, t, d int }{{1, 2, 77, 64}, {2, 1, 45, 96}, {1, 1, 37, 160}, {1, 3, 130, 16}}
	if !Emulated {
		cases = append(cases, struct{ b, h, t, d int }{4, 6, 1024, 64}, struct{ b, h, t, d int }{2, 4, 512, 128})
	}
	for _, c := range cases {
		for _, dt := range []device.DType{device.F32, device.BF16} {
			for _, p := range []float64{0, 0.2} {
				for _, packed := range []bool{false, true} {
					name := fmt.Sprintf("%dx%dx%dx%d/%v/dropout%v/packed%v", c.b, c.h, c.t, c.d, dt, p, packed)
					t.Run(name, func(t *testing.T) {
						a := device.Attention{Scale: 1 / math.Sqrt(float64(c.d)), Dropout: p, Seed: 9}
						if packed {
							// Examples of 1, 20 and the rest of each row.
							a.Starts = make([]int32, c.b*c.t)
							for bb := range c.b {
								for i := range c.t {
									s := 0
									switch {
									case i >= 21:
										s = 21
									case i >= 1:
										s = 1
									}
									a.Starts[bb*c.t+i] = int32(s)
								}
							}
						}
						want := runAttention(t, ref, dt, c.b, c.h, c.t, c.d, a)
						a.Tiled = device.AttentionTiled(d, dt, c.d) // false for heads of 160: the slot kernels
						got := runAttention(t, d, dt, c.b, c.h, c.t, c.d, a)
						tol := devicetest.Tolerance(dt)
						for i, n := range []string{"out", "lse", "dq", "dk", "dv"} {
							tl := tol
							switch {
							case n == "lse":
								tl = devicetest.Tolerance(device.F32)
							case i > 1:
								tl = 2 * tol
							}
							compareRMS(t, n, got[i], want[i], tl)
						}
					})
				}
			}
		}
	}
}

// runAttention runs forward and backward on dev from seeded inputs and
// returns out, lse, dq, dk and dv.
func runAttention(t *testing.T, dev device.Device, dt device.DType, b, h, tt, dd int, a device.Attention) [][]float64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(b*1000+tt), uint64(dd)))
	shape := []int{b, h, tt, dd}
	var bufs []device.Buffer
	defer func() {
		for _, x := range bufs {
			dev.Free(x)
		}
	}()
	mk := func(dt device.DType, shape []int, random bool) device.View {
		k := 1
		for _, s := range shape {
			k *= s
		}
		buf, err := dev.Alloc(int64(k*dt.Size()), memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, buf)
		raw := make([]byte, k*dt.Size())
		if random {
			for i := range k {
				x := float32(2*rng.Float64() - 1)
				if dt == device.BF16 {
					bits := math.Float32bits(x)
					bits += 0x7fff + (bits>>16)&1
					binary.LittleEndian.PutUint16(raw[2*i:], uint16(bits>>16))
				} else {
					binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
				}
			}
		}
		dev.Write(buf, 0, raw)
		st := make([]int, len(shape))
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			st[i] = s
			s *= shape[i]
		}
		return device.View{Buf: buf, DType: dt, Shape: shape, Strides: st}
	}
	q, k, v, dout := mk(dt, shape, true), mk(dt, shape, true), mk(dt, shape, true), mk(dt, shape, true)
	out, dq, dk, dv := mk(dt, shape, false), mk(dt, shape, false), mk(dt, shape, false), mk(dt, shape, false)
	lse := mk(device.F32, shape[:3], false)
	ker := device.AttentionOf(dev)
	ker.CausalAttention(out, lse, q, k, v, a)
	ker.CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v, a)
	var res [][]float64
	for _, x := range []device.View{out, lse, dq, dk, dv} {
		m := x.Len()
		raw := make([]byte, m*x.DType.Size())
		dev.Read(raw, x.Buf, 0)
		vals := make([]float64, m)
		for i := range vals {
			if x.DType == device.BF16 {
				vals[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16))
			} else {
				vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
			}
		}
		res = append(res, vals)
	}
	return res
}

// compareRMS fails where got differs from want by more than tol times the
// larger of the element and want's RMS (the conformance suite's rule).
func compareRMS(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	var rms float64
	for _, w := range want {
		rms += w * w
	}
	rms = math.Sqrt(rms / float64(max(len(want), 1)))
	bad := 0
	for i, w := range want {
		if g := got[i]; math.Abs(g-w) > tol*math.Max(math.Abs(w), rms)+1e-30 || math.IsNaN(g) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, want %v (tolerance %g of %g)", name, i, g, w, tol, math.Max(math.Abs(w), rms))
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d elements differ", name, bad, len(want))
	}
}
