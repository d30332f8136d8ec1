package tensor_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Heads of a fused projection [B, T, 3·H·D] viewed as q, k, v [B, H, T, D],
// as nn's attention does: strided views the kernels read in place.
func heads(s *tensor.Scope, qkv *tensor.Tensor, h, d int) (q, k, v *tensor.Tensor) {
	b, t := qkv.Shape()[0], qkv.Shape()[1]
	r5 := s.Reshape(qkv, b, t, 3, h, d)
	var out [3]*tensor.Tensor
	for i := range out {
		out[i] = s.Permute(s.Reshape(s.Narrow(r5, 2, i, 1), b, t, h, d), 0, 2, 1, 3)
	}
	return out[0], out[1], out[2]
}

func init() {
	// Float64 gradient checks of the fused kernels (the CPU device has
	// them): rows in two blocks of device.AttentionBlock, the second
	// partial, with and without dropout.
	for _, p := range []float64{0, 0.3} {
		gradCases = append(gradCases, gradCase{
			name:   fmt.Sprintf("causal_attention/dropout-%v", p),
			inputs: []input{in("", 1, device.AttentionBlock+6, 3*2*4)},
			fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				q, k, v := heads(s, x[0], 2, 4)
				return s.CausalAttention(q, k, v, 0.5, p, 99)
			},
		})
	}
	for _, p := range []float64{0, 0.3} {
		gradCases = append(gradCases, gradCase{
			name:   fmt.Sprintf("causal_self_attention/dropout-%v", p),
			inputs: []input{in("", 1, device.AttentionBlock+6, 3*2*4)},
			fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				return s.CausalSelfAttention(x[0], 2, 0.5, p, 99)
			},
		})
	}
	// Fewer positions than the head width (a block's rows are shorter
	// than a row of the output).
	gradCases = append(gradCases, gradCase{
		name:   "causal_attention/short",
		inputs: []input{in("", 2, 3, 3*2*16)},
		fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
			q, k, v := heads(s, x[0], 2, 16)
			return s.CausalAttention(q, k, v, 0.25, 0, 0)
		},
	})
}

// The fused kernels compute what the composition computes (the same
// dropout masks included), forward and backward, and never hold the
// [B, H, T, T] probabilities.
func TestCausalAttentionMatchesComposed(t *testing.T) {
	const b, h, tt, d = 2, 3, 400, 16
	for _, tc := range []struct {
		dt      tensor.DType
		dropout float64
		tol     float64
	}{
		{tensor.F64, 0, 1e-12}, {tensor.F64, 0.2, 1e-12},
		{tensor.F32, 0, 1e-5}, {tensor.F32, 0.2, 1e-5},
		// bf16: the composition rounds its probabilities and their
		// gradient to bf16, the kernels keep them in f32; each is held
		// to the float64 result instead (tol: the composition's error).
		{tensor.BF16, 0, -1}, {tensor.BF16, 0.2, -1},
	} {
		t.Run(fmt.Sprintf("%v/dropout-%v", tc.dt, tc.dropout), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			x := make([]float64, b*tt*3*h*d)
			for i := range x {
				x[i] = rng.Float64()*2 - 1
			}
			w := make([]float64, b*h*tt*d)
			for i := range w {
				w[i] = rng.Float64()*2 - 1
			}
			run := func(dev device.Device, dt tensor.DType) (out, grad []float64, peak int64) {
				qkv, err := tensor.FromFloat64(dev, x, []int{b, tt, 3 * h * d}, memory.Activation)
				if err != nil {
					t.Fatal(err)
				}
				if dt != tensor.F64 {
					s := tensor.NewScope(tensor.NoGrad())
					c := s.Keep(s.Cast(qkv, dt))
					s.Close()
					qkv.Release()
					qkv = c
				}
				defer qkv.Release()
				qkv.SetRequiresGrad(true)
				wt, _ := tensor.FromFloat64(dev, w, []int{b, h, tt, d}, memory.Activation)
				defer wt.Release()
				dev.Memory().ResetPeak()
				base := dev.Memory().Stats().Requested.Current
				s := tensor.NewScope()
				q, k, v := heads(s, qkv, h, d)
				y := s.CausalAttention(q, k, v, 1/math.Sqrt(d), tc.dropout, 7)
				out = y.Float64s()
				s.Sum(s.Mul(s.Cast(y, tensor.F64), wt), false).Backward()
				peak = dev.Memory().Stats().Requested.Peak - base
				s.Close()
				grad = qkv.Grad().Float64s()
				return
			}
			fOut, fGrad, fPeak := run(cpu.New(), tc.dt)
			cOut, cGrad, cPeak := run(device.Without(cpu.New(), device.CapAttention), tc.dt)
			if tc.tol < 0 {
				rOut, rGrad, _ := run(cpu.New(), tensor.F64)
				for _, c := range []struct {
					name                  string
					fused, composed, want []float64
				}{{"output", fOut, cOut, rOut}, {"gradient", fGrad, cGrad, rGrad}} {
					ef, ec := maxRelError(c.fused, c.want), maxRelError(c.composed, c.want)
					if ef > ec*1.1+1e-3 {
						t.Errorf("%s: fused error %.3g against float64, composed %.3g", c.name, ef, ec)
					}
					t.Logf("%s: largest error against float64 (relative to the rms): fused %.3g, composed %.3g", c.name, ef, ec)
				}
			} else {
				for _, c := range []struct {
					name      string
					got, want []float64
				}{{"output", fOut, cOut}, {"gradient", fGrad, cGrad}} {
					if e := maxRelError(c.got, c.want); e > tc.tol {
						t.Errorf("%s: fused differs from composed by %.3g (relative to the rms), more than %g", c.name, e, tc.tol)
					}
				}
			}
			// Besides the kernels' fixed workspace (O(T·(D+Br)) per slot),
			// nothing of the probabilities' size exists.
			probs := int64(b * h * tt * tt * tc.dt.Size())
			ws := device.AttentionWorkspace([]int{b, h, tt, d}, h, tc.dt, true)
			if fPeak-ws >= probs || fPeak >= cPeak {
				t.Errorf("fused peak %d bytes (workspace %d), composed %d, probabilities %d", fPeak, ws, cPeak, probs)
			}
			if cPeak < probs {
				t.Errorf("composed peak %d bytes is below the probabilities' %d: the comparison proves nothing", cPeak, probs)
			}
			t.Logf("peak above the inputs: fused %d bytes, composed %d", fPeak, cPeak)
		})
	}
}

