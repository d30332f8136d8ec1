package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Value tests for the ops that used to differ from PyTorch. Each expected
// value is computed here from the op's definition in float64 (direct
// loops, no shared code with the op under test) or written out by hand, and
// the op is run in F64 on the CPU; they agree to rounding (1e-13).

const refTol = 1e-13

func randVals(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*rng.Float64() - 1
	}
	return v
}

// refDev is the one device of these tests (ops check that their operands
// share a device).
var refDev = cpu.New()

func f64(t *testing.T, vals []float64, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.FromFloat64(refDev, vals, shape, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Release)
	return x
}

func near(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > refTol*max(1, math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

func checkShape(t *testing.T, what string, x *tensor.Tensor, want ...int) {
	t.Helper()
	if !slices.Equal(x.Shape(), want) {
		t.Fatalf("%s: shape %v, want %v", what, x.Shape(), want)
	}
}

// conv2dRef is a direct convolution with per-axis stride, padding and
// dilation and groups, as torch.nn.functional.conv2d defines it.
func conv2dRef(x []float64, n, c, h, w int, wt []float64, oc, kh, kw int, b []float64, sh, sw, ph, pw, dh, dw, groups int) ([]float64, int, int) {
	oh := (h+2*ph-dh*(kh-1)-1)/sh + 1
	ow := (w+2*pw-dw*(kw-1)-1)/sw + 1
	cg, og := c/groups, oc/groups
	out := make([]float64, n*oc*oh*ow)
	for in := range n {
		for o := range oc {
			g := o / og
			for y := range oh {
				for xx := range ow {
					sum := 0.0
					if b != nil {
						sum = b[o]
					}
					for ci := range cg {
						ch := g*cg + ci
						for i := range kh {
							for j := range kw {
								iy, ix := y*sh-ph+i*dh, xx*sw-pw+j*dw
								if iy < 0 || iy >= h || ix < 0 || ix >= w {
									continue
								}
								sum += x[((in*c+ch)*h+iy)*w+ix] * wt[((o*cg+ci)*kh+i)*kw+j]
							}
						}
					}
					out[((in*oc+o)*oh+y)*ow+xx] = sum
				}
			}
		}
	}
	return out, oh, ow
}

func TestConv2dMatchesDirectConvolution(t *testing.T) {
	cases := []struct {
		name                   string
		n, c, h, w, oc, kh, kw int
		bias                   bool
		o                      tensor.Conv2dOptions
	}{
		{name: "dilation2-pad2", n: 2, c: 2, h: 7, w: 6, oc: 3, kh: 3, kw: 3, bias: true, o: tensor.Conv2dOptions{Pad: 2, Dilation: 2}},
		{name: "dilation-3x1-stride2", n: 1, c: 3, h: 9, w: 8, oc: 2, kh: 2, kw: 3, o: tensor.Conv2dOptions{Stride: 2, DilationH: 3}},
		{name: "per-axis-stride-pad", n: 1, c: 2, h: 6, w: 7, oc: 4, kh: 3, kw: 2, bias: true, o: tensor.Conv2dOptions{StrideH: 2, StrideW: 1, PadH: 0, PadW: 2}},
		{name: "groups2", n: 2, c: 4, h: 5, w: 5, oc: 6, kh: 3, kw: 3, bias: true, o: tensor.Conv2dOptions{Pad: 1, Groups: 2}},
		{name: "depthwise-dilated", n: 1, c: 3, h: 8, w: 8, oc: 6, kh: 3, kw: 3, o: tensor.Conv2dOptions{Stride: 2, Pad: 2, Dilation: 2, Groups: 3}},
	}
	rng := rand.New(rand.NewPCG(7, 1))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			groups := max(tc.o.Groups, 1)
			xv := randVals(rng, tc.n*tc.c*tc.h*tc.w)
			wv := randVals(rng, tc.oc*tc.c/groups*tc.kh*tc.kw)
			var bv []float64
			s := tensor.NewScope()
			defer s.Close()
			var b *tensor.Tensor
			if tc.bias {
				bv = randVals(rng, tc.oc)
				b = f64(t, bv, tc.oc)
			}
			sh, sw := max(tc.o.StrideH, tc.o.Stride, 1), max(tc.o.StrideW, tc.o.Stride, 1)
			ph, pw := max(tc.o.PadH, tc.o.Pad), max(tc.o.PadW, tc.o.Pad)
			dh, dw := max(tc.o.DilationH, tc.o.Dilation, 1), max(tc.o.DilationW, tc.o.Dilation, 1)
			want, oh, ow := conv2dRef(xv, tc.n, tc.c, tc.h, tc.w, wv, tc.oc, tc.kh, tc.kw, bv, sh, sw, ph, pw, dh, dw, groups)
			y := s.Conv2d(f64(t, xv, tc.n, tc.c, tc.h, tc.w), f64(t, wv, tc.oc, tc.c/groups, tc.kh, tc.kw), b, tc.o)
			checkShape(t, "conv2d", y, tc.n, tc.oc, oh, ow)
			near(t, "conv2d", y.Float64s(), want)
		})
	}
}

