package optim

import (
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// Adam8bit configures Adam with both moments stored in 8 bits, block by
// block (Dettmers et al. 2022; the format is device/quant8.go's): each
// moment of a parameter of n elements is n one-byte codes and one F32
// scale, the block's absmax, per device.Quant8Block (2048) elements. The
// fused step dequantises a block, applies Adam's update with the fresh
// moments and requantises them (device.Adam8bitBlock), so the rounding
// touches the stored state only, never the update being applied.
//
// Its hyper-parameters, defaults and weight decay are Adam's. State: 2
// bytes per element plus 8 bytes per block, 2 + 8/2048 ≈ 2.004 bytes per
// element for a large tensor; every parameter is quantized, small ones
// too (a 384-element layer-norm gain is one block: 2 + 8/384 bytes per
// element), so the figure is exactly 2·n + 8·⌈n/2048⌉ bytes per parameter
// of n elements. Parameters and gradients must be F32.
//
// Buffers: "exp_avg_codes" and "exp_avg_sq_codes" (U8, the parameter's
// shape) and "exp_avg_scale" and "exp_avg_sq_scale" (F32, ⌈n/2048⌉). In a
// State the codes are the numbers 0…255 as float32, exact.
type Adam8bit Adam

// AdamW8bit is Adam8bit with AdamW's decoupled weight decay.
type AdamW8bit AdamW

// NewAdam8bit returns an 8-bit Adam optimizer for params (one group with
// cfg's LR and WeightDecay; params may be empty) followed by groups.
func NewAdam8bit(params []*tensor.Tensor, cfg Adam8bit, groups ...Group) (*Optimizer, error) {
	r, err := newAdamRule("Adam8bit", cfg.Beta1, cfg.Beta2, cfg.Eps, false)
	if err != nil {
		return nil, err
	}
	return newOptimizer(adam8Rule{r}, "Adam8bit", params, cfg.LR, cfg.WeightDecay, groups)
}

// NewAdamW8bit returns an 8-bit AdamW optimizer.
func NewAdamW8bit(params []*tensor.Tensor, cfg AdamW8bit, groups ...Group) (*Optimizer, error) {
	r, err := newAdamRule("AdamW8bit", cfg.Beta1, cfg.Beta2, cfg.Eps, true)
	if err != nil {
		return nil, err
	}
	return newOptimizer(adam8Rule{r}, "AdamW8bit", params, cfg.LR, cfg.WeightDecay, groups)
}

type adam8Rule struct{ adamRule }

func (r adam8Rule) name() string { return r.adamRule.name() + "8bit" }

// inPlace: the fused kernel, or its host composition, which stages
// through pooled Go buffers and allocates nothing on the device.
func (adam8Rule) inPlace(device.Device) bool { return true }

// groups is false: the 8-bit update is its own kernel, with no group
// form (adamRule's, which it would inherit, updates F32 moments).
func (adam8Rule) groups(device.Device) bool { return false }

var adam8Buffers = []string{"exp_avg_codes", "exp_avg_sq_codes", "exp_avg_scale", "exp_avg_sq_scale"}

func (adam8Rule) buffers() []string { return adam8Buffers }

func (adam8Rule) specs(p *tensor.Tensor) []bufSpec {
	nb := []int{device.Quant8Blocks(p.Len())}
	return []bufSpec{
		{name: adam8Buffers[0], dtype: tensor.U8, shape: p.Shape()},
		{name: adam8Buffers[1], dtype: tensor.U8, shape: p.Shape()},
		{name: adam8Buffers[2], dtype: tensor.F32, shape: nb},
		{name: adam8Buffers[3], dtype: tensor.F32, shape: nb},
	}
}

func (adam8Rule) elementsPer(b string) int {
	if b == adam8Buffers[2] || b == adam8Buffers[3] {
		return device.Quant8Block
	}
	return 1
}

func (r adam8Rule) update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	t := float64(h.t)
	tensor.Adam8bitStep(p, g, bufs[0], bufs[1], bufs[2], bufs[3], device.AdamHyper{
		LR: h.lr, Beta1: r.beta1, Beta2: r.beta2, Eps: r.eps, WeightDecay: h.wd,
		Decoupled:       r.decoupled,
		BiasCorrection1: 1 - math.Pow(r.beta1, t),
		BiasCorrection2: 1 - math.Pow(r.beta2, t),
		GradScale:       h.gradScale,
	})
}
