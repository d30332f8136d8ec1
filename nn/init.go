package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Init says how a parameter's initial values are drawn. Its scale may
// depend on the parameter's shape (Kaiming and Xavier read fan-in and
// fan-out from it). The zero Init is "unset": layer configs replace it with
// the layer's default.
type Init struct {
	kind initKind
	a, b float64
}

type initKind uint8

const (
	initUnset initKind = iota
	initConstant
	initNormal
	initUniform
	initKaimingNormal
	initKaimingUniform
	initXavierNormal
	initXavierUniform
)

// ReLUGain is the gain Kaiming initialisation uses for layers followed by a
// ReLU (√2).
const ReLUGain = math.Sqrt2

// Zeros fills with 0 (biases, LayerNorm shifts).
func Zeros() Init { return Init{kind: initConstant} }

// Ones fills with 1 (LayerNorm scales).
func Ones() Init { return Init{kind: initConstant, a: 1} }

// Constant fills with v.
func Constant(v float64) Init { return Init{kind: initConstant, a: v} }

// Normal draws from N(mean, std²).
func Normal(mean, std float64) Init { return Init{kind: initNormal, a: mean, b: std} }

// Uniform draws from [low, high).
func Uniform(low, high float64) Init { return Init{kind: initUniform, a: low, b: high} }

// KaimingNormal draws from N(0, (gain/√fanIn)²) (He et al. 2015; gain
// ReLUGain before a ReLU, 1 for a linear layer).
func KaimingNormal(gain float64) Init { return Init{kind: initKaimingNormal, a: gain} }

// KaimingUniform draws from [-gain·√(3/fanIn), gain·√(3/fanIn)): the same
// variance as KaimingNormal.
func KaimingUniform(gain float64) Init { return Init{kind: initKaimingUniform, a: gain} }

// XavierNormal draws from N(0, gain²·2/(fanIn+fanOut)) (Glorot and Bengio
// 2010).
func XavierNormal(gain float64) Init { return Init{kind: initXavierNormal, a: gain} }

// XavierUniform draws from ±gain·√(6/(fanIn+fanOut)).
func XavierUniform(gain float64) Init { return Init{kind: initXavierUniform, a: gain} }

// GPTResidual is GPT-2's initialisation of the projections that write into
// the residual stream: N(0, (0.02/√(2·layers))²), so that the stream's
// variance does not grow with depth.
func GPTResidual(layers int) Init {
	return Normal(0, 0.02/math.Sqrt(2*float64(max(layers, 1))))
}

// IsSet reports whether i was made by one of the constructors above.
func (i Init) IsSet() bool { return i.kind != initUnset }

// Or returns i, or def when i is unset.
func (i Init) Or(def Init) Init {
	if i.IsSet() {
		return i
	}
	return def
}

func (i Init) String() string {
	switch i.kind {
	case initConstant:
		return fmt.Sprintf("constant(%g)", i.a)
	case initNormal:
		return fmt.Sprintf("normal(%g, %g)", i.a, i.b)
	case initUniform:
		return fmt.Sprintf("uniform(%g, %g)", i.a, i.b)
	case initKaimingNormal:
		return fmt.Sprintf("kaiming_normal(gain %g)", i.a)
	case initKaimingUniform:
		return fmt.Sprintf("kaiming_uniform(gain %g)", i.a)
	case initXavierNormal:
		return fmt.Sprintf("xavier_normal(gain %g)", i.a)
	case initXavierUniform:
		return fmt.Sprintf("xavier_uniform(gain %g)", i.a)
	}
	return "unset"
}

// Fans returns the fan-in and fan-out of a weight of the given shape, as
// PyTorch defines them: [out, in, k…] has fan-in in·∏k and fan-out
// out·∏k; a vector has both equal to its length.
func Fans(shape []int) (fanIn, fanOut int) {
	switch len(shape) {
	case 0:
		return 1, 1
	case 1:
		return shape[0], shape[0]
	}
	receptive := 1
	for _, d := range shape[2:] {
		receptive *= d
	}
	return shape[1] * receptive, shape[0] * receptive
}

