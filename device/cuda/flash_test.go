//go:build cuda || cudaemu

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/memory"
)

// attentionCase is a shape of the tests below: B, H, T and D, and kv
// heads of keys and values (0: H).
type attentionCase struct{ b, h, t, d, kv int }

func (c attentionCase) String() string {
	s := fmt.Sprintf("%dx%dx%dx%d", c.b, c.h, c.t, c.d)
	if c.kv != 0 {
		s += fmt.Sprintf("/kv%d", c.kv)
	}
	return s
}

// TestAttentionTiles runs fused attention on the GPU and on the CPU device
// for shapes the conformance suite does not reach: heads of 64 (the
// largest of the first tiles), 96 (the second tiles), 160 (the slot
// kernels), sequences that end inside a tile, grouped heads (keys and
// values of fewer heads), with and without dropout and example
// boundaries.
func TestAttentionTiles(t *testing.T) {
	d := newTestDevice(t)
	ref := cpu.New()
	cases := []attentionCase{{1, 2, 77, 64, 0}, {2, 1, 45, 96, 0}, {1, 1, 37, 160, 0}, {1, 3, 130, 16, 0}, {1, 4, 77, 64, 1}, {2, 4, 45, 96, 2}, {1, 2, 37, 160, 1}}
	if !Emulated {
		cases = append(cases, attentionCase{4, 6, 1024, 64, 0}, attentionCase{2, 4, 512, 128, 0}, attentionCase{2, 32, 1024, 128, 8})
	}
	for _, c := range cases {
		for _, dt := range []device.DType{device.F32, device.BF16} {
			for _, p := range []float64{0, 0.2} {
				for _, packed := range []bool{false, true} {
					name := fmt.Sprintf("%v/%v/dropout%v/packed%v", c, dt, p, packed)
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
						want := runGroupedAttention(t, ref, dt, c, a)
						a.Tiled = device.AttentionTiled(d, dt, c.d) // false for heads of 160: the slot kernels
						got := runGroupedAttention(t, d, dt, c, a)
						for i, n := range []string{"out", "lse", "dq", "dk", "dv"} {
							compareRMS(t, n, got[i], want[i], attentionTolerance(dt, n))
						}
					})
				}
			}
		}
	}
}

