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
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Sliding windows and soft-capped scores (tensor.AttentionOptions).

func init() {
	seg, err := tensor.NewSegments(packedPositions(gradSegments), 2, device.AttentionBlock+6)
	if err != nil {
		panic(err)
	}
	// Float64 gradient checks of the fused kernels (the CPU device has
	// them): rows in two blocks of device.AttentionBlock, windows that
	// reach back across the blocks' boundary, with and without example
	// boundaries (gradSegments) and dropout. The composed path's:
	// TestAttentionOptionsComposedGradients.
	for _, c := range []struct {
		name string
		seg  *tensor.Segments
		o    tensor.AttentionOptions
		self bool // SelfAttention of the fused projection
	}{
		{"window", nil, tensor.AttentionOptions{Scale: 0.5, Window: 20}, false},
		{"window/segments/dropout", seg, tensor.AttentionOptions{Scale: 0.5, Window: 30, Dropout: 0.3, Seed: 99}, false},
		{"softcap", nil, tensor.AttentionOptions{Scale: 1.5, Softcap: 1.2}, false},
		{"softcap/window/segments/dropout", seg, tensor.AttentionOptions{Scale: 1.5, Softcap: 1.2, Window: 45, Dropout: 0.3, Seed: 99}, false},
		{"softcap/window/segments/dropout", seg, tensor.AttentionOptions{Scale: 1.5, Softcap: 1.2, Window: 45, Dropout: 0.3, Seed: 99}, true},
	} {
		rows := 1 // one row without example boundaries: each check differentiates every element
		if c.seg != nil {
			rows = 2
		}
		gc := gradCase{name: "attention/" + c.name, inputs: []input{in("", rows, device.AttentionBlock+6, 3*1*4)}}
		if c.self {
			gc.name = "self_" + gc.name
			gc.fn = func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.SelfAttention(x[0], 1, c.seg, c.o) }
		} else {
			gc.fn = func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				q, k, v := heads(s, x[0], 1, 4)
				return s.Attention(q, k, v, c.seg, c.o)
			}
		}
		gradCases = append(gradCases, gc)
	}
}

// attentionOptionCases are the option sets the tests below run over
// rows of 134 tokens (gradSegments' packing where seg is set).
var attentionOptionCases = []struct {
	name string
	seg  bool
	o    tensor.AttentionOptions
}{
	{"window", false, tensor.AttentionOptions{Scale: 0.4, Window: 17}},
	{"window/segments/dropout", true, tensor.AttentionOptions{Scale: 0.4, Window: 50, Dropout: 0.2, Seed: 3}},
	{"window-1", false, tensor.AttentionOptions{Scale: 0.4, Window: 1}},
	{"softcap", false, tensor.AttentionOptions{Scale: 1.5, Softcap: 1}},
	{"softcap/dropout", false, tensor.AttentionOptions{Scale: 1.5, Softcap: 2, Dropout: 0.2, Seed: 3}},
	{"softcap/window/segments/dropout", true, tensor.AttentionOptions{Scale: 1.5, Softcap: 1, Window: 40, Dropout: 0.2, Seed: 3}},
}

// The fused kernels compute what the composition computes under every
// option (the same dropout masks included), forward and backward,
// through Attention and SelfAttention, in float64 and float32.
func TestAttentionOptionsFusedMatchesComposed(t *testing.T) {
	const h, d, tt = 2, 8, device.AttentionBlock + 6
	seg := mustSegments(t, gradSegments, tt)
	for _, c := range attentionOptionCases {
		for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				var sg *tensor.Segments
				if c.seg {
					sg = seg
				}
				run := func(dev device.Device, self bool) []float64 {
					qkv, err := tensor.Rand(dev, dt, []int{2, tt, 3 * h * d}, device.Uniform, -1, 1, 9, memory.Activation)
					if err != nil {
						t.Fatal(err)
					}
					defer qkv.Release()
					qkv.SetRequiresGrad(true)
					s := tensor.NewScope()
					defer s.Close()
					var y *tensor.Tensor
					if self {
						y = s.SelfAttention(qkv, h, sg, c.o)
					} else {
						q, k, v := heads(s, qkv, h, d)
						y = s.Attention(q, k, v, sg, c.o)
					}
					s.Sum(s.Mul(y, y), false).Backward()
					return append(y.Float64s(), qkv.Grad().Float64s()...)
				}
				tol := 1e-12
				if dt == tensor.F32 {
					tol = 1e-5
				}
				for _, self := range []bool{false, true} {
					fused := run(cpu.New(), self)
					if e := maxRelError(run(device.Without(cpu.New(), device.CapAttention), self), fused); e > tol {
						t.Errorf("self %v: composed and fused differ by %.3g relative, more than %g", self, e, tol)
					}
				}
			})
		}
	}
}

