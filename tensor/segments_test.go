package tensor_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// packedPositions returns the positions of rows packed with examples of
// the given lengths, row by row; a negative length is an example cut at
// the end of the row before, whose positions go on from 5.
func packedPositions(rows [][]int) []int32 {
	var pos []int32
	for _, row := range rows {
		for _, n := range row {
			first := int32(0)
			if n < 0 {
				n, first = -n, 5
			}
			for i := range n {
				pos = append(pos, first+int32(i))
			}
		}
	}
	return pos
}

func mustSegments(t testing.TB, rows [][]int, tt int) *tensor.Segments {
	t.Helper()
	seg, err := tensor.NewSegments(packedPositions(rows), len(rows), tt)
	if err != nil {
		t.Fatal(err)
	}
	return seg
}

// gradSegments are two rows of device.AttentionBlock+6 tokens: the first
// holds an example that crosses the block boundary and one that starts
// inside the second block; the second one continued from a row before,
// one that ends at the boundary and one after it.
var gradSegments = [][]int{{50, 83, device.AttentionBlock + 6 - 133}, {-40, device.AttentionBlock - 40, 6}}

func init() {
	seg, err := tensor.NewSegments(packedPositions(gradSegments), 2, device.AttentionBlock+6)
	if err != nil {
		panic(err)
	}
	// Float64 gradient checks of the fused kernels with example
	// boundaries (the composed path's: TestSegmentedAttentionComposedGradients).
	for _, p := range []float64{0, 0.3} {
		gradCases = append(gradCases, gradCase{
			name:   fmt.Sprintf("segmented_attention/dropout-%v", p),
			inputs: []input{in("", 2, device.AttentionBlock+6, 3*1*4)},
			fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				q, k, v := heads(s, x[0], 1, 4)
				return s.SegmentedAttention(q, k, v, seg, 0.5, p, 99)
			},
		}, gradCase{
			name:   fmt.Sprintf("segmented_self_attention/dropout-%v", p),
			inputs: []input{in("", 2, device.AttentionBlock+6, 3*1*4)},
			fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				return s.SegmentedSelfAttention(x[0], 1, seg, 0.5, p, 99)
			},
		})
	}
}

func TestNewSegments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		positions []int32
		b, t      int
		starts    []int32
		max       int
		err       string
	}{
		{name: "one example per row", positions: []int32{0, 1, 2, 0, 1, 2}, b: 2, t: 3, starts: []int32{0, 0, 0, 0, 0, 0}, max: 2},
		{name: "packed", positions: []int32{0, 1, 0, 0, 1, 2, 3, 0}, b: 1, t: 8, starts: []int32{0, 0, 2, 3, 3, 3, 3, 7}, max: 3},
		{name: "continued at the row start", positions: []int32{7, 8, 0, 1}, b: 1, t: 4, starts: []int32{0, 0, 2, 2}, max: 8},
		{name: "short", positions: []int32{0, 1, 2}, b: 2, t: 2, err: "3 positions for a batch of 2 rows of 2 tokens"},
		{name: "negative", positions: []int32{0, 1, -1, 0}, b: 2, t: 2, err: "position 0 of row 1 is -1"},
		{name: "empty", positions: nil, b: 0, t: 4, err: "0 positions for a batch of 0 rows"},
		{name: "overflowing shape", positions: nil, b: 1 << 62, t: 4, err: "0 positions for a batch of 4611686018427387904 rows of 4 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg, err := tensor.NewSegments(tc.positions, tc.b, tc.t)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seg.Starts(), tc.starts) || seg.MaxPosition() != tc.max || !slices.Equal(seg.Positions(), tc.positions) {
				t.Errorf("starts %v, max %d, positions %v; want %v, %d, %v", seg.Starts(), seg.MaxPosition(), seg.Positions(), tc.starts, tc.max, tc.positions)
			}
			if b, tt := seg.Shape(); b != tc.b || tt != tc.t {
				t.Errorf("shape %d×%d, want %d×%d", b, tt, tc.b, tc.t)
			}
			// The positions are copied.
			tc.positions[0] = 99
			if seg.Positions()[0] == 99 {
				t.Error("NewSegments kept the caller's slice")
			}
		})
	}
}

