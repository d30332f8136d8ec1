package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Grouped-query attention: k and v with fewer heads than q
// (tensor.Attention reads key head h/(H/KV) for query head h, and the
// gradients of k and v sum their group's heads).

// groupedHeads views a projection's rows [B, T, (H + 2·KV)·D] (the
// queries' H heads, then the keys' KV, then the values' KV, as a
// decoder's AttendRows reads them) as q [B, H, T, D] and k and v
// [B, KV, T, D].
func groupedHeads(s *tensor.Scope, x *tensor.Tensor, h, kv, d int) (q, k, v *tensor.Tensor) {
	b, t := x.Shape()[0], x.Shape()[1]
	view := func(at, n int) *tensor.Tensor {
		c := s.Narrow(x, 2, at*d, n*d)
		return s.Permute(s.Reshape(c, b, t, n, d), 0, 2, 1, 3)
	}
	return view(0, h), view(h, kv), view(h+kv, kv)
}

// repeated is x [B, KV, T, D] with each head repeated h/KV times, as
// Hugging Face's repeat_kv (and nn's RepeatKV, token by token).
func repeated(s *tensor.Scope, x *tensor.Tensor, h int) *tensor.Tensor {
	b, n, t, d := x.Shape()[0], x.Shape()[1], x.Shape()[2], x.Shape()[3]
	u := s.Reshape(s.Permute(x, 0, 2, 1, 3), b, t, n, 1, d)
	c := s.Contiguous(s.Expand(u, b, t, n, h/n, d))
	return s.Permute(s.Reshape(c, b, t, h, d), 0, 2, 1, 3)
}

func init() {
	seg, err := tensor.NewSegments(packedPositions(gradSegments), 2, device.AttentionBlock+6)
	if err != nil {
		panic(err)
	}
	// Float64 gradient checks of the fused kernels with grouped heads:
	// rows in two blocks of device.AttentionBlock, 2 query heads over 1
	// key and value head and 4 over 2 (narrow heads, so that the checks,
	// which differentiate every element, stay short).
	for _, c := range []struct {
		name         string
		heads, kv, d int
		seg          *tensor.Segments
		o            tensor.AttentionOptions
	}{
		{"2-over-1", 2, 1, 3, nil, tensor.AttentionOptions{Scale: 0.5}},
		{"4-over-2/dropout", 4, 2, 1, nil, tensor.AttentionOptions{Scale: 0.5, Dropout: 0.3, Seed: 99}},
		{"2-over-1/softcap/window/segments/dropout", 2, 1, 2, seg, tensor.AttentionOptions{Scale: 1.5, Softcap: 1.2, Window: 45, Dropout: 0.3, Seed: 99}},
	} {
		rows := 1
		if c.seg != nil {
			rows = 2
		}
		gradCases = append(gradCases, gradCase{
			name:   "attention/grouped/" + c.name,
			inputs: []input{in("", rows, device.AttentionBlock+6, (c.heads+2*c.kv)*c.d)},
			fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
				q, k, v := groupedHeads(s, x[0], c.heads, c.kv, c.d)
				return s.Attention(q, k, v, c.seg, c.o)
			},
		})
	}
}