// attentionByHand is attention of one [T, D] head of q, k and v by its
// definition, in float64 with no dropout: query i sees the keys j <= i
// with j >= start (its example's) and i - j < window (window 0: any),
// each score scale·q·k capped to c·tanh(s/c) under a soft cap c.
func attentionByHand(q, k, v []float64, t, d int, starts []int32, o tensor.AttentionOptions) []float64 {
	out := make([]float64, t*d)
	for i := range t {
		var keys []int
		for j := 0; j <= i; j++ {
			if (starts == nil || j >= int(starts[i])) && (o.Window == 0 || i-j < o.Window) {
				keys = append(keys, j)
			}
		}
		scores := make([]float64, len(keys))
		mx := math.Inf(-1)
		for n, j := range keys {
			var s float64
			for e := range d {
				s += q[i*d+e] * k[j*d+e]
			}
			s *= o.Scale
			if o.Softcap != 0 {
				s = o.Softcap * math.Tanh(s/o.Softcap)
			}
			scores[n] = s
			mx = max(mx, s)
		}
		var sum float64
		for n := range scores {
			scores[n] = math.Exp(scores[n] - mx)
			sum += scores[n]
		}
		for n, j := range keys {
			for e := range d {
				out[i*d+e] += scores[n] / sum * v[j*d+e]
			}
		}
	}
	return out
}

// Attention under a window and a soft cap is their definition (Hugging
// Face's: a key is seen when q_idx - sliding_window < kv_idx <= q_idx, and
// the scores are softcap·tanh(scores/softcap) before the mask), computed
// here element by element, with the fused kernels and with the composed
// path: windows of 1, of keys within a block, across blocks, of T-1, T
// and more, with and without example boundaries.
func TestAttentionWindowByDefinition(t *testing.T) {
	const h, d, tt = 1, 4, device.AttentionBlock + 6
	seg := mustSegments(t, gradSegments, tt)
	rng := rand.New(rand.NewPCG(8, 8))
	x := make([]float64, 2*tt*3*h*d)
	for i := range x {
		x[i] = 2*rng.Float64() - 1
	}
	for _, composed := range []bool{false, true} {
		for _, w := range []int{1, 2, 9, 64, tt - 1, tt, tt + 7} {
			for _, softcap := range []float64{0, 0.7} {
				for _, sg := range []*tensor.Segments{nil, seg} {
					t.Run(fmt.Sprintf("composed=%v/window-%d/softcap-%v/segments=%v", composed, w, softcap, sg != nil), func(t *testing.T) {
						var dev device.Device = cpu.New()
						if composed {
							dev = device.Without(dev, device.CapAttention)
						}
						qkv, err := tensor.FromFloat64(dev, x, []int{2, tt, 3 * h * d}, memory.Activation)
						if err != nil {
							t.Fatal(err)
						}
						defer qkv.Release()
						o := tensor.AttentionOptions{Scale: 2.5, Window: w, Softcap: softcap}
						s := tensor.NewScope(tensor.NoGrad())
						defer s.Close()
						got := s.SelfAttention(qkv, h, sg, o).Float64s()
						for b := range 2 {
							var q, k, v []float64
							for i := range tt {
								o := (b*tt + i) * 3 * d
								q, k, v = append(q, x[o:o+d]...), append(k, x[o+d:o+2*d]...), append(v, x[o+2*d:o+3*d]...)
							}
							var starts []int32
							if sg != nil {
								starts = sg.Starts()[b*tt : (b+1)*tt]
							}
							want := attentionByHand(q, k, v, tt, d, starts, o)
							if e := maxRelError(got[b*tt*d:(b+1)*tt*d], want); e > 1e-13 {
								t.Errorf("row %d: off by %.3g relative", b, e)
							}
						}
					})
				}
			}
		}
	}
}

