package optim

import (
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// Adam configures Adam (Kingma & Ba) with PyTorch's conventions: weight
// decay is an L2 term added to the gradient, g += WeightDecay·p, and so is
// scaled by the adaptive step like the rest of the gradient. At the t-th
// update of a parameter:
//
//	m = β1·m + (1-β1)·g
//	v = β2·v + (1-β2)·g²
//	p -= lr/(1-β1^t) · m / (√v/√(1-β2^t) + ε)
//
// Zero fields take PyTorch's defaults: β1 0.9, β2 0.999, ε 1e-8 (a β of
// exactly 0 cannot be asked for). Adam keeps two F32 buffers per parameter
// ("exp_avg" m and "exp_avg_sq" v): 8 bytes per element.
type Adam struct {
	LR          float64 // base learning rate, > 0
	Beta1       float64 // in [0, 1); 0: 0.9
	Beta2       float64 // in [0, 1); 0: 0.999
	Eps         float64 // > 0; 0: 1e-8
	WeightDecay float64 // >= 0
}

// AdamW configures AdamW (Loshchilov & Hutter): Adam with decoupled weight
// decay, p -= lr·WeightDecay·p before the Adam step, which leaves the
// gradient moments alone. Defaults and state are Adam's; WeightDecay 0
// means none (PyTorch's default is 0.01).
type AdamW struct {
	LR          float64 // base learning rate, > 0
	Beta1       float64 // in [0, 1); 0: 0.9
	Beta2       float64 // in [0, 1); 0: 0.999
	Eps         float64 // > 0; 0: 1e-8
	WeightDecay float64 // >= 0
}

// NewAdam returns an Adam optimizer for params (one group with cfg's LR and
// WeightDecay; params may be empty) followed by groups.
func NewAdam(params []*tensor.Tensor, cfg Adam, groups ...Group) (*Optimizer, error) {
	r, err := newAdamRule("Adam", cfg.Beta1, cfg.Beta2, cfg.Eps, false)
	if err != nil {
		return nil, err
	}
	return newOptimizer(r, "Adam", params, cfg.LR, cfg.WeightDecay, groups)
}

// NewAdamW returns an AdamW optimizer for params (one group with cfg's LR
// and WeightDecay; params may be empty) followed by groups.
func NewAdamW(params []*tensor.Tensor, cfg AdamW, groups ...Group) (*Optimizer, error) {
	r, err := newAdamRule("AdamW", cfg.Beta1, cfg.Beta2, cfg.Eps, true)
	if err != nil {
		return nil, err
	}
	return newOptimizer(r, "AdamW", params, cfg.LR, cfg.WeightDecay, groups)
}

type adamRule struct {
	beta1, beta2, eps float64
	decoupled         bool
}

func newAdamRule(cfgName string, beta1, beta2, eps float64, decoupled bool) (adamRule, error) {
	if beta1 == 0 {
		beta1 = 0.9
	}
	if beta2 == 0 {
		beta2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	if err := checkUnit(cfgName+".Beta1", beta1); err != nil {
		return adamRule{}, err
	}
	if err := checkUnit(cfgName+".Beta2", beta2); err != nil {
		return adamRule{}, err
	}
	if err := checkNonNeg(cfgName+".Eps", eps); err != nil {
		return adamRule{}, err
	}
	return adamRule{beta1: beta1, beta2: beta2, eps: eps, decoupled: decoupled}, nil
}

func (r adamRule) name() string {
	if r.decoupled {
		return "adamw"
	}
	return "adam"
}

func (adamRule) buffers() []string { return []string{"exp_avg", "exp_avg_sq"} }

func (r adamRule) specs(p *tensor.Tensor) []bufSpec { return elementSpecs(p, r.buffers()) }

func (adamRule) inPlace(d device.Device) bool { return device.Has(d, device.CapAdamStep) }

func (r adamRule) update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	tensor.AdamStep(p, g, bufs[0], bufs[1], r.hyper(h))
}

// groups: Adam's in-place updates go to the device together where it
// has a group kernel (device.AdamGroupStepper).
func (adamRule) groups(d device.Device) bool {
	return device.Has(d, device.CapAdamStep) && device.Has(d, device.CapAdamGroupStep)
}

func (r adamRule) updateGroup(ps, gs []*tensor.Tensor, bufs [][]*tensor.Tensor, h stepArgs) {
	ms, vs := make([]*tensor.Tensor, len(bufs)), make([]*tensor.Tensor, len(bufs))
	for i, b := range bufs {
		ms[i], vs[i] = b[0], b[1]
	}
	tensor.AdamSteps(ps, gs, ms, vs, r.hyper(h))
}

// hyper is the device's description of an update with h.
func (r adamRule) hyper(h stepArgs) device.AdamHyper {
	t := float64(h.t)
	return device.AdamHyper{
		LR: h.lr, Beta1: r.beta1, Beta2: r.beta2, Eps: r.eps, WeightDecay: h.wd,
		Decoupled:       r.decoupled,
		BiasCorrection1: 1 - math.Pow(r.beta1, t),
		BiasCorrection2: 1 - math.Pow(r.beta2, t),
		GradScale:       h.gradScale,
	}
}
