package tensor_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

var benchDev = cpu.New()

func benchOp(b *testing.B, shape []int, fn func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor) {
	dev := benchDev
	x, _ := tensor.Rand(dev, tensor.F32, shape, device.Normal, 0, 1, 1, memory.Data)
	defer x.Release()
	b.SetBytes(x.Bytes())
	b.ResetTimer()
	for range b.N {
		s := tensor.NewScope(tensor.NoGrad())
		fn(s, x)
		s.Close()
	}
}

func BenchmarkGelu(b *testing.B) {
	benchOp(b, []int{4096, 1536}, func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor { return s.Gelu(x) })
}

func BenchmarkAdd(b *testing.B) {
	benchOp(b, []int{4096, 1536}, func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor { return s.Add(x, x) })
}

func BenchmarkSoftmax(b *testing.B) {
	benchOp(b, []int{96 * 256, 256}, func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor { return s.Softmax(x) })
}

func BenchmarkLayerNorm(b *testing.B) {
	dev := benchDev
	g, _ := tensor.Full(dev, tensor.F32, []int{384}, 1, memory.Parameter)
	be, _ := tensor.New(dev, tensor.F32, []int{384}, memory.Parameter)
	benchOp(b, []int{4096, 384}, func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
		return s.LayerNorm(x, g, be, 1e-5)
	})
}

func BenchmarkLinear(b *testing.B) {
	dev := benchDev
	w, _ := tensor.Rand(dev, tensor.F32, []int{1152, 384}, device.Normal, 0, 1, 1, memory.Parameter)
	benchOp(b, []int{4096, 384}, func(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
		return s.Linear(x, w, nil)
	})
}