// maxRelError is the largest |got-want| relative to max(|want|, rms(want)).
func maxRelError(got, want []float64) float64 {
	var rms float64
	for _, v := range want {
		rms += v * v
	}
	rms = math.Sqrt(rms / float64(len(want)))
	var worst float64
	for i := range want {
		worst = max(worst, math.Abs(got[i]-want[i])/math.Max(math.Abs(want[i]), rms))
	}
	return worst
}

// Fused attention is deterministic run to run, bit for bit, over blocks
// of rows that split their products at the diagonal.
func TestCausalAttentionDeterministic(t *testing.T) {
	dev := cpu.New()
	qkv, err := tensor.Rand(dev, tensor.F32, []int{2, 2*device.AttentionBlock + 44, 3 * 4 * 8}, device.Uniform, -1, 1, 5, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer qkv.Release()
	qkv.SetRequiresGrad(true)
	var first []float32
	for range 3 {
		s := tensor.NewScope()
		q, k, v := heads(s, qkv, 4, 8)
		y := s.CausalAttention(q, k, v, 0.3, 0.1, 11)
		s.Sum(y, false).Backward()
		got := append(y.Float32s(), qkv.Grad().Float32s()...)
		s.Close()
		qkv.SetGrad(nil)
		if first == nil {
			first = got
			continue
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
				t.Fatalf("element %d: %v, then %v", i, first[i], got[i])
			}
		}
	}
}