// With count_include_pad=False each window's sum is divided by the input
// positions it covers. x is 1..12 in a 3×4 image; window 3, stride 1,
// padding 1. The corner window covers {1, 2, 5, 6}: mean 3.5 where
// dividing by 9 would give 14/9.
func TestAvgPool2dExcludePad(t *testing.T) {
	x := make([]float64, 12)
	for i := range x {
		x[i] = float64(i + 1)
	}
	const h, w, k, pad = 3, 4, 3, 1
	want := make([]float64, h*w)
	wantIncl := make([]float64, h*w)
	for oy := range h {
		for ox := range w {
			sum, n := 0.0, 0
			for iy := oy - pad; iy < oy-pad+k; iy++ {
				for ix := ox - pad; ix < ox-pad+k; ix++ {
					if iy >= 0 && iy < h && ix >= 0 && ix < w {
						sum += x[iy*w+ix]
						n++
					}
				}
			}
			want[oy*w+ox] = sum / float64(n)
			wantIncl[oy*w+ox] = sum / (k * k)
		}
	}
	if want[0] != 3.5 {
		t.Fatalf("reference corner %v, want 3.5", want[0])
	}
	s := tensor.NewScope()
	defer s.Close()
	in := f64(t, x, 1, 1, h, w)
	near(t, "exclude-pad", s.AvgPool2d(in, k, tensor.Conv2dOptions{Stride: 1, Pad: pad, ExcludePad: true}).Float64s(), want)
	near(t, "include-pad", s.AvgPool2d(in, k, tensor.Conv2dOptions{Stride: 1, Pad: pad}).Float64s(), wantIncl)
}

func TestGeluExact(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	// Φ(1) = 0.8413447460685429, so gelu(1) = Φ(1) and gelu(-1) = -(1-Φ(1)).
	xs := []float64{1, -1, 0, 0.5, -3, 6}
	want := []float64{0.8413447460685429, -0.15865525393145707, 0}
	for _, v := range xs[3:] {
		want = append(want, v*0.5*math.Erfc(-v/math.Sqrt2))
	}
	x := f64(t, xs, len(xs))
	x.SetRequiresGrad(true)
	y := s.GeluExact(x)
	near(t, "gelu_exact", y.Float64s(), want)
	// The derivative Φ(x) + x·φ(x); at 0 it is 1/2, at 1 Φ(1) + φ(1).
	s.Sum(y, false).Backward()
	wantG := []float64{0.8413447460685429 + math.Exp(-0.5)/math.Sqrt(2*math.Pi), 0.15865525393145707 - math.Exp(-0.5)/math.Sqrt(2*math.Pi), 0.5}
	for _, v := range xs[3:] {
		wantG = append(wantG, 0.5*math.Erfc(-v/math.Sqrt2)+v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi))
	}
	near(t, "gelu_exact grad", x.Grad().Float64s(), wantG)
}