// Attention of grouped heads computes what attention of the keys and
// values repeated to every query head computes (repeat_kv), forward and
// backward, under every option, with the fused kernels and composed: in
// float64 and float32 the fused kernels give its bits (each head's
// partial dk and dv is the repeated head's, and a group's are added in
// head order, as the repeat's gradient sums its copies); in bf16 the
// group's sum is rounded once instead of per head, within bf16's
// tolerance of it. The composition repeats them itself: its bits, in
// every dtype (and within float tolerance of the fused kernels' in
// float64 and float32). The result is the same bits on one thread as on
// several, and it holds no repeated copies: its peak is lower by at
// least the two [B, H, T, D] copies.
func TestGroupedAttentionMatchesRepeated(t *testing.T) {
	const h, d, tt = 4, 8, device.AttentionBlock + 6
	seg := mustSegments(t, gradSegments, tt)
	for _, c := range attentionOptionCases {
		for _, dt := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16} {
			for _, kv := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/%v/kv-%d", c.name, dt, kv), func(t *testing.T) {
					var sg *tensor.Segments
					if c.seg {
						sg = seg
					}
					run := func(dev device.Device, repeat bool) (vals []float64, peak int64) {
						qkv, err := tensor.Rand(dev, dt, []int{2, tt, (h + 2*kv) * d}, device.Uniform, -1, 1, 9, memory.Activation)
						if err != nil {
							t.Fatal(err)
						}
						defer qkv.Release()
						qkv.SetRequiresGrad(true)
						dev.Memory().ResetPeak()
						base := dev.Memory().Stats().Requested.Current
						s := tensor.NewScope()
						defer s.Close()
						q, k, v := groupedHeads(s, qkv, h, kv, d)
						if repeat {
							k, v = repeated(s, k, h), repeated(s, v, h)
						}
						y := s.Attention(q, k, v, sg, c.o)
						s.Sum(s.Mul(y, y), false).Backward()
						return append(y.Float64s(), qkv.Grad().Float64s()...), dev.Memory().Stats().Requested.Peak - base
					}
					grouped, gPeak := run(cpu.New(), false)
					rep, rPeak := run(cpu.New(), true)
					one, _ := run(cpu.New(cpu.Threads(1)), false)
					composed, _ := run(device.Without(cpu.New(), device.CapAttention), false)
					composedRep, _ := run(device.Without(cpu.New(), device.CapAttention), true)
					for i := range composed {
						if math.Float64bits(composed[i]) != math.Float64bits(composedRep[i]) {
							t.Fatalf("composed: element %d is %v grouped, %v repeated", i, composed[i], composedRep[i])
						}
					}
					same := func(name string, got []float64) {
						for i := range got {
							if math.Float64bits(got[i]) != math.Float64bits(grouped[i]) {
								t.Fatalf("%s: element %d is %v, grouped %v", name, i, got[i], grouped[i])
							}
						}
					}
					same("one thread", one)
					tol := map[tensor.DType]float64{tensor.F64: 1e-12, tensor.F32: 1e-5, tensor.BF16: 2e-2}[dt]
					if dt == tensor.BF16 {
						if e := maxRelError(grouped, rep); e > tol {
							t.Errorf("grouped and repeated differ by %.3g relative, more than %g", e, tol)
						}
					} else {
						same("repeated", rep)
					}
					if e := maxRelError(composed, grouped); dt != tensor.BF16 && e > tol {
						t.Errorf("composed and fused differ by %.3g relative, more than %g", e, tol)
					}
					if copies := int64(2 * 2 * h * tt * d * dt.Size()); rPeak-gPeak < copies {
						t.Errorf("peak %d bytes grouped, %d repeated: less than the copies' %d apart", gPeak, rPeak, copies)
					}
				})
			}
		}
	}
}

// Attention refuses keys and values whose heads do not divide the
// queries', or whose other dimensions differ.
func TestGroupedAttentionBadShapes(t *testing.T) {
	dev := cpu.New()
	mk := func(shape ...int) *tensor.Tensor {
		x, err := tensor.New(dev, tensor.F32, shape, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	q := mk(1, 6, 5, 4)
	defer q.Release()
	for _, c := range []struct{ k, v []int }{
		{[]int{1, 4, 5, 4}, []int{1, 4, 5, 4}}, // 4 does not divide 6
		{[]int{1, 2, 5, 4}, []int{1, 3, 5, 4}}, // k and v differ
		{[]int{1, 2, 6, 4}, []int{1, 2, 6, 4}}, // another T
		{[]int{1, 2, 5, 8}, []int{1, 2, 5, 8}}, // another D
	} {
		k, v := mk(c.k...), mk(c.v...)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("k %v, v %v: no panic", c.k, c.v)
				}
			}()
			s := tensor.NewScope()
			defer s.Close()
			s.Attention(q, k, v, nil, tensor.AttentionOptions{Scale: 1})
		}()
		k.Release()
		v.Release()
	}
}

// With grouped heads the result is laid out as the values, with H heads:
// token by token ([B, T, H, D] in memory) where the values' heads sit
// side by side in each token's row, as a projection's output viewed as
// heads does (so that the heads join into [B, T, H·D] without a copy),
// one or several of them; head by head where the values are.
func TestGroupedAttentionOutputLayout(t *testing.T) {
	const b, h, tt, d = 2, 4, 5, 3
	dev := cpu.New()
	for _, kv := range []int{1, 2} {
		for _, tokenMajor := range []bool{true, false} {
			s := tensor.NewScope(tensor.NoGrad())
			x, err := tensor.Rand(dev, tensor.F32, []int{b, tt, (h + 2*kv) * d}, device.Uniform, -1, 1, 1, memory.Activation)
			if err != nil {
				t.Fatal(err)
			}
			q, k, v := groupedHeads(s, x, h, kv, d)
			if !tokenMajor {
				q, k, v = s.Contiguous(q), s.Contiguous(k), s.Contiguous(v)
			}
			y := s.Attention(q, k, v, nil, tensor.AttentionOptions{Scale: 0.5})
			want := []int{tt * h * d, d, h * d, 1}
			if !tokenMajor {
				want = []int{h * tt * d, tt * d, d, 1}
			}
			if got := y.Strides(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("kv %d, values token-major %v: strides %v, want %v", kv, tokenMajor, got, want)
			}
			s.Close()
			x.Release()
		}
	}
}