// CausalSelfAttention is CausalAttention of the views heads makes, bit for
// bit, forward and backward (its backward writes the projection's gradient
// whole instead of assembling it from the three views'), with the fused
// kernels and without them, in every dtype and under autocast, at a peak
// no higher.
func TestCausalSelfAttentionMatchesViews(t *testing.T) {
	const b, h, tt, d = 2, 3, device.AttentionBlock + 50, 8
	for _, tc := range []struct {
		name     string
		dt       tensor.DType
		autocast tensor.DType
		dropout  float64
	}{
		{"f64", tensor.F64, 0, 0}, {"f32", tensor.F32, 0, 0}, {"f32/dropout", tensor.F32, 0, 0.2},
		{"bf16", tensor.BF16, 0, 0}, {"f32/autocast-bf16", tensor.F32, tensor.BF16, 0.1},
	} {
		for _, hide := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/composed=%v", tc.name, hide), func(t *testing.T) {
				run := func(self bool) (out, grad []float64, peak int64) {
					var dev device.Device = cpu.New()
					if hide {
						dev = device.Without(dev, device.CapAttention)
					}
					qkv, err := tensor.Rand(dev, tc.dt, []int{b, tt, 3 * h * d}, device.Uniform, -1, 1, 5, memory.Activation)
					if err != nil {
						t.Fatal(err)
					}
					defer qkv.Release()
					qkv.SetRequiresGrad(true)
					var opts []tensor.ScopeOption
					if tc.autocast != 0 {
						opts = append(opts, tensor.Autocast(tc.autocast))
					}
					dev.Memory().ResetPeak()
					base := dev.Memory().Stats().Requested.Current
					s := tensor.NewScope(opts...)
					var y *tensor.Tensor
					if self {
						y = s.CausalSelfAttention(qkv, h, 0.3, tc.dropout, 17)
					} else {
						q, k, v := heads(s, qkv, h, d)
						y = s.CausalAttention(q, k, v, 0.3, tc.dropout, 17)
					}
					out = y.Float64s()
					s.Sum(s.Mul(y, y), false).Backward()
					peak = dev.Memory().Stats().Requested.Peak - base
					s.Close()
					grad = qkv.Grad().Float64s()
					return
				}
				sOut, sGrad, sPeak := run(true)
				vOut, vGrad, vPeak := run(false)
				for _, c := range []struct {
					name      string
					got, want []float64
				}{{"output", sOut, vOut}, {"gradient", sGrad, vGrad}} {
					for i := range c.want {
						if math.Float64bits(c.got[i]) != math.Float64bits(c.want[i]) {
							t.Fatalf("%s element %d: %v, through the views %v", c.name, i, c.got[i], c.want[i])
						}
					}
				}
				if sPeak > vPeak {
					t.Errorf("peak %d bytes, through the views %d", sPeak, vPeak)
				}
			})
		}
	}
}

func TestCausalSelfAttentionBadShapes(t *testing.T) {
	dev := cpu.New()
	for _, tc := range []struct {
		shape []int
		heads int
	}{{[]int{2, 5, 12}, 5}, {[]int{2, 5, 12}, 0}, {[]int{10, 12}, 2}, {[]int{2, 5, 13}, 1}} {
		x, err := tensor.Rand(dev, tensor.F32, tc.shape, device.Uniform, 0, 1, 1, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		s := tensor.NewScope()
		err = tensor.Catch(func() error { s.CausalSelfAttention(x, tc.heads, 1, 0, 0); return nil })
		var te *tensor.Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "causal_self_attention") {
			t.Errorf("qkv %v with %d heads: %v, want a causal_self_attention error", tc.shape, tc.heads, err)
		}
		s.Close()
		x.Release()
	}
}

// A qkv that is not contiguous (here a transposed view) takes the views'
// path, with the same values and gradients.
func TestCausalSelfAttentionStridedInput(t *testing.T) {
	const b, tt, h, d = 2, 7, 2, 4
	dev := cpu.New()
	x, err := tensor.Rand(dev, tensor.F32, []int{tt, b, 3 * h * d}, device.Uniform, -1, 1, 3, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	x.SetRequiresGrad(true)
	run := func(self bool) (out, grad []float64) {
		s := tensor.NewScope()
		qkv := s.Permute(x, 1, 0, 2) // [B, T, 3·H·D], batch-major view of time-major storage
		var y *tensor.Tensor
		if self {
			y = s.CausalSelfAttention(qkv, h, 0.5, 0, 0)
		} else {
			q, k, v := heads(s, qkv, h, d)
			y = s.CausalAttention(q, k, v, 0.5, 0, 0)
		}
		out = y.Float64s()
		s.Sum(s.Mul(y, y), false).Backward()
		s.Close()
		grad = x.Grad().Float64s()
		x.SetGrad(nil)
		return
	}
	sOut, sGrad := run(true)
	vOut, vGrad := run(false)
	for i := range vOut {
		if sOut[i] != vOut[i] {
			t.Fatalf("output %d: %v, through the views %v", i, sOut[i], vOut[i])
		}
	}
	for i := range vGrad {
		if sGrad[i] != vGrad[i] {
			t.Fatalf("gradient %d: %v, through the views %v", i, sGrad[i], vGrad[i])
		}
	}
}