// matmulRef multiplies a [..., m, k] by b [..., k, n] over broadcast batch
// dimensions given as the shapes' leading parts.
func matmulRef(a []float64, as []int, b []float64, bs []int) ([]float64, []int) {
	ab, bb := as[:len(as)-2], bs[:len(bs)-2]
	m, k, n := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	rank := max(len(ab), len(bb))
	batch := make([]int, rank)
	pad := func(s []int) []int { return append(slices.Repeat([]int{1}, rank-len(s)), s...) }
	pa, pb := pad(ab), pad(bb)
	for i := range batch {
		batch[i] = max(pa[i], pb[i])
	}
	nb := 1
	for _, d := range batch {
		nb *= d
	}
	out := make([]float64, nb*m*n)
	for bi := range nb {
		ia, ib, r := 0, 0, bi
		sa, sb := 1, 1
		for d := rank - 1; d >= 0; d-- {
			c := r % batch[d]
			r /= batch[d]
			if pa[d] > 1 {
				ia += c * sa
			}
			if pb[d] > 1 {
				ib += c * sb
			}
			sa *= pa[d]
			sb *= pb[d]
		}
		for i := range m {
			for j := range n {
				sum := 0.0
				for p := range k {
					sum += a[ia*m*k+i*k+p] * b[ib*k*n+p*n+j]
				}
				out[bi*m*n+i*n+j] = sum
			}
		}
	}
	return out, append(batch, m, n)
}

func TestMatMulVectorsAndBroadcast(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name   string
		as, bs []int
		// Vector operands are multiplied as [1, k] and [k, 1] matrices in
		// the reference, and their dimension dropped from its shape.
		want []int
	}{
		{"size-1-batch", []int{2, 1, 7, 5}, []int{3, 5, 3}, []int{2, 3, 7, 3}},
		{"both-broadcast", []int{1, 3, 2, 4}, []int{2, 1, 4, 2}, []int{2, 3, 2, 2}},
		{"vector-by-matrix", []int{4}, []int{4, 3}, []int{3}},
		{"matrix-by-vector", []int{3, 4}, []int{4}, []int{3}},
		{"dot", []int{5}, []int{5}, []int{}},
		{"vector-by-batch", []int{4}, []int{2, 4, 3}, []int{2, 3}},
		{"batch-by-vector", []int{2, 3, 4}, []int{4}, []int{2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			av, bv := randVals(rng, prod(tc.as)), randVals(rng, prod(tc.bs))
			ras, rbs := tc.as, tc.bs
			if len(ras) == 1 {
				ras = []int{1, ras[0]}
			}
			if len(rbs) == 1 {
				rbs = []int{rbs[0], 1}
			}
			want, _ := matmulRef(av, ras, bv, rbs)
			s := tensor.NewScope()
			defer s.Close()
			y := s.MatMul(f64(t, av, tc.as...), f64(t, bv, tc.bs...))
			checkShape(t, "matmul", y, tc.want...)
			near(t, "matmul", y.Float64s(), want)
		})
	}
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func TestSoftmaxDim(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shape := []int{2, 3, 4}
	xv := randVals(rng, prod(shape))
	for dim := range shape {
		t.Run(string(rune('0'+dim)), func(t *testing.T) {
			want, wantLog := make([]float64, len(xv)), make([]float64, len(xv))
			strides := []int{12, 4, 1}
			for i := range xv {
				// The other elements along dim of element i.
				c := i / strides[dim] % shape[dim]
				base := i - c*strides[dim]
				sum := 0.0
				for j := range shape[dim] {
					sum += math.Exp(xv[base+j*strides[dim]])
				}
				want[i] = math.Exp(xv[i]) / sum
				wantLog[i] = xv[i] - math.Log(sum)
			}
			s := tensor.NewScope()
			defer s.Close()
			x := f64(t, xv, shape...)
			y := s.SoftmaxDim(x, dim-len(shape)) // negative dims count from the end
			checkShape(t, "softmax", y, shape...)
			near(t, "softmax", y.Float64s(), want)
			near(t, "log_softmax", s.LogSoftmaxDim(x, dim).Float64s(), wantLog)
		})
	}
}