// Attention over packed rows gives each example what attention over that
// example alone gives, forward and backward, with the fused kernels and
// with the composed path, in every dtype and under autocast.
func TestSegmentedAttentionMatchesExamples(t *testing.T) {
	const h, d = 2, 8
	rows := [][]int{{37, 91, 22, 50}, {-60, 140}}
	const tt = 200
	for _, tc := range []struct {
		name     string
		dt       tensor.DType
		autocast tensor.DType
		tol      float64
	}{
		{"f64", tensor.F64, 0, 1e-12}, {"f32", tensor.F32, 0, 1e-5}, {"bf16", tensor.BF16, 0, 2e-2}, {"f32/autocast-bf16", tensor.F32, tensor.BF16, 2e-2},
	} {
		for _, composed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/composed=%v", tc.name, composed), func(t *testing.T) {
				var dev device.Device = cpu.New()
				if composed {
					dev = device.Without(dev, device.CapAttention)
				}
				var opts []tensor.ScopeOption
				if tc.autocast != 0 {
					opts = append(opts, tensor.Autocast(tc.autocast))
				}
				rng := rand.New(rand.NewPCG(5, 6))
				x := make([]float64, len(rows)*tt*3*h*d)
				for i := range x {
					x[i] = rng.Float64()*2 - 1
				}
				// run returns y·y summed's value and gradient for rows
				// [b0, b0+nb) and tokens [t0, t0+n) of x, packed per seg
				// (nil: one example).
				run := func(b0, nb, t0, n int, seg *tensor.Segments) (out, grad []float64) {
					var vals []float64
					for b := b0; b < b0+nb; b++ {
						o := (b*tt + t0) * 3 * h * d
						vals = append(vals, x[o:o+n*3*h*d]...)
					}
					qkv, err := tensor.FromFloat64(dev, vals, []int{nb, n, 3 * h * d}, memory.Activation)
					if err != nil {
						t.Fatal(err)
					}
					if tc.dt != tensor.F64 {
						s := tensor.NewScope(tensor.NoGrad())
						c := s.Keep(s.Cast(qkv, tc.dt))
						s.Close()
						qkv.Release()
						qkv = c
					}
					defer qkv.Release()
					qkv.SetRequiresGrad(true)
					s := tensor.NewScope(opts...)
					q, k, v := heads(s, qkv, h, d)
					y := s.SegmentedAttention(q, k, v, seg, 0.3, 0, 0)
					out = y.Float64s()
					s.Sum(s.Mul(y, y), false).Backward()
					s.Close()
					return out, qkv.Grad().Float64s()
				}
				pOut, pGrad := run(0, len(rows), 0, tt, mustSegments(t, rows, tt))
				for b, row := range rows {
					t0 := 0
					for _, n := range row {
						n = max(n, -n)
						eOut, eGrad := run(b, 1, t0, n, nil)
						var gotOut, gotGrad []float64
						for hh := range h { // y is [B, H, T, D]
							o := ((b*h+hh)*tt + t0) * d
							gotOut = append(gotOut, pOut[o:o+n*d]...)
						}
						o := (b*tt + t0) * 3 * h * d
						gotGrad = pGrad[o : o+n*3*h*d]
						if e := maxRelError(gotOut, eOut); e > tc.tol {
							t.Errorf("row %d, example [%d, %d): output off by %.3g relative, want <= %g", b, t0, t0+n, e, tc.tol)
						}
						if e := maxRelError(gotGrad, eGrad); e > tc.tol {
							t.Errorf("row %d, example [%d, %d): gradient off by %.3g relative, want <= %g", b, t0, t0+n, e, tc.tol)
						}
						t0 += n
					}
				}
			})
		}
	}
}