// A window of T keys or more is no window, bit for bit and at the same
// peak (no starts array); a window of 1 key gives each query its own
// value.
func TestAttentionWindowLimits(t *testing.T) {
	const h, d, tt = 2, 8, device.AttentionBlock + 6
	for _, composed := range []bool{false, true} {
		var dev device.Device = cpu.New()
		if composed {
			dev = device.Without(dev, device.CapAttention)
		}
		qkv, err := tensor.Rand(dev, tensor.F32, []int{2, tt, 3 * h * d}, device.Uniform, -1, 1, 4, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		qkv.SetRequiresGrad(true)
		run := func(o tensor.AttentionOptions) (vals []float64, peak int64) {
			mem := dev.Memory()
			mem.ResetPeak()
			base := mem.Stats().Requested.Current
			s := tensor.NewScope()
			q, k, v := heads(s, qkv, h, d)
			y := s.Attention(q, k, v, nil, o)
			s.Sum(s.Mul(y, y), false).Backward()
			vals = append(y.Float64s(), qkv.Grad().Float64s()...)
			peak = mem.Stats().Requested.Peak - base
			s.Close()
			qkv.SetGrad(nil)
			return vals, peak
		}
		none, nonePeak := run(tensor.AttentionOptions{Scale: 0.3, Dropout: 0.1, Seed: 2})
		for _, w := range []int{tt, tt + 1, 1 << 30} {
			got, peak := run(tensor.AttentionOptions{Scale: 0.3, Dropout: 0.1, Seed: 2, Window: w})
			for i := range none {
				if math.Float64bits(got[i]) != math.Float64bits(none[i]) {
					t.Fatalf("composed %v, window %d: element %d is %v, %v without a window", composed, w, i, got[i], none[i])
				}
			}
			if peak != nonePeak {
				t.Errorf("composed %v, window %d: peak %d bytes, %d without a window", composed, w, peak, nonePeak)
			}
		}
		// Window 1: y = v (no dropout), each probability 1.
		s := tensor.NewScope(tensor.NoGrad())
		q, k, v := heads(s, qkv, h, d)
		y := s.Attention(q, k, v, nil, tensor.AttentionOptions{Scale: 0.3, Window: 1, Softcap: 0.5})
		if e := maxRelError(y.Float64s(), s.Contiguous(v).Float64s()); e > 1e-7 {
			t.Errorf("composed %v: a window of 1 is %.3g off the values", composed, e)
		}
		s.Close()
		qkv.Release()
	}
}

// The composed path's gradient under windows and soft caps against finite
// differences in float64, as TestGradients checks the fused kernels'.
func TestAttentionOptionsComposedGradients(t *testing.T) {
	dev := device.Without(cpu.New(), device.CapAttention)
	const tt = 11
	seg := mustSegments(t, [][]int{{4, 5, 2}, {-3, 8}}, tt)
	for _, c := range []struct {
		name string
		seg  *tensor.Segments
		o    tensor.AttentionOptions
	}{
		{"window", nil, tensor.AttentionOptions{Scale: 0.5, Window: 3}},
		{"softcap", nil, tensor.AttentionOptions{Scale: 2, Softcap: 0.8}},
		{"softcap/window/segments/dropout", seg, tensor.AttentionOptions{Scale: 2, Softcap: 0.8, Window: 4, Dropout: 0.3, Seed: 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ins := []input{in("", 2, tt, 3*2*3)}
			fn := func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				q, k, v := heads(s, x[0], 2, 3)
				return s.Attention(q, k, v, c.seg, c.o)
			}
			vals := [][]float64{makeValues(rand.New(rand.NewPCG(2, 2)), ins[0])}
			var w []float64
			eval := func() float64 {
				s := tensor.NewScope(tensor.NoGrad())
				defer s.Close()
				xs := makeInputs(t, dev, ins, vals, false)
				defer xs[0].Release()
				out := fn(s, xs)
				if w == nil {
					w = makeValues(rand.New(rand.NewPCG(7, 7)), input{shape: out.Shape()})
				}
				return objective(s, out, w).Item()
			}
			eval()
			s := tensor.NewScope()
			xs := makeInputs(t, dev, ins, vals, true)
			defer xs[0].Release()
			objective(s, fn(s, xs), w).Backward()
			s.Close()
			analytic := xs[0].Grad().Float64s()
			const step = 1e-6
			for j := range vals[0] {
				orig := vals[0][j]
				vals[0][j] = orig + step
				up := eval()
				vals[0][j] = orig - step
				down := eval()
				vals[0][j] = orig
				if numeric := (up - down) / (2 * step); math.Abs(numeric-analytic[j]) > 1e-6*math.Max(1, math.Abs(numeric)) {
					t.Errorf("element %d: analytic %.9g, numeric %.9g", j, analytic[j], numeric)
				}
			}
		})
	}
}