// LayerNorm over the last two dimensions ([3, 4]) of a [2, 3, 4] input,
// PyTorch's normalized_shape=(3, 4): one mean and (biased) variance per
// leading index, over 12 elements; gamma and beta are elementwise [3, 4].
func TestLayerNormShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	xv, gv, bv := randVals(rng, 24), randVals(rng, 12), randVals(rng, 12)
	const eps = 1e-5
	want := make([]float64, 24)
	for r := range 2 {
		row := xv[r*12 : (r+1)*12]
		mean, v := 0.0, 0.0
		for _, x := range row {
			mean += x
		}
		mean /= 12
		for _, x := range row {
			v += (x - mean) * (x - mean)
		}
		v /= 12
		for j, x := range row {
			want[r*12+j] = (x-mean)/math.Sqrt(v+eps)*gv[j] + bv[j]
		}
	}
	s := tensor.NewScope()
	defer s.Close()
	y := s.LayerNorm(f64(t, xv, 2, 3, 4), f64(t, gv, 3, 4), f64(t, bv, 3, 4), eps)
	checkShape(t, "layer_norm", y, 2, 3, 4)
	near(t, "layer_norm", y.Float64s(), want)
}

// The zero CrossEntropyOptions ignore -100 (and not class 0), as PyTorch's
// defaults do; IgnoreIndex(0) ignores class 0.
func TestCrossEntropyIgnoreDefault(t *testing.T) {
	logits := []float64{1, 2, 0.5, -1, 0, 3}
	// Per-row -log softmax at the target.
	nll := func(row []float64, c int) float64 {
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(v)
		}
		return math.Log(sum) - row[c]
	}
	r0, r1 := nll(logits[:3], 0), nll(logits[3:], 2)
	cases := []struct {
		name    string
		targets []int64
		o       tensor.CrossEntropyOptions
		want    float64
	}{
		{"zero-value-keeps-class-0", []int64{0, 2}, tensor.CrossEntropyOptions{}, (r0 + r1) / 2},
		{"zero-value-ignores-minus-100", []int64{-100, 2}, tensor.CrossEntropyOptions{}, r1},
		{"ignore-class-0", []int64{0, 2}, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(0)}, r1},
		{"ignore-minus-1", []int64{0, -1}, tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(-1)}, r0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tensor.NewScope()
			defer s.Close()
			tg, err := tensor.FromInt64(refDev, tc.targets, []int{2}, memory.Data)
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Release()
			got := s.CrossEntropy(f64(t, logits, 2, 3), tg, tc.o).Item()
			near(t, "loss", []float64{got}, []float64{tc.want})
		})
	}
	if got := (tensor.CrossEntropyOptions{}).Ignore.Index(); got != -100 {
		t.Errorf("zero value ignores %d, want -100", got)
	}
}

// 1 + 2⁻⁸ + 2⁻³⁰ lies just above bf16's halfway point between 1 and
// 1 + 2⁻⁷ and so rounds up; rounded to float32 first it would become the
// tie itself and round to even, 1. The same for f16 at 1 + 2⁻¹¹ + 2⁻³⁰.
func TestCastF64RoundsOnce(t *testing.T) {
	cases := []struct {
		dtype tensor.DType
		x     float64
		want  float64
	}{
		{tensor.BF16, 1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-7},
		{tensor.BF16, -(1 + 0x1p-8 + 0x1p-30), -(1 + 0x1p-7)},
		{tensor.BF16, 1 + 0x1p-8, 1}, // the tie itself goes to even
		{tensor.F16, 1 + 0x1p-11 + 0x1p-30, 1 + 0x1p-10},
		{tensor.F16, 1 + 0x1p-11, 1},
	}
	for _, tc := range cases {
		s := tensor.NewScope()
		x := f64(t, []float64{tc.x}, 1)
		if got := s.Cast(x, tc.dtype).Item(); got != tc.want {
			t.Errorf("cast %.17g to %v = %.17g, want %.17g", tc.x, tc.dtype, got, tc.want)
		}
		// SetFloat64s converts straight from the float64 too.
		y, err := tensor.New(refDev, tc.dtype, []int{1}, memory.Other)
		if err != nil {
			t.Fatal(err)
		}
		if err := y.SetFloat64s([]float64{tc.x}); err != nil {
			t.Fatal(err)
		}
		if got := y.Item(); got != tc.want {
			t.Errorf("SetFloat64s(%.17g) into %v = %.17g, want %.17g", tc.x, tc.dtype, got, tc.want)
		}
		y.Release()
		s.Close()
	}
}

