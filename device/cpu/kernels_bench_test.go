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

// BenchmarkRowKernels runs the row kernels of a GPT step on two threads,
// with -benchmem the check that they allocate nothing per call (issue 26):
// cross-entropy forward and backward over GPT-2's vocabulary ([256, 50304]
// logits, rows wider than any fixed scratch), layer norm forward and
// backward over [4096, 384], and softmax over [24576, 256], each in F32
// and BF16.
func BenchmarkRowKernels(b *testing.B) {
	for _, dt := range []device.DType{device.F32, device.BF16} {
		d := New(Threads(2))
		view := func(dt device.DType, shape ...int) device.View {
			n := 1
			for _, s := range shape {
				n *= s
			}
			buf, err := d.Alloc(int64(n*dt.Size()), memory.Other)
			if err != nil {
				b.Fatal(err)
			}
			strides := make([]int, len(shape))
			st := 1
			for i := len(shape) - 1; i >= 0; i-- {
				strides[i], st = st, st*shape[i]
			}
			v := device.View{Buf: buf, DType: dt, Shape: shape, Strides: strides}
			d.Random(v, device.Normal, 0, 1, uint64(n))
			return v
		}
		const rows, vocab = 256, 50304
		logits, dlogits := view(dt, rows, vocab), view(dt, rows, vocab)
		targets, loss, dloss := view(device.I32, rows), view(device.F32, rows), view(device.F32, rows)
		d.Fill(targets, 7)
		x, y, dy, dx := view(dt, 4096, 384), view(dt, 4096, 384), view(dt, 4096, 384), view(dt, 4096, 384)
		gamma, beta, dg, db := view(device.F32, 384), view(device.F32, 384), view(device.F32, 384), view(device.F32, 384)
		mean, rstd := view(device.F32, 4096), view(device.F32, 4096)
		s, p, g, ds := view(dt, 96*256, 256), view(dt, 96*256, 256), view(dt, 96*256, 256), view(dt, 96*256, 256)
		for _, k := range []struct {
			name string
			fn   func()
		}{
			{"CrossEntropy", func() { d.CrossEntropy(loss, logits, targets, -1, 0) }},
			{"CrossEntropyBackward", func() { d.CrossEntropyBackward(dlogits, logits, targets, dloss, -1, 0) }},
			{"LayerNorm", func() { d.LayerNorm(y, device.View{}, mean, rstd, x, gamma, beta, 1e-5) }},
			{"LayerNormBackward", func() { d.LayerNormBackward(dx, dg, db, dy, x, mean, rstd, gamma) }},
			{"Softmax", func() { d.Softmax(p, s, false) }},
			{"SoftmaxBackward", func() { d.SoftmaxBackward(ds, p, g, false) }},
		} {
			b.Run(k.name+"/"+dt.String(), func(b *testing.B) {
				b.ReportAllocs()
				k.fn() // warm the scratch sets and workers
				for range b.N {
					k.fn()
				}
			})
		}
	}
}
