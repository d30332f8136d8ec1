package nn

import (
	"github.com/memfit/memfit/tensor"
)

// Conv2dConfig configures a Conv2d layer.
type Conv2dConfig struct {
	In, Out     int // channels
	Kernel      int // square kernel size
	Stride, Pad int // stride (0 means 1) and zero padding on every side
	// Dilation spaces the kernel's taps (0 means 1); Groups splits the
	// channels into independent convolutions (0 means 1; In and Out
	// divisible by it).
	Dilation, Groups int
	NoBias           bool
	// Weight defaults to KaimingUniform(1) (standard deviation
	// 1/√(In/Groups·Kernel²), the fan-in), Bias to Zeros.
	Weight, Bias Init
}

// Conv2d is a 2-D convolution over N×C×H×W images. Parameters:
// <path>.weight [Out, In/Groups, Kernel, Kernel] and <path>.bias [Out].
type Conv2d struct {
	Weight                        *tensor.Tensor
	Bias                          *tensor.Tensor // nil without bias
	Stride, Pad, Dilation, Groups int
}

// NewConv2d makes a Conv2d layer whose parameters live under path.
func NewConv2d(b *Builder, path string, c Conv2dConfig) (*Conv2d, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"In", c.In}, {"Out", c.Out}, {"Kernel", c.Kernel}} {
		if err := positive("conv2d", path, f.name, f.v); err != nil {
			return nil, err
		}
	}
	if c.Stride < 0 {
		return nil, configError("conv2d", path, "Stride", "is %d, want >= 0", c.Stride)
	}
	if c.Pad < 0 {
		return nil, configError("conv2d", path, "Pad", "is %d, want >= 0", c.Pad)
	}
	if c.Dilation < 0 {
		return nil, configError("conv2d", path, "Dilation", "is %d, want >= 0", c.Dilation)
	}
	groups := max(c.Groups, 1)
	if c.Groups < 0 || c.In%groups != 0 || c.Out%groups != 0 {
		return nil, configError("conv2d", path, "Groups", "is %d, want >= 0 and dividing In (%d) and Out (%d)", c.Groups, c.In, c.Out)
	}
	w, err := b.Param(Join(path, "weight"), []int{c.Out, c.In / groups, c.Kernel, c.Kernel}, c.Weight.Or(KaimingUniform(1)))
	if err != nil {
		return nil, err
	}
	l := &Conv2d{Weight: w, Stride: max(c.Stride, 1), Pad: c.Pad, Dilation: max(c.Dilation, 1), Groups: groups}
	if !c.NoBias {
		if l.Bias, err = b.Param(Join(path, "bias"), []int{c.Out}, c.Bias.Or(Zeros())); err != nil {
			w.Release()
			return nil, err
		}
	}
	return l, nil
}

// Forward convolves x [N, In, H, W] into [N, Out, H', W'].
func (l *Conv2d) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(moduleOf(l.Weight))()
	return r.Conv2d(x, l.Weight, l.Bias, tensor.Conv2dOptions{Stride: l.Stride, Pad: l.Pad, Dilation: l.Dilation, Groups: l.Groups})
}

// Parameters are the weight and, when present, the bias.
func (l *Conv2d) Parameters() []*tensor.Tensor { return params(l.Weight, l.Bias) }

func (l *Conv2d) freshOutput() {}

// MaxPool2d takes the maximum of each Kernel×Kernel window (Stride 0 means
// Kernel). It saves the position of each maximum, not its input.
type MaxPool2d struct{ Kernel, Stride, Pad int }

// Forward pools x [N, C, H, W].
func (l *MaxPool2d) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	checkKernel("max_pool2d", l.Kernel)
	return r.MaxPool2d(x, l.Kernel, tensor.Conv2dOptions{Stride: l.Stride, Pad: l.Pad})
}

// Parameters is empty.
func (l *MaxPool2d) Parameters() []*tensor.Tensor { return nil }

func (l *MaxPool2d) freshOutput() {}

// AvgPool2d averages each Kernel×Kernel window (Stride 0 means Kernel). It
// saves nothing. Padded positions count in the divisor unless ExcludePad
// (PyTorch's count_include_pad=False).
type AvgPool2d struct {
	Kernel, Stride, Pad int
	ExcludePad          bool
}

// Forward pools x [N, C, H, W].
func (l *AvgPool2d) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	checkKernel("avg_pool2d", l.Kernel)
	return r.AvgPool2d(x, l.Kernel, tensor.Conv2dOptions{Stride: l.Stride, Pad: l.Pad, ExcludePad: l.ExcludePad})
}

// Parameters is empty.
func (l *AvgPool2d) Parameters() []*tensor.Tensor { return nil }

func (l *AvgPool2d) freshOutput() {}

func checkKernel(op string, k int) {
	if k <= 0 {
		panic(&tensor.Error{Op: op, Msg: "kernel size must be > 0"})
	}
}

// Flatten keeps the first dimension and folds the others into one:
// [N, C, H, W] becomes [N, C·H·W]. Its result is a view of its input when
// the input is contiguous.
type Flatten struct{}

// Forward reshapes x to [x.Shape()[0], -1].
func (Flatten) Forward(r *Run, x *tensor.Tensor) *tensor.Tensor {
	if x.Dim() < 1 {
		panic(&tensor.Error{Op: "flatten", Msg: "input " + x.String() + " has no dimensions"})
	}
	return r.Reshape(x, x.Shape()[0], -1)
}

// Parameters is empty.
func (Flatten) Parameters() []*tensor.Tensor { return nil }