// TestAttentionTensorCores: where the GPU has bf16 and f16 tensor cores
// (the emulator reports compute capability 8.0), f16 and bf16 heads run
// the tensor-core kernels (k_flash_*_tc_*) and f32 heads the CUDA-core
// ones; the tensor-core kernels agree with the CPU and with the CUDA-core
// kernels (the same kind of device told it has compute capability 7.5)
// within the conformance suite's tolerances, for heads that are and are
// not a multiple of 16, sequences that end inside a tile, grouped heads,
// dropout and example boundaries.
func TestAttentionTensorCores(t *testing.T) {
	d := newTestDevice(t)
	if !d.tensorCores() {
		t.Skipf("%s has no bf16 tensor cores (compute capability 8.0)", d.GPU())
	}
	core := newTestDevice(t)
	core.major, core.minor = 7, 5 // before its first kernel: the CUDA-core kernels
	ref := cpu.New()
	cases := []attentionCase{{1, 2, 77, 64, 0}, {2, 1, 45, 96, 0}, {1, 3, 130, 16, 0}, {1, 1, 20, 8, 0}, {1, 1, 70, 128, 0}, {1, 4, 77, 64, 2}, {1, 3, 130, 16, 1}}
	if !Emulated {
		cases = append(cases, attentionCase{4, 6, 1024, 64, 0}, attentionCase{2, 4, 512, 128, 0}, attentionCase{2, 32, 1024, 128, 8})
	}
	for _, c := range cases {
		for _, dt := range []device.DType{device.F16, device.BF16, device.F32} {
			for _, p := range []float64{0, 0.2} {
				for _, packed := range []bool{false, true} {
					name := fmt.Sprintf("%v/%v/dropout%v/packed%v", c, dt, p, packed)
					t.Run(name, func(t *testing.T) {
						a := device.Attention{Scale: 1 / math.Sqrt(float64(c.d)), Dropout: p, Seed: 5, Tiled: true}
						if packed {
							// Examples of 3, 30 and the rest of each row.
							a.Starts = make([]int32, c.b*c.t)
							for i := range a.Starts {
								switch r := i % c.t; {
								case r >= 33:
									a.Starts[i] = 33
								case r >= 3:
									a.Starts[i] = 3
								}
							}
						}
						if d.CountsLaunches() {
							d.ResetLaunchCounts()
						}
						got := runGroupedAttention(t, d, dt, c, a)
						if d.CountsLaunches() {
							f, _ := flashFor(dt, c.d, true)
							want := map[string]bool{"k_flash_fwd" + f.suffix: true, "k_flash_bwd_kv" + f.suffix: true, "k_flash_bwd_q" + f.suffix: true}
							if f.tensorCores != (dt != device.F32) {
								t.Fatalf("%v heads: tensor cores %v", dt, f.tensorCores)
							}
							for _, k := range d.LaunchCounts().Kernels {
								if strings.HasPrefix(k.Name, "k_flash") || strings.HasPrefix(k.Name, "k_attention") {
									if !want[k.Name] || k.Launches != 1 {
										t.Errorf("%s launched %d times; want one launch each of %v", k.Name, k.Launches, want)
									}
									delete(want, k.Name)
								}
							}
							if len(want) > 0 {
								t.Errorf("%v not launched", want)
							}
						}
						cores := runGroupedAttention(t, core, dt, c, a)
						a.Tiled = false // the CPU's slot kernels
						want := runGroupedAttention(t, ref, dt, c, a)
						for i, n := range []string{"out", "lse", "dq", "dk", "dv"} {
							tl := attentionTolerance(dt, n)
							compareRMS(t, n, got[i], want[i], tl)
							compareRMS(t, n+" (against the CUDA-core kernels)", got[i], cores[i], tl)
							compareRMS(t, n+" (of the CUDA-core kernels)", cores[i], want[i], tl)
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
	return runGroupedAttention(t, dev, dt, attentionCase{b, h, tt, dd, 0}, a)
}

// runGroupedAttention is runAttention of c's shape: k, v, dk and dv of
// c.kv heads (0: c.h).
func runGroupedAttention(t *testing.T, dev device.Device, dt device.DType, c attentionCase, a device.Attention) [][]float64 {
	t.Helper()
	b, h, tt, dd := c.b, c.h, c.t, c.d
	kv := c.kv
	if kv == 0 {
		kv = h
	}
	rng := rand.New(rand.NewPCG(uint64(b*1000+tt), uint64(dd)))
	shape, kvShape := []int{b, h, tt, dd}, []int{b, kv, tt, dd}
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
				switch dt {
				case device.BF16:
					binary.LittleEndian.PutUint16(raw[2*i:], cpu.BF16FromF32(x))
				case device.F16:
					binary.LittleEndian.PutUint16(raw[2*i:], cpu.F16FromF32(x))
				default:
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
	q, k, v, dout := mk(dt, shape, true), mk(dt, kvShape, true), mk(dt, kvShape, true), mk(dt, shape, true)
	out, dq, dk, dv := mk(dt, shape, false), mk(dt, shape, false), mk(dt, kvShape, false), mk(dt, kvShape, false)
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
			switch x.DType {
			case device.BF16:
				vals[i] = float64(cpu.F32FromBF16(binary.LittleEndian.Uint16(raw[2*i:])))
			case device.F16:
				vals[i] = float64(cpu.F32FromF16(binary.LittleEndian.Uint16(raw[2*i:])))
			default:
				vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
			}
		}
		res = append(res, vals)
	}
	return res
}

// attentionTolerance is the relative tolerance of attention's result
// named n for dt heads: the conformance suite's for out, f32's for the
// log-sum-exp (kept in f32), and for the gradients, sums over every key
// (or query) of products of 16-bit-rounded probabilities and score
// gradients, twice it, four times for f16. Kernels that tile the keys
// differently round those sums in another order: on an H200, the tiled
// kernels (tensor cores and CUDA cores alike) and the CPU's slot kernels
// differed by up to 3.5e-3 of the gradients' RMS for f16 heads of 1,024
// tokens (a few of 1.5 million elements; f16's unit roundoff is 4.9e-4),
// while bf16's tolerance, ten times f16's, holds at twice.
func attentionTolerance(dt device.DType, n string) float64 {
	tol := devicetest.Tolerance(dt)
	switch {
	case n == "lse":
		return devicetest.Tolerance(device.F32)
	case n == "out":
		return tol
	case dt == device.F16:
		return 4 * tol
	}
	return 2 * tol
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