// draw resolves i against a shape: a constant, or a distribution.
func (i Init) draw(shape []int) (dist device.Distribution, a, b float64, constant bool) {
	fanIn, fanOut := Fans(shape)
	switch i.kind {
	case initConstant:
		return 0, i.a, 0, true
	case initNormal:
		return device.Normal, i.a, i.b, false
	case initUniform:
		return device.Uniform, i.a, i.b, false
	case initKaimingNormal:
		return device.Normal, 0, i.a / math.Sqrt(float64(fanIn)), false
	case initKaimingUniform:
		bound := i.a * math.Sqrt(3/float64(fanIn))
		return device.Uniform, -bound, bound, false
	case initXavierNormal:
		return device.Normal, 0, i.a * math.Sqrt(2/float64(fanIn+fanOut)), false
	case initXavierUniform:
		bound := i.a * math.Sqrt(6/float64(fanIn+fanOut))
		return device.Uniform, -bound, bound, false
	}
	panic("nn: draw of an unset Init")
}

// ParamSeed is the seed a parameter at path is drawn with, given the
// model's seed: a hash of both, so a parameter's values depend on nothing
// else — not on how many parameters were drawn before it.
func ParamSeed(modelSeed uint64, path string) uint64 {
	return mix64(modelSeed ^ mix64(Salt(path)))
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Builder makes the parameters of a model: on Dev, of DType (F32 when
// unset; F64 for gradient checks on CPU), each drawn with ParamSeed(Seed,
// path), so that one configuration gives bit-identical weights whatever the
// order in which its layers are built. It remembers what it made so that a
// constructor failing half-way can release it (Abort).
//
// With Defer, the parameters hold no memory: each is a tensor.Deferred
// whose draws are made where a sharding places it (dist's ZeRO-3 draws
// one block at a time), bit for bit the values it would have had. Such a
// model cannot run until then.
type Builder struct {
	Dev   device.Device
	Seed  uint64
	DType tensor.DType
	Defer bool
	made  []*tensor.Tensor
}

// Param allocates a parameter (memory.Parameter), fills it from init,
// names it path and marks it as requiring grad.
func (b *Builder) Param(path string, shape []int, init Init) (*tensor.Tensor, error) {
	if b.Dev == nil {
		return nil, fmt.Errorf("nn: parameter %q: Builder has no device", path)
	}
	if path == "" {
		return nil, fmt.Errorf("nn: parameter of shape %v has an empty path", shape)
	}
	for i, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("nn: parameter %q: dimension %d of shape %v is %d, want > 0", path, i, shape, d)
		}
	}
	if !init.IsSet() {
		return nil, fmt.Errorf("nn: parameter %q: no initialiser", path)
	}
	dt := b.DType
	if dt == device.Invalid {
		dt = tensor.F32
	}
	if !dt.IsFloat() {
		return nil, fmt.Errorf("nn: parameter %q: dtype %v is not a float type", path, dt)
	}
	dist, lo, hi, constant := init.draw(shape)
	var p *tensor.Tensor
	var err error
	if b.Defer {
		dev, seed := b.Dev, ParamSeed(b.Seed, path)
		p, err = tensor.Deferred(dev, dt, shape, memory.Parameter, func(v device.View) error {
			if constant {
				dev.Fill(v, lo)
			} else {
				dev.Random(v, dist, lo, hi, seed)
			}
			return nil
		})
	} else if constant {
		p, err = tensor.Full(b.Dev, dt, shape, lo, memory.Parameter)
	} else {
		p, err = tensor.Rand(b.Dev, dt, shape, dist, lo, hi, ParamSeed(b.Seed, path), memory.Parameter)
	}
	if err != nil {
		return nil, fmt.Errorf("nn: parameter %q: %w", path, err)
	}
	p.SetName(path).SetRequiresGrad(true)
	b.made = append(b.made, p)
	return p, nil
}

// Abort releases every parameter the builder made: the clean-up of a
// constructor that fails half-way.
func (b *Builder) Abort() {
	for _, p := range b.made {
		p.Release()
	}
	b.made = nil
}

// NewParameter makes one F32 parameter drawn with model seed 0 (see
// Builder for other seeds and dtypes).
func NewParameter(dev device.Device, path string, shape []int, init Init) (*tensor.Tensor, error) {
	b := &Builder{Dev: dev}
	return b.Param(path, shape, init)
}