func TestSetFloat64sAndFromInt64(t *testing.T) {
	dev := refDev
	x, err := tensor.New(dev, tensor.F64, []int{2, 3}, memory.Other)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	v0 := x.Version()
	vals := []float64{1.5, -2, 1e-300, 3, 0, math.Pi}
	if err := x.SetFloat64s(vals); err != nil {
		t.Fatal(err)
	}
	near(t, "SetFloat64s", x.Float64s(), vals)
	if x.Version() == v0 {
		t.Error("SetFloat64s did not bump the version")
	}
	if err := x.SetFloat64s(vals[:5]); err == nil {
		t.Error("SetFloat64s accepted 5 values for 6 elements")
	}
	// Into a transposed view: values land in the view's row-major order.
	s := tensor.NewScope()
	defer s.Close()
	xt := s.Transpose(x, 0, 1)
	if err := xt.SetFloat64s([]float64{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	near(t, "SetFloat64s transposed", x.Float64s(), []float64{1, 3, 5, 2, 4, 6})

	ids := []int64{0, -100, 1 << 40, 7}
	it, err := tensor.FromInt64(dev, ids, []int{2, 2}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	if it.DType() != tensor.I64 || !slices.Equal(it.Int64s(), ids) {
		t.Errorf("FromInt64: %v %v, want I64 %v", it.DType(), it.Int64s(), ids)
	}
	if _, err := tensor.FromInt64(dev, ids, []int{3}, memory.Data); err == nil {
		t.Error("FromInt64 accepted 4 values for shape [3]")
	}
}

func TestArgmax(t *testing.T) {
	// [2, 3, 4] with ties: the first maximum wins, as in torch.argmax.
	xv := []float64{
		1, 5, 5, 0,
		2, -1, 7, 7,
		9, 9, 9, 9,

		-3, -2, -2, -8,
		0, 0, 0, 0,
		4, 0, -2, 0,
	}
	cases := []struct {
		dim     int
		keepdim bool
		shape   []int
		want    []int64
	}{
		{dim: -1, shape: []int{2, 3}, want: []int64{1, 2, 0, 1, 0, 0}},
		{dim: 1, shape: []int{2, 4}, want: []int64{2, 2, 2, 2, 2, 1, 1, 1}},
		{dim: 0, keepdim: true, shape: []int{1, 3, 4}, want: []int64{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}},
	}
	// A NaN is the maximum of its row, the first NaN if several.
	s := tensor.NewScope()
	defer s.Close()
	nan := math.NaN()
	got := s.Argmax(f64(t, []float64{1, nan, 3, nan, 2, 5, 0, 1}, 2, 4), 1, false).Int64s()
	if !slices.Equal(got, []int64{1, 1}) {
		t.Errorf("argmax with NaN: %v, want [1 1]", got)
	}
	for _, tc := range cases {
		for _, dt := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.I32} {
			s := tensor.NewScope()
			x := s.Cast(f64(t, xv, 2, 3, 4), dt)
			got := s.Argmax(x, tc.dim, tc.keepdim)
			if got.DType() != tensor.I64 || !slices.Equal(got.Shape(), tc.shape) || !slices.Equal(got.Int64s(), tc.want) {
				t.Errorf("%v argmax(dim %d): %v %v %v, want I64 %v %v", dt, tc.dim, got.DType(), got.Shape(), got.Int64s(), tc.shape, tc.want)
			}
			s.Close()
		}
	}
}