// With dropout the fused kernels and the composition draw the same masks
// over packed rows: the same values and gradients; and starts that keep
// every row one example give what no segments give, bit for bit.
func TestSegmentedAttentionFusedMatchesComposed(t *testing.T) {
	const h, d, tt = 2, 8, device.AttentionBlock + 6
	seg := mustSegments(t, gradSegments, tt)
	whole, err := tensor.NewSegments(packedPositions([][]int{{tt}, {tt}}), 2, tt)
	if err != nil {
		t.Fatal(err)
	}
	run := func(dev device.Device, seg *tensor.Segments, self bool) []float64 {
		qkv, err := tensor.Rand(dev, tensor.F64, []int{2, tt, 3 * h * d}, device.Uniform, -1, 1, 9, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		defer qkv.Release()
		qkv.SetRequiresGrad(true)
		s := tensor.NewScope()
		defer s.Close()
		var y *tensor.Tensor
		if self {
			y = s.SegmentedSelfAttention(qkv, h, seg, 0.4, 0.2, 3)
		} else {
			q, k, v := heads(s, qkv, h, d)
			y = s.SegmentedAttention(q, k, v, seg, 0.4, 0.2, 3)
		}
		s.Sum(s.Mul(y, y), false).Backward()
		return append(y.Float64s(), qkv.Grad().Float64s()...)
	}
	for _, self := range []bool{false, true} {
		fused := run(cpu.New(), seg, self)
		if e := maxRelError(run(device.Without(cpu.New(), device.CapAttention), seg, self), fused); e > 1e-12 {
			t.Errorf("self %v: composed and fused differ by %.3g relative", self, e)
		}
		plain, one := run(cpu.New(), nil, self), run(cpu.New(), whole, self)
		for i := range plain {
			if math.Float64bits(one[i]) != math.Float64bits(plain[i]) {
				t.Fatalf("self %v: element %d is %v with one example per row, %v without segments", self, i, one[i], plain[i])
			}
		}
	}
}

// The composed path's gradient with example boundaries against finite
// differences in float64, as TestGradients checks the fused kernels'.
func TestSegmentedAttentionComposedGradients(t *testing.T) {
	dev := device.Without(cpu.New(), device.CapAttention)
	const tt = 11
	seg := mustSegments(t, [][]int{{4, 5, 2}, {-3, 8}}, tt)
	ins := []input{in("", 2, tt, 3*2*3)}
	fn := func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		q, k, v := heads(s, x[0], 2, 3)
		return s.SegmentedAttention(q, k, v, seg, 0.5, 0.3, 7)
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
}

// Segments of another batch shape are an error naming the op.
func TestSegmentedAttentionBadSegments(t *testing.T) {
	seg := mustSegments(t, [][]int{{3, 3}}, 6) // one row, the batch has two
	for _, d := range []device.Device{cpu.New(), device.Without(cpu.New(), device.CapAttention)} {
		qkv, err := tensor.Rand(d, tensor.F32, []int{2, 6, 3 * 2 * 4}, device.Uniform, -1, 1, 1, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		s := tensor.NewScope()
		err = tensor.Catch(func() error { s.SegmentedSelfAttention(qkv, 2, seg, 1, 0, 0); return nil })
		var te *tensor.Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "segments of 1 rows of 6 tokens for a batch of 2 rows of 6") {
			t.Errorf("%s: %v, want an error naming both shapes", d.Name(), err)
		}
		s.Close()
		qkv.Release()
	}
}

// Example of packing: two examples of 3 and 2 tokens in one row attend
// within themselves only.
func ExampleNewSegments() {
	seg, err := tensor.NewSegments([]int32{0, 1, 2, 0, 1}, 1, 5)
	if err != nil {
		panic(err)
	}
	fmt.Println(seg.Starts())
	// Output: [0 0 0 3 3]
}
