package cpu

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// BenchmarkCausalFill masks the GPT reference's attention scores in place
// ([B·H, T, T] = [96, 256, 256] in bf16), as CausalScores does.
func BenchmarkCausalFill(b *testing.B) {
	d := New()
	shape := []int{96, 256, 256}
	n := 96 * 256 * 256
	buf, _ := d.Alloc(int64(2*n), memory.Other)
	v := device.View{Buf: buf, DType: device.BF16, Shape: shape, Strides: []int{256 * 256, 256, 1}}
	b.SetBytes(int64(2 * n))
	for range b.N {
		d.CausalFill(v, v, -1e30)
	}
}

// BenchmarkGelu runs GELU forward and backward over the GPT reference's
// MLP activations ([B·T, 4·D] = [4096, 1536]) in each dtype.
func BenchmarkGelu(b *testing.B) {
	for _, dt := range []device.DType{device.F32, device.BF16} {
		d := New()
		n := 4096 * 1536
		view := func() device.View {
			buf, _ := d.Alloc(int64(n*dt.Size()), memory.Other)
			v := device.View{Buf: buf, DType: dt, Shape: []int{4096, 1536}, Strides: []int{1536, 1}}
			d.Fill(v, 0.5)
			return v
		}
		x, y, g, dx := view(), view(), view(), view()
		b.Run("forward/"+dt.String(), func(b *testing.B) {
			b.SetBytes(int64(2 * n * dt.Size()))
			for range b.N {
				d.Unary(device.Gelu, y, x, 0)
			}
		})
		b.Run("backward/"+dt.String(), func(b *testing.B) {
			b.SetBytes(int64(3 * n * dt.Size()))
			for range b.N {
				d.UnaryBackward(device.Gelu, dx, x, y, g, 0)
			}
		})
	}
}

// BenchmarkSoftmax runs softmax forward and backward over the GPT
// reference's attention probabilities ([B·H·T, T] = [24576, 256]) in each
// dtype; the rows are causal scores (filled above the diagonal), as in the
// model.
func BenchmarkSoftmax(b *testing.B) {
	const rows, n = 96 * 256, 256
	for _, dt := range []device.DType{device.F32, device.BF16} {
		d := New()
		view := func() device.View {
			buf, _ := d.Alloc(int64(rows*n*dt.Size()), memory.Other)
			return device.View{Buf: buf, DType: dt, Shape: []int{96, 256, 256}, Strides: []int{256 * 256, 256, 1}}
		}
		x, y, g, dx := view(), view(), view(), view()
		d.Random(x, device.Normal, 0, 1, 1)
		d.CausalFill(x, x, -1e30)
		d.Random(g, device.Normal, 0, 1, 2)
		b.Run("forward/"+dt.String(), func(b *testing.B) {
			b.SetBytes(int64(2 * rows * n * dt.Size()))
			for range b.N {
				d.Softmax(y, x, false)
			}
		})
		b.Run("backward/"+dt.String(), func(b *testing.B) {
			b.SetBytes(int64(3 * rows * n * dt.Size()))
			for range b.N {
				d.SoftmaxBackward(dx, y, g, false)
			}
		})
	}
}
