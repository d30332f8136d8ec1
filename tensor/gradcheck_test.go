package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// input describes one argument of an op under test.
type input struct {
	shape []int
	// kind: "" random in [-1, 1]; "pos" in [0.5, 1.5]; "away" ±[0.2, 1]
	// (no kinks of relu/abs nearby); "idx:N" integers in [0, N).
	kind string
}

type gradCase struct {
	name   string
	inputs []input
	fn     func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor
	tol    float64 // relative tolerance (default 1e-6)
	h      float64 // finite-difference step (default 1e-6)
}

func in(kind string, shape ...int) input { return input{shape: shape, kind: kind} }

var gradCases = []gradCase{
	{name: "add", inputs: []input{in("", 3, 4), in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Add(x[0], x[1]) }},
	{name: "add/broadcast-row", inputs: []input{in("", 3, 4), in("", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Add(x[0], x[1]) }},
	{name: "add/broadcast-both", inputs: []input{in("", 2, 1, 4), in("", 3, 1)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Add(x[0], x[1]) }},
	{name: "sub/broadcast", inputs: []input{in("", 2, 3), in("", 2, 1)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Sub(x[0], x[1]) }},
	{name: "mul/broadcast", inputs: []input{in("", 2, 3, 4), in("", 3, 1)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Mul(x[0], x[1]) }},
	{name: "mul/same-input", inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Mul(x[0], x[0]) }},
	{name: "div/broadcast", inputs: []input{in("", 2, 3), in("pos", 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Div(x[0], x[1]) }},
	{name: "add_scalar", inputs: []input{in("", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.AddScalar(x[0], 0.5) }},
	{name: "mul_scalar", inputs: []input{in("", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MulScalar(x[0], -1.5) }},
	{name: "neg", inputs: []input{in("", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Neg(x[0]) }},
	{name: "exp", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Exp(x[0]) }},
	{name: "log", inputs: []input{in("pos", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Log(x[0]) }},
	{name: "sqrt", inputs: []input{in("pos", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Sqrt(x[0]) }},
	{name: "pow", inputs: []input{in("pos", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Pow(x[0], 2.5) }},
	{name: "square", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Square(x[0]) }},
	{name: "abs", inputs: []input{in("away", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Abs(x[0]) }},
	{name: "tanh", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Tanh(x[0]) }},
	{name: "sigmoid", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Sigmoid(x[0]) }},
	{name: "relu", inputs: []input{in("away", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Relu(x[0]) }},
	{name: "gelu", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Gelu(x[0]) }},
	{name: "scaled_matmul/batched", inputs: []input{in("", 2, 3, 4), in("", 2, 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.ScaledMatMul(x[0], s.Transpose(s.Transpose(x[1], 1, 2), 1, 2), -0.375)
	}},
	{name: "scaled_matmul/batched-by-2d", inputs: []input{in("", 2, 3, 4), in("", 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.ScaledMatMul(x[0], x[1], 0.125)
	}},
	// Heads viewed inside [B, T, H, D]: batch strides that do not
	// collapse into one, read in place a batch of heads at a time.
	{name: "matmul/strided-heads", inputs: []input{in("", 2, 3, 2, 4), in("", 2, 3, 2, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		q, k := s.Permute(x[0], 0, 2, 1, 3), s.Permute(x[1], 0, 2, 3, 1)
		return s.MatMul(q, k)
	}},
	{name: "causal_scores", inputs: []input{in("", 2, 5, 3), in("", 2, 5, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CausalScores(x[0], x[1], 0.7, 0)
	}},
	// The sum hands one gradient to both inputs: the scores' backward
	// must mask a copy, not the shared gradient.
	{name: "causal_scores/shared-gradient", inputs: []input{in("", 2, 5, 3), in("", 2, 5, 3), in("", 2, 5, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Add(s.MulScalar(x[2], 2), s.CausalScores(x[0], x[1], 0.7, 0))
	}},
	{name: "causal_matmul", inputs: []input{in("", 2, 5, 5), in("", 2, 5, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CausalMatMul(s.CausalMask(x[0], 0), x[1])
	}},
	{name: "causal_attention/fused", inputs: []input{in("", 2, 2, 7, 3), in("", 2, 2, 7, 3), in("", 2, 2, 7, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CausalAttention(x[0], x[1], x[2], 0.5, 0, 0)
	}},
	// Grouped-query attention's shared key/value heads, broadcast to the
	// query heads without a copy: zero strides in the head dimension.
	{name: "causal_attention/fused-broadcast-kv-heads", inputs: []input{in("", 1, 2, 5, 4), in("", 1, 1, 1, 5, 4), in("", 1, 1, 1, 5, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		k := s.Reshape(s.Expand(x[1], 1, 1, 2, 5, 4), 1, 2, 5, 4)
		v := s.Reshape(s.Expand(x[2], 1, 1, 2, 5, 4), 1, 2, 5, 4)
		return s.CausalAttention(x[0], k, v, 0.5, 0, 0)
	}},
	{name: "causal_attention", inputs: []input{in("", 2, 2, 17, 3), in("", 2, 2, 17, 3), in("", 2, 2, 17, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		p := s.Softmax(s.CausalScores(x[0], x[1], 0.5, math.Inf(-1)))
		return s.CausalMatMul(p, x[2])
	}},
	// q, k and v as heads of one fused [B, T, 3, H, D] projection, as the
	// attention layer splits them: their gradients are laid out as the
	// views and summed into the projection's through Narrow.
	{name: "causal_attention/fused-qkv-heads", inputs: []input{in("", 2, 9, 3, 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		var h [3]*tensor.Tensor
		for i := range h {
			h[i] = s.Permute(s.Reshape(s.Narrow(x[0], 2, i, 1), 2, 9, 2, 3), 0, 2, 1, 3)
		}
		p := s.Softmax(s.CausalScores(h[0], h[1], 0.5, math.Inf(-1)))
		return s.Reshape(s.Permute(s.CausalMatMul(p, h[2]), 0, 2, 1, 3), 2, 9, 6)
	}},
	{name: "matmul/strided-heads-3-batch-dims", inputs: []input{in("", 2, 3, 2, 2, 4), in("", 2, 3, 2, 2, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		q, k := s.Permute(x[0], 2, 0, 3, 1, 4), s.Permute(x[1], 2, 0, 3, 4, 1)
		return s.MatMul(q, k)
	}},
	{name: "matmul/2d", inputs: []input{in("", 3, 4), in("", 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/batched", inputs: []input{in("", 2, 3, 4), in("", 2, 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/batched-by-2d", inputs: []input{in("", 2, 3, 4), in("", 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/2d-by-batched", inputs: []input{in("", 3, 4), in("", 2, 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/transposed-views", inputs: []input{in("", 2, 4, 3), in("", 2, 5, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.MatMul(s.Transpose(x[0], 1, 2), s.Transpose(x[1], 1, 2))
	}},
	{name: "matmul/4d-attention", inputs: []input{in("", 2, 2, 3, 4), in("", 2, 2, 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.MatMul(x[0], s.Transpose(x[1], -1, -2))
	}},
	{name: "linear/bias", inputs: []input{in("", 3, 4), in("", 5, 4), in("", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Linear(x[0], x[1], x[2]) }},
	{name: "linear/no-bias-3d", inputs: []input{in("", 2, 3, 4), in("", 5, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Linear(x[0], x[1], nil) }},
	{name: "reshape", inputs: []input{in("", 2, 6)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Reshape(x[0], 3, -1) }},
	{name: "transpose+contiguous", inputs: []input{in("", 2, 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Contiguous(s.Transpose(x[0], 0, 2))
	}},
	{name: "permute+reshape", inputs: []input{in("", 2, 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Reshape(s.Permute(x[0], 2, 0, 1), 4, 6)
	}},
	{name: "narrow", inputs: []input{in("", 4, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Narrow(x[0], 1, 1, 3) }},
	// Slices of one computed tensor: the second and third slice gradients
	// are added in place into the first's full-size gradient.
	{name: "narrow/three-slices", inputs: []input{in("", 3, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		c := s.MulScalar(x[0], 1.5)
		a, b, d := s.Narrow(c, 0, 0, 1), s.Narrow(c, 0, 1, 1), s.Narrow(c, 0, 2, 1)
		return s.Add(s.Mul(a, b), s.MulScalar(d, 3))
	}},
	{name: "narrow/overlapping", inputs: []input{in("", 4, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		c := s.Exp(x[0])
		return s.Mul(s.Narrow(c, 0, 0, 3), s.Narrow(c, 0, 1, 3))
	}},
	// The sum passes one gradient to both its inputs: the slice's must not
	// be added into that shared gradient in place.
	{name: "narrow/shared-gradient", inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		c, z := s.MulScalar(x[0], 2), s.MulScalar(x[0], 3)
		y := s.Add(c, z)
		return s.Add(y, s.MulScalar(s.Narrow(c, 0, 1, 1), 5))
	}},
	{name: "expand", inputs: []input{in("", 3, 1)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Expand(x[0], 2, 3, 4) }},
	{name: "unsqueeze", inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Unsqueeze(x[0], 1) }},
	{name: "concat", inputs: []input{in("", 2, 3), in("", 2, 2)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Concat(1, x[0], x[1]) }},
	{name: "split", inputs: []input{in("", 5, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		p := s.Split(x[0], 0, 2, 3)
		return s.Mul(s.Sum(p[0], false, 0), s.Sum(p[1], false, 0))
	}},
	{name: "sum/all", inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Sum(x[0], false) }},
	{name: "sum/axes-keepdim", inputs: []input{in("", 2, 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Sum(x[0], true, 0, 2) }},
	{name: "mean/axis", inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Mean(x[0], false, 1) }},
	{name: "max/axis", inputs: []input{in("", 3, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Max(x[0], false, 1) }},
	{name: "softmax", inputs: []input{in("", 3, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Softmax(x[0]) }},
	{name: "log_softmax", inputs: []input{in("", 2, 3, 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.LogSoftmax(x[0]) }},
	{name: "layer_norm", inputs: []input{in("", 2, 3, 6), in("", 6), in("", 6)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LayerNorm(x[0], x[1], x[2], 1e-5)
	}},
	{name: "embedding", inputs: []input{in("", 7, 3), in("idx:7", 2, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Embedding(x[0], x[1]) }},
	{name: "conv2d/pad1", inputs: []input{in("", 2, 2, 5, 5), in("", 3, 2, 3, 3), in("", 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], x[2], tensor.Conv2dOptions{Stride: 1, Pad: 1})
	}},
	{name: "conv2d/stride2", inputs: []input{in("", 1, 2, 6, 6), in("", 2, 2, 2, 2)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], nil, tensor.Conv2dOptions{Stride: 2})
	}},
	{name: "max_pool2d", inputs: []input{in("", 2, 2, 4, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.MaxPool2d(x[0], 2, tensor.Conv2dOptions{})
	}},
	{name: "avg_pool2d", inputs: []input{in("", 2, 2, 4, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.AvgPool2d(x[0], 2, tensor.Conv2dOptions{})
	}},
	{name: "avg_pool2d/exclude-pad", inputs: []input{in("", 1, 2, 5, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.AvgPool2d(x[0], 3, tensor.Conv2dOptions{Stride: 2, Pad: 1, ExcludePad: true})
	}},
	{name: "conv2d/dilation2", inputs: []input{in("", 2, 2, 7, 6), in("", 3, 2, 3, 2), in("", 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], x[2], tensor.Conv2dOptions{Pad: 1, Dilation: 2})
	}},
	{name: "conv2d/per-axis", inputs: []input{in("", 1, 2, 6, 5), in("", 2, 2, 3, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], nil, tensor.Conv2dOptions{StrideH: 2, PadW: 2, DilationW: 2, DilationH: 1})
	}},
	{name: "conv2d/groups", inputs: []input{in("", 2, 4, 5, 5), in("", 6, 2, 3, 3), in("", 6)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], x[2], tensor.Conv2dOptions{Pad: 1, Groups: 2})
	}},
	{name: "conv2d/depthwise-dilated-strided", inputs: []input{in("", 1, 3, 8, 8), in("", 3, 1, 3, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Conv2d(x[0], x[1], nil, tensor.Conv2dOptions{Stride: 2, Pad: 2, Dilation: 2, Groups: 3})
	}},
	{name: "gelu_exact", inputs: []input{in("", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.GeluExact(x[0]) }},
	{name: "softmax_dim/0", inputs: []input{in("", 4, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.SoftmaxDim(x[0], 0) }},
	{name: "log_softmax_dim/1-of-3", inputs: []input{in("", 2, 4, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.LogSoftmaxDim(x[0], 1) }},
	{name: "layer_norm/shape-2d", inputs: []input{in("", 2, 3, 4), in("", 3, 4), in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.LayerNorm(x[0], x[1], x[2], 1e-5)
	}},
	{name: "matmul/1d-by-2d", inputs: []input{in("", 4), in("", 4, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/2d-by-1d", inputs: []input{in("", 3, 4), in("", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/1d-by-1d", inputs: []input{in("", 5), in("", 5)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/1d-by-batched", inputs: []input{in("", 4), in("", 2, 4, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/broadcast-size-1-batch", inputs: []input{in("", 2, 1, 7, 5), in("", 3, 5, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "matmul/broadcast-both", inputs: []input{in("", 1, 3, 2, 4), in("", 2, 1, 4, 2)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MatMul(x[0], x[1]) }},
	{name: "dropout", inputs: []input{in("", 4, 8)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.Dropout(x[0], 0.3, 42) }},
	{name: "cross_entropy", inputs: []input{in("", 4, 5), in("idx:5", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CrossEntropy(x[0], x[1], tensor.CrossEntropyOptions{})
	}},
	{name: "cross_entropy/ignore+smoothing", inputs: []input{in("", 2, 3, 5), in("idx:5", 2, 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CrossEntropy(x[0], x[1], tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(2), LabelSmoothing: 0.1})
	}},
	{name: "cross_entropy/sum", inputs: []input{in("", 3, 4), in("idx:4", 3)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.CrossEntropy(x[0], x[1], tensor.CrossEntropyOptions{Reduction: tensor.SumReduction})
	}},
	{name: "mse", inputs: []input{in("", 3, 4), in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MSE(x[0], x[1]) }},
	{name: "masked_fill", inputs: []input{in("", 3, 4), in("idx:2", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor { return s.MaskedFill(x[0], x[1], -7) }},
	{name: "causal_mask+softmax", inputs: []input{in("", 2, 4, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Softmax(s.CausalMask(x[0], math.Inf(-1)))
	}},
	{name: "relu_/in-place", inputs: []input{in("away", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.ReluInPlace(s.MulScalar(x[0], 1))
	}},
	{name: "add_/in-place-residual", inputs: []input{in("", 3, 4), in("", 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.AddInPlace(s.MulScalar(x[0], 1.5), x[1])
	}},
	{name: "dropout_/in-place", inputs: []input{in("", 4, 8)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.DropoutInPlace(s.MulScalar(x[0], 2), 0.25, 9)
	}},
	{name: "mul_/in-place", inputs: []input{in("", 6)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.MulScalarInPlace(s.Square(x[0]), 3)
	}},
	{name: "causal_mask_/in-place", inputs: []input{in("", 2, 4, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Softmax(s.CausalMaskInPlace(s.MulScalar(x[0], 1), math.Inf(-1)))
	}},
	{name: "cast/f32-roundtrip", tol: 1e-4, h: 1e-2, inputs: []input{in("", 3, 4)}, fn: func(s *tensor.Scope, x []*tensor.Tensor) *tensor.Tensor {
		return s.Cast(s.Mul(s.Cast(x[0], tensor.F32), s.Cast(x[0], tensor.F32)), tensor.F64)
	}},
}

func makeValues(rng *rand.Rand, in input) []float64 {
	n := 1
	for _, d := range in.shape {
		n *= d
	}
	v := make([]float64, n)
	for i := range v {
		switch {
		case in.kind == "pos":
			v[i] = 0.5 + rng.Float64()
		case in.kind == "away":
			v[i] = 0.2 + 0.8*rng.Float64()
			if rng.IntN(2) == 0 {
				v[i] = -v[i]
			}
		case len(in.kind) > 4 && in.kind[:4] == "idx:":
			var k int
			fmt.Sscanf(in.kind[4:], "%d", &k)
			v[i] = float64(rng.IntN(k))
		default:
			v[i] = 2*rng.Float64() - 1
		}
	}
	return v
}

func isIndex(in input) bool { return len(in.kind) > 4 && in.kind[:4] == "idx:" }

func makeInputs(t testing.TB, dev device.Device, ins []input, vals [][]float64, grad bool) []*tensor.Tensor {
	xs := make([]*tensor.Tensor, len(ins))
	for i, in := range ins {
		var err error
		if isIndex(in) {
			iv := make([]int32, len(vals[i]))
			for j, v := range vals[i] {
				iv[j] = int32(v)
			}
			xs[i], err = tensor.FromInt32(dev, iv, in.shape, memory.Data)
		} else {
			xs[i], err = tensor.FromFloat64(dev, vals[i], in.shape, memory.Parameter)
			xs[i].SetRequiresGrad(grad)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return xs
}

// objective is Σ out·w for fixed random weights w, so that every output
// element's gradient is checked with a different weight.
func objective(s *tensor.Scope, out *tensor.Tensor, w []float64) *tensor.Tensor {
	wt, err := tensor.FromFloat64(out.Device(), w, out.Shape(), memory.Temporary)
	if err != nil {
		panic(err)
	}
	defer wt.Release()
	return s.Sum(s.Mul(s.Cast(out, tensor.F64), wt), false)
}

func TestGradients(t *testing.T) {
	for _, c := range append(gradCases, lmHeadGradCases...) {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			vals := make([][]float64, len(c.inputs))
			for i, in := range c.inputs {
				vals[i] = makeValues(rng, in)
			}
			var w []float64

			eval := func(vals [][]float64) float64 {
				s := tensor.NewScope(tensor.NoGrad())
				defer s.Close()
				xs := makeInputs(t, dev, c.inputs, vals, false)
				defer func() {
					for _, x := range xs {
						x.Release()
					}
				}()
				out := c.fn(s, xs)
				if w == nil {
					w = makeValues(rand.New(rand.NewPCG(7, 7)), input{shape: out.Shape()})
				}
				return objective(s, out, w).Item()
			}
			eval(vals) // fixes w

			s := tensor.NewScope()
			xs := makeInputs(t, dev, c.inputs, vals, true)
			loss := objective(s, c.fn(s, xs), w)
			loss.Backward()
			s.Close()

			tol := c.tol
			if tol == 0 {
				tol = 1e-6
			}
			h := c.h
			if h == 0 {
				h = 1e-6
			}
			for i, in := range c.inputs {
				if isIndex(in) {
					continue
				}
				g := xs[i].Grad()
				if g == nil {
					t.Fatalf("input %d got no gradient", i)
				}
				analytic := g.Float64s()
				for j := range vals[i] {
					orig := vals[i][j]
					vals[i][j] = orig + h
					up := eval(vals)
					vals[i][j] = orig - h
					down := eval(vals)
					vals[i][j] = orig
					numeric := (up - down) / (2 * h)
					if diff := math.Abs(numeric - analytic[j]); diff > tol*math.Max(1, math.Abs(numeric)) {
						t.Errorf("input %d element %d: analytic %.9g, numeric %.9g", i, j, analytic[j], numeric)
					}
				}
			}
			for _, x := range xs {
				x.Release()
			}
			if got := dev.Memory().Stats().Requested.Current; got != 0 {
				t.Errorf("%d bytes still allocated after releasing everything", got)
			}
		})
	}
}