// The meta device standing for the CPU accounts a windowed, soft-capped
// step as the CPU allocates it: the same peak, so plans of models with
// sliding windows stay exact (the window's starts take the workspace
// bytes example boundaries take).
func TestAttentionWindowAccounting(t *testing.T) {
	const h, d, tt = 2, 8, device.AttentionBlock + 6
	seg := mustSegments(t, gradSegments, tt)
	for _, c := range attentionOptionCases {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				var sg *tensor.Segments
				if c.seg {
					sg = seg
				}
				peak := func(dev device.Device) (int64, int64) {
					qkv, err := tensor.Rand(dev, dt, []int{2, tt, 3 * h * d}, device.Uniform, -1, 1, 9, memory.Activation)
					if err != nil {
						t.Fatal(err)
					}
					defer qkv.Release()
					qkv.SetRequiresGrad(true)
					mem := dev.Memory()
					mem.ResetPeak()
					base := mem.Stats().Requested.Current
					s := tensor.NewScope()
					q, k, v := heads(s, qkv, h, d)
					y := s.Attention(q, k, v, sg, c.o)
					s.Sum(y, false).Backward()
					s.Close()
					st := mem.Stats()
					return st.Requested.Peak - base, st.Category(memory.Temporary).Peak
				}
				cp, ct := peak(cpu.New())
				mp, mt := peak(device.Without(meta.New(0), device.Lacks("cpu")...))
				if cp != mp || ct != mt {
					t.Errorf("peak %d bytes (temporaries %d) on the CPU, %d (%d) on the meta device", cp, ct, mp, mt)
				}
			})
		}
	}
}

// Invalid options are errors naming the op.
func TestAttentionOptionsErrors(t *testing.T) {
	dev := cpu.New()
	qkv, err := tensor.Rand(dev, tensor.F32, []int{2, 6, 3 * 2 * 4}, device.Uniform, -1, 1, 1, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer qkv.Release()
	for _, c := range []struct {
		o    tensor.AttentionOptions
		want string
	}{
		{tensor.AttentionOptions{Scale: 1, Window: -1}, "window -1"},
		{tensor.AttentionOptions{Scale: 1, Softcap: -1}, "soft cap -1"},
		{tensor.AttentionOptions{Scale: 1, Softcap: math.Inf(1)}, "soft cap +Inf"},
		{tensor.AttentionOptions{Scale: 1, Softcap: math.NaN()}, "soft cap NaN"},
		{tensor.AttentionOptions{Scale: 1, Dropout: 1}, "dropout 1"},
	} {
		for _, self := range []bool{false, true} {
			s := tensor.NewScope()
			err := tensor.Catch(func() error {
				if self {
					s.SelfAttention(qkv, 2, nil, c.o)
				} else {
					q, k, v := heads(s, qkv, 2, 4)
					s.Attention(q, k, v, nil, c.o)
				}
				return nil
			})
			var te *tensor.Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), "causal_") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v (self %v): %v, want an attention error saying %q", c.o, self, err, c.want)
			}
			s.Close()
		}
	}
}
