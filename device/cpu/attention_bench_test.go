package cpu

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// BenchmarkCausalAttention runs the fused attention kernels at the GPT
// reference's shape (B 16, H 6, T 256, D 64), and bf16 at stepbench's
// long-context one (gpt_bf16_ctx1024: B 4, T 1024), with q, k and v
// viewed in a fused projection as the models pass them.
func BenchmarkCausalAttention(b *testing.B) {
	benchAttention(b, "", 16, 256, device.F32, device.BF16)
	benchAttention(b, "ctx1024/", 4, 1024, device.BF16)
}

// BenchmarkSegmentedAttention runs the fused kernels over rows that pack
// 8 examples of 128 tokens into a window of 1024 (B 4, H 6, D 64), with
// the example boundaries (device.Attention.Starts: each block of queries
// meets only its own example's keys) and without them (the whole causal
// window, as unpacked rows of 1024 would cost), in one run.
func BenchmarkSegmentedAttention(b *testing.B) {
	const bs, t, per = 4, 1024, 128
	starts := make([]int32, bs*t)
	for i := range starts {
		starts[i] = int32(i % t / per * per)
	}
	benchAttention(b, "packed8x128/", bs, t, device.F32, device.BF16)
	benchAttentionWith(b, "packed8x128/segments/", bs, t, starts, device.F32, device.BF16)
}

// BenchmarkSlidingWindowAttention runs the fused kernels over rows of
// 4096 tokens (B 1, H 6, D 64) under a sliding window of 512 keys
// (device.Attention.Starts from i-511: each block of queries meets the
// window's keys alone) and without one, in one run: the window's cost is
// O(T·W), about a fifth of the whole causal square's here.
func BenchmarkSlidingWindowAttention(b *testing.B) {
	const bs, t, w = 1, 4096, 512
	starts := make([]int32, bs*t)
	for i := range starts {
		starts[i] = int32(max(i%t-w+1, 0))
	}
	benchAttention(b, "t4096/", bs, t, device.BF16)
	benchAttentionWith(b, "t4096/window512/", bs, t, starts, device.BF16)
}

func benchAttention(b *testing.B, prefix string, bs, t int, dts ...device.DType) {
	benchAttentionWith(b, prefix, bs, t, nil, dts...)
}

func benchAttentionWith(b *testing.B, prefix string, bs, t int, starts []int32, dts ...device.DType) {
	const h, dim = 6, 64
	for _, dt := range dts {
		d := New()
		alloc := func(n int, dt device.DType) device.Buffer {
			buf, _ := d.Alloc(int64(n*dt.Size()), memory.Other)
			return buf
		}
		qkv := alloc(bs*t*3*h*dim, dt)
		d.Random(device.View{Buf: qkv, DType: dt, Shape: []int{bs * t * 3 * h * dim}, Strides: []int{1}}, device.Uniform, -1, 1, 1)
		head := func(i int) device.View {
			return device.View{Buf: qkv, DType: dt, Offset: i * h * dim, Shape: []int{bs, h, t, dim}, Strides: []int{t * 3 * h * dim, dim, 3 * h * dim, 1}}
		}
		dense := func() device.View {
			return device.View{Buf: alloc(bs*h*t*dim, dt), DType: dt, Shape: []int{bs, h, t, dim}, Strides: []int{h * t * dim, t * dim, dim, 1}}
		}
		out, dout, dq, dk, dv := dense(), dense(), dense(), dense(), dense()
		d.Fill(dout, 0.01)
		lse := device.View{Buf: alloc(bs*h*t, device.F32), DType: device.F32, Shape: []int{bs, h, t}, Strides: []int{h * t, t, 1}}
		a := device.Attention{Scale: 0.125, Starts: starts}
		b.Run(prefix+"forward/"+dt.String(), func(b *testing.B) {
			for range b.N {
				d.CausalAttention(out, lse, head(0), head(1), head(2), a)
			}
		})
		b.Run(prefix+"backward/"+dt.String(), func(b *testing.B) {
			for range b.N {
				d.CausalAttentionBackward(dq, dk, dv, dout, out, lse, head(0), head(1), head(2), a)
			}
		})
	}
}
